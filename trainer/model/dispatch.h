/* moekit: the token dispatcher between the router and the experts.
 *
 * The MoE block calls only these functions, so expert parallelism plugs in
 * here: the local dispatcher (EP = 1) builds the expert-major plan on this
 * rank; an expert-parallel one exchanges counts and tokens with the ranks
 * that own the experts and returns rows for the local experts only. */
#ifndef MOE_DISPATCH_H
#define MOE_DISPATCH_H

#include "../backend/backend.h"

typedef struct moe_dispatcher moe_dispatcher;

struct moe_dispatcher {
    const char *name;
    void *ctx;
    /* Upper bound of expert-major rows this rank may receive for N tokens. */
    int (*max_rows)(moe_dispatcher *d, int N, int K);
    /* Route: from topk_idx/topk_w of N local tokens, fill plan (for local
     * experts), x_perm and p_perm, and route_count[E_global] (host): how many
     * (token, slot) pairs of THIS rank's tokens chose each global expert. */
    int (*dispatch)(moe_dispatcher *d, moe_backend *be, moe_route_plan *plan, int64_t *route_count,
                    act *x_perm, real *p_perm, const act *x, const int32_t *topk_idx,
                    const real *topk_w, int N, int C, int E, int K, moe_err *e);
    /* out[N, C] = sum over each token's slots of the expert outputs */
    int (*combine)(moe_dispatcher *d, moe_backend *be, act *out, const act *y_perm,
                   const moe_route_plan *plan, int C, moe_err *e);
    /* backward of combine: dy_perm rows from dout */
    int (*combine_bwd)(moe_dispatcher *d, moe_backend *be, act *dy_perm, const act *dout,
                       const moe_route_plan *plan, int C, moe_err *e);
    /* backward of dispatch: dx[N, C] (written) and dtopk_w[N, K] */
    int (*dispatch_bwd)(moe_dispatcher *d, moe_backend *be, act *dx, real *dtopk_w,
                        const act *dx_perm, const real *dp_perm, const moe_route_plan *plan,
                        int C, moe_err *e);
    void (*destroy)(moe_dispatcher *d);
};

/* EP = 1: everything stays on this rank. */
int dispatcher_local_create(moe_dispatcher **out, moe_err *e);

#endif

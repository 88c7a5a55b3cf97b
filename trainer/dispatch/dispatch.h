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
    /* Rows beyond max_rows (expert buffers sized by capacity) run in further
     * passes, no token dropped. NULL: always one pass. passes() says how
     * many passes the layer of `plan` takes since its last dispatch (the
     * same number on every rank) and fills layer_count[E_local] (when not
     * NULL) with the rows of each local expert over all passes. dispatch
     * fills pass 0; dispatch_pass fills plan, x_perm and p_perm with pass
     * `pass` from the layer's input x and topk_w as dispatch got them.
     * combine, combine_bwd and dispatch_bwd work on the pass dispatched
     * last; combine's and dispatch_bwd's outputs are complete once every
     * pass went through them. */
    int (*passes)(moe_dispatcher *d, const moe_route_plan *plan, int64_t *layer_count);
    int (*dispatch_pass)(moe_dispatcher *d, moe_backend *be, moe_route_plan *plan, int pass,
                         act *x_perm, real *p_perm, const act *x, const real *topk_w, int C,
                         moe_err *e);
    /* Allocate now what dispatching N tokens of K slots and C columns over
     * n_layers layers needs (so the memory plan sees it). NULL: nothing. */
    int (*reserve)(moe_dispatcher *d, moe_backend *be, int N, int K, int C, int n_layers,
                   moe_err *e);
    void (*destroy)(moe_dispatcher *d);
};

/* EP = 1: everything stays on this rank. */
int dispatcher_local_create(moe_dispatcher **out, moe_err *e);

#endif

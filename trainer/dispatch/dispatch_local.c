/* moekit: the local token dispatcher (expert parallelism of 1). */
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"

static int local_max_rows(moe_dispatcher *d, int N, int K) { return N * K; }

static int local_dispatch(moe_dispatcher *d, moe_backend *be, moe_route_plan *plan,
                          int64_t *route_count, act *x_perm, real *p_perm, const act *x,
                          const int32_t *topk_idx, const real *topk_w, int N, int C, int E, int K,
                          moe_err *e)
{
    if (be->route_plan(be, plan, topk_idx, N, K, E, e))
        return -1;
    memcpy(route_count, plan->expert_count, sizeof(int64_t) * E);
    be->permute(be, x_perm, p_perm, x, topk_w, plan, C);
    return 0;
}

static int local_combine(moe_dispatcher *d, moe_backend *be, act *out, const act *y_perm,
                         const moe_route_plan *plan, int C, moe_err *e)
{
    be->combine(be, out, y_perm, plan, C);
    return 0;
}

static int local_combine_bwd(moe_dispatcher *d, moe_backend *be, act *dy_perm, const act *dout,
                             const moe_route_plan *plan, int C, moe_err *e)
{
    be->combine_bwd(be, dy_perm, dout, plan, C);
    return 0;
}

static int local_dispatch_bwd(moe_dispatcher *d, moe_backend *be, act *dx, real *dtopk_w,
                              const act *dx_perm, const real *dp_perm, const moe_route_plan *plan,
                              int C, moe_err *e)
{
    be->permute_bwd(be, dx, dtopk_w, dx_perm, dp_perm, plan, C);
    return 0;
}

static void local_destroy(moe_dispatcher *d) { free(d); }

int dispatcher_local_create(moe_dispatcher **out, moe_err *e)
{
    moe_dispatcher *d = calloc(1, sizeof *d);
    if (!d)
        return moe_errf(e, "out of memory");
    d->name = "local";
    d->max_rows = local_max_rows;
    d->dispatch = local_dispatch;
    d->combine = local_combine;
    d->combine_bwd = local_combine_bwd;
    d->dispatch_bwd = local_dispatch_bwd;
    d->destroy = local_destroy;
    *out = d;
    return 0;
}

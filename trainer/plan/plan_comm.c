/* moekit: the plan's communicators (plan_comm.h). */
#include "plan_comm.h"

#include <stdlib.h>

static int nop_allreduce(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e)
{
    (void)c, (void)buf, (void)n, (void)t, (void)e;
    return 0;
}
static int nop_allgather(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t,
                         moe_err *e)
{
    (void)c, (void)send, (void)recv, (void)n, (void)t, (void)e;
    return 0;
}
static int nop_allgatherv(moe_comm *c, const void *send, size_t n, void *recv,
                          const size_t *counts, const size_t *displs, moe_dtype t, moe_err *e)
{
    (void)c, (void)send, (void)n, (void)recv, (void)counts, (void)displs, (void)t, (void)e;
    return 0;
}
static int nop_alltoallv(moe_comm *c, const void *send, const size_t *sc, const size_t *sd,
                         void *recv, const size_t *rc, const size_t *rd, moe_err *e)
{
    (void)c, (void)send, (void)sc, (void)sd, (void)recv, (void)rc, (void)rd, (void)e;
    return 0;
}
static int nop_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e)
{
    (void)c, (void)buf, (void)bytes, (void)root, (void)e;
    return 0;
}
static int nop_barrier(moe_comm *c, moe_err *e)
{
    (void)c, (void)e;
    return 0;
}
static int nop_reduce_scatter(moe_comm *c, const void *send, void *recv, const size_t *counts,
                              moe_dtype t, moe_err *e)
{
    (void)c, (void)send, (void)recv, (void)counts, (void)t, (void)e;
    return 0;
}
static int nop_split(moe_comm *c, int color, int key, const char *name, moe_comm **out,
                     moe_err *e)
{
    (void)c, (void)color, (void)key, (void)name, (void)out;
    return moe_errf(e, "a memory plan's communicator is not split: plan_comm_create each group");
}
static void nop_abort(moe_comm *c, int code)
{
    (void)c;
    exit(code);
}
static void plan_comm_destroy(moe_comm *c)
{
    comm_free_fields(c);
    free(c);
}

static const moe_comm_ops PLAN_OPS = {nop_allreduce, nop_allgather,      nop_allgatherv,
                                      nop_alltoallv, nop_broadcast,      nop_barrier,
                                      nop_reduce_scatter, nop_split,     nop_abort,
                                      plan_comm_destroy, NULL, NULL, NULL, NULL};

int plan_comm_create(moe_comm **out, const char *name, int size, moe_err *e)
{
    moe_comm *c = calloc(1, sizeof *c);
    if (!c)
        return moe_errf(e, "out of memory");
    if (comm_init_fields(c, "plan", name, 0, size, NULL, &PLAN_OPS, NULL, e)) {
        free(c);
        return -1;
    }
    c->device_memory = 1; /* the dispatcher stages nothing through host memory */
    *out = c;
    return 0;
}

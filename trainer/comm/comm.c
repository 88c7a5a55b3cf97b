/* moekit: the communicator's calls, each watched by the watchdog. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "watchdog.h"

size_t moe_dtype_size(moe_dtype t)
{
    switch (t) {
    case MOE_DT_REAL: return sizeof(real);
    case MOE_DT_DOUBLE: return sizeof(double);
    case MOE_DT_INT64: return sizeof(int64_t);
    case MOE_DT_BYTE: return 1;
    }
    return 1;
}

int comm_init_fields(moe_comm *c, const char *impl, const char *name, int rank, int size,
                     const int *world_ranks, const moe_comm_ops *ops, void *ctx, moe_err *e)
{
    c->impl = impl;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->rank = rank;
    c->size = size;
    c->ops = ops;
    c->impl_ctx = ctx;
    c->world_ranks = malloc(sizeof(int) * (size_t)size);
    if (!c->world_ranks)
        return moe_errf(e, "out of memory for the %s communicator", name);
    for (int r = 0; r < size; r++)
        c->world_ranks[r] = world_ranks ? world_ranks[r] : r;
    watchdog_track(c);
    return 0;
}

void comm_free_fields(moe_comm *c)
{
    watchdog_untrack(c);
    free(c->world_ranks);
    c->world_ranks = NULL;
}

/* Start one collective under the watchdog, numbered (c->issued is its seq
 * while the implementation queues it), and name it in any error. */
static int watched(moe_comm *c, const char *opname, int rc, moe_err *e)
{
    watchdog_leave();
    if (rc)
        return moe_err_prefix(e, "rank %d: %s on the %s group", c->world_ranks[c->rank], opname,
                              c->name);
    return 0;
}
#define START(c, opname) (watchdog_enter(c, opname), (c)->last_op = opname, ++(c)->issued)
#define WATCHED(c, opname, call)                                                                   \
    do {                                                                                           \
        START(c, opname);                                                                          \
        if (watched(c, opname, (call), e))                                                         \
            return -1;                                                                             \
        return comm_wait(&(moe_comm_req){c, c->issued}, e);                                        \
    } while (0)
#define WATCHED_START(c, opname, call, req)                                                        \
    do {                                                                                           \
        START(c, opname);                                                                          \
        *(req) = (moe_comm_req){c, c->issued};                                                     \
        return watched(c, opname, (call), e);                                                      \
    } while (0)

int comm_wait(const moe_comm_req *req, moe_err *e)
{
    moe_comm *c = req->c;
    if (!c->ops->wait || !c->be)
        return 0;
    if (c->ops->wait(c, req->seq, e))
        return moe_err_prefix(e, "rank %d: waiting for %s on the %s group",
                              c->world_ranks[c->rank], c->last_op ? c->last_op : "a collective",
                              c->name);
    return 0;
}

int comm_bind(moe_comm *c, struct moe_backend *be, moe_err *e)
{
    if (c->ops->bind && c->ops->bind(c, be, e))
        return moe_err_prefix(e, "binding the %s group to the %s backend", c->name, be->name);
    c->be = be;
    return 0;
}

int comm_alltoallv_start(moe_comm *c, const void *send, const size_t *scounts,
                         const size_t *sdispls, void *recv, const size_t *rcounts,
                         const size_t *rdispls, moe_comm_req *req, moe_err *e)
{
    WATCHED_START(c, "alltoallv",
                  c->ops->alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls, e), req);
}

int comm_reduce_scatter_sum_start(moe_comm *c, const void *send, void *recv, const size_t *counts,
                                  moe_dtype t, moe_comm_req *req, moe_err *e)
{
    WATCHED_START(c, "reduce_scatter", c->ops->reduce_scatter_sum(c, send, recv, counts, t, e),
                  req);
}

int comm_allgatherv_start(moe_comm *c, const void *send, size_t n, void *recv,
                          const size_t *counts, const size_t *displs, moe_dtype t,
                          moe_comm_req *req, moe_err *e)
{
    if (n != counts[c->rank])
        return moe_errf(e, "allgatherv on the %s group: rank %d sends %zu elements but the "
                           "counts say %zu", c->name, c->rank, n, counts[c->rank]);
    WATCHED_START(c, "allgatherv", c->ops->allgatherv(c, send, n, recv, counts, displs, t, e),
                  req);
}

int comm_allreduce_sum(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e)
{
    WATCHED(c, "allreduce", c->ops->allreduce_sum(c, buf, n, t, e));
}

int comm_allgather(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t, moe_err *e)
{
    WATCHED(c, "allgather", c->ops->allgather(c, send, recv, n, t, e));
}

int comm_allgatherv(moe_comm *c, const void *send, size_t n, void *recv, const size_t *counts,
                    const size_t *displs, moe_dtype t, moe_err *e)
{
    if (n != counts[c->rank])
        return moe_errf(e, "allgatherv on the %s group: rank %d sends %zu elements but the "
                           "counts say %zu", c->name, c->rank, n, counts[c->rank]);
    WATCHED(c, "allgatherv", c->ops->allgatherv(c, send, n, recv, counts, displs, t, e));
}

int comm_alltoallv(moe_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                   void *recv, const size_t *rcounts, const size_t *rdispls, moe_err *e)
{
    WATCHED(c, "alltoallv", c->ops->alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls, e));
}

int comm_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e)
{
    if (root < 0 || root >= c->size)
        return moe_errf(e, "broadcast on the %s group: root %d is not a rank of %d", c->name, root,
                        c->size);
    WATCHED(c, "broadcast", c->ops->broadcast(c, buf, bytes, root, e));
}

int comm_barrier(moe_comm *c, moe_err *e) { WATCHED(c, "barrier", c->ops->barrier(c, e)); }

int comm_reduce_scatter_sum(moe_comm *c, const void *send, void *recv, const size_t *counts,
                            moe_dtype t, moe_err *e)
{
    WATCHED(c, "reduce_scatter", c->ops->reduce_scatter_sum(c, send, recv, counts, t, e));
}

int comm_split(moe_comm *c, int color, int key, const char *name, moe_comm **out, moe_err *e)
{
    START(c, "split");
    if (watched(c, "split", c->ops->split(c, color, key, name, out, e), e))
        return -1;
    if (c->be && comm_bind(*out, c->be, e)) {
        comm_destroy(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

void comm_destroy(moe_comm *c)
{
    if (c)
        c->ops->destroy(c);
}

int comm_agree(moe_comm *c, int failed, const char *what, moe_err *e)
{
    int64_t *flags = calloc((size_t)c->size, sizeof *flags);
    if (!flags)
        return moe_errf(e, "out of memory");
    int64_t mine = failed ? 1 : 0;
    moe_err ce = {{0}};
    if (comm_allgather(c, &mine, flags, 1, MOE_DT_INT64, &ce)) {
        free(flags);
        if (!failed)
            *e = ce;
        return -1;
    }
    int first = -1;
    for (int r = 0; r < c->size && first < 0; r++)
        if (flags[r])
            first = r;
    free(flags);
    if (first < 0)
        return 0;
    /* the failing rank's own words reach every rank */
    char msg[MOE_ERR_LEN];
    if (c->rank == first)
        snprintf(msg, sizeof msg, "%s", e->msg);
    if (comm_broadcast(c, msg, sizeof msg, first, &ce)) {
        if (!failed)
            *e = ce;
        return -1;
    }
    msg[sizeof msg - 1] = 0;
    if (!failed)
        moe_errf(e, "%s failed on rank %d: %s", what, c->world_ranks[first], msg);
    return -1;
}

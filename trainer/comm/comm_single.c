/* moekit: the communicator of a world of one rank: every collective is a
 * copy (or nothing), so the trainer runs the same code with or without a
 * launcher. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

static int single_allreduce(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e) { return 0; }

static int single_allgather(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t,
                            moe_err *e)
{
    if (recv != send)
        memmove(recv, send, n * moe_dtype_size(t));
    return 0;
}

static int single_allgatherv(moe_comm *c, const void *send, size_t n, void *recv,
                             const size_t *counts, const size_t *displs, moe_dtype t, moe_err *e)
{
    memmove((char *)recv + displs[0] * moe_dtype_size(t), send, n * moe_dtype_size(t));
    return 0;
}

static int single_alltoallv(moe_comm *c, const void *send, const size_t *scounts,
                            const size_t *sdispls, void *recv, const size_t *rcounts,
                            const size_t *rdispls, moe_err *e)
{
    if (scounts[0] != rcounts[0])
        return moe_errf(e, "alltoallv: sends %zu bytes to itself but expects %zu", scounts[0],
                        rcounts[0]);
    memmove((char *)recv + rdispls[0], (const char *)send + sdispls[0], scounts[0]);
    return 0;
}

static int single_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e) { return 0; }
static int single_barrier(moe_comm *c, moe_err *e) { return 0; }

static int single_reduce_scatter(moe_comm *c, const void *send, void *recv, const size_t *counts,
                                 moe_dtype t, moe_err *e)
{
    memmove(recv, send, counts[0] * moe_dtype_size(t));
    return 0;
}

static int single_split(moe_comm *c, int color, int key, const char *name, moe_comm **out,
                        moe_err *e)
{
    if (comm_single_create(out, e))
        return -1;
    snprintf((*out)->name, sizeof (*out)->name, "%s", name);
    (*out)->world_ranks[0] = c->world_ranks[0];
    return 0;
}

static void single_abort(moe_comm *c, int code) { exit(code); }

static void single_destroy(moe_comm *c)
{
    comm_free_fields(c);
    free(c);
}

static const moe_comm_ops SINGLE_OPS = {
    .allreduce_sum = single_allreduce,
    .allgather = single_allgather,
    .allgatherv = single_allgatherv,
    .alltoallv = single_alltoallv,
    .broadcast = single_broadcast,
    .barrier = single_barrier,
    .reduce_scatter_sum = single_reduce_scatter,
    .split = single_split,
    .abort_job = single_abort,
    .destroy = single_destroy,
};

int comm_single_create(moe_comm **out, moe_err *e)
{
    moe_comm *c = calloc(1, sizeof *c);
    if (!c)
        return moe_errf(e, "out of memory");
    if (comm_init_fields(c, "single", "world", 0, 1, NULL, &SINGLE_OPS, NULL, e)) {
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

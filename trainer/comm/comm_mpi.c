/* moekit: the MPI communicator (Open MPI; host memory, the CPU backend's
 * buffers). Built when rules.mk finds MPI (MOE_HAVE_MPI); without it the
 * constructor says how to get it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

int comm_mpi_launched(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return 1;
    }
    return 0;
}

#ifndef MOE_HAVE_MPI

int comm_mpi_built(void) { return 0; }

void comm_mpi_set_max_count(size_t n) { (void)n; }

int comm_mpi_create(moe_comm **out, moe_err *e)
{
    return moe_errf(e, "this moe-train was built without MPI, which CPU ranks need to talk: "
                       "install Open MPI (scripts/install-deps.sh installs openmpi-bin and "
                       "libopenmpi-dev) and rebuild");
}

#else

#include <limits.h>
#include <mpi.h>

#include "../backend/backend.h"

typedef struct {
    MPI_Comm comm;
    int owns_mpi; /* the world: MPI_Finalize on destroy */
} mpi_ctx;

static MPI_Comm CM(moe_comm *c) { return ((mpi_ctx *)c->impl_ctx)->comm; }

static MPI_Datatype mpi_type(moe_dtype t)
{
    switch (t) {
    case MOE_DT_REAL: return sizeof(real) == 8 ? MPI_DOUBLE : MPI_FLOAT;
    case MOE_DT_DOUBLE: return MPI_DOUBLE;
    case MOE_DT_INT64: return MPI_INT64_T;
    case MOE_DT_BYTE: return MPI_BYTE;
    }
    return MPI_BYTE;
}

static int mpi_fail(moe_err *e, int rc, const char *call)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", rc);
    return moe_errf(e, "%s failed: %s", call, s);
}

#define MPI_TRY(call)                                                                              \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS)                                                                    \
            return mpi_fail(e, rc_, #call);                                                        \
    } while (0)

/* The most elements one MPI call carries: MPI's counts are ints, so
 * larger messages go in pieces (parallel.mpi_max_count lowers it, for tests). */
static size_t max_count = INT_MAX;

void comm_mpi_set_max_count(size_t n) { max_count = n > 0 && n < INT_MAX ? n : INT_MAX; }

static size_t piece_of(size_t left) { return left < max_count ? left : max_count; }

static int m_allreduce(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e)
{
    size_t es = moe_dtype_size(t);
    for (size_t o = 0; o < n; o += piece_of(n - o))
        MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, (char *)buf + o * es, (int)piece_of(n - o),
                              mpi_type(t), MPI_SUM, CM(c)));
    return 0;
}

static int m_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e)
{
    for (size_t o = 0; o < bytes; o += piece_of(bytes - o))
        MPI_TRY(MPI_Bcast((char *)buf + o, (int)piece_of(bytes - o), MPI_BYTE, root, CM(c)));
    return 0;
}

/* one broadcast per rank, from its block into everyone's (in place where
 * send is the rank's own block of recv) */
static int m_allgatherv(moe_comm *c, const void *send, size_t n, void *recv, const size_t *counts,
                        const size_t *displs, moe_dtype t, moe_err *e)
{
    size_t es = moe_dtype_size(t);
    char *mine = (char *)recv + displs[c->rank] * es;
    if (mine != send && n)
        memmove(mine, send, n * es);
    for (int r = 0; r < c->size; r++)
        if (m_broadcast(c, (char *)recv + displs[r] * es, counts[r] * es, r, e))
            return -1;
    return 0;
}

static int m_allgather(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t, moe_err *e)
{
    if (n * (size_t)c->size <= max_count) { /* the common small case in one call */
        MPI_TRY(MPI_Allgather(send, (int)n, mpi_type(t), recv, (int)n, mpi_type(t), CM(c)));
        return 0;
    }
    size_t S = (size_t)c->size, counts[S], displs[S];
    for (size_t r = 0; r < S; r++) {
        counts[r] = n;
        displs[r] = r * n;
    }
    return m_allgatherv(c, send, n, recv, counts, displs, t, e);
}

/* point to point in pieces: no int count or displacement to outgrow */
static int m_alltoallv(moe_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                       void *recv, const size_t *rcounts, const size_t *rdispls, moe_err *e)
{
    size_t n_req = 0;
    for (int r = 0; r < c->size; r++)
        n_req += (scounts[r] + max_count - 1) / max_count + (rcounts[r] + max_count - 1) / max_count;
    MPI_Request *req = malloc(sizeof *req * (n_req ? n_req : 1));
    if (!req)
        return moe_errf(e, "out of memory");
    size_t k = 0;
    int rc = MPI_SUCCESS;
    for (int r = 0; r < c->size && rc == MPI_SUCCESS; r++) {
        for (size_t o = 0; o < rcounts[r] && rc == MPI_SUCCESS; o += piece_of(rcounts[r] - o))
            rc = MPI_Irecv((char *)recv + rdispls[r] + o, (int)piece_of(rcounts[r] - o), MPI_BYTE,
                           r, 0, CM(c), &req[k++]);
        for (size_t o = 0; o < scounts[r] && rc == MPI_SUCCESS; o += piece_of(scounts[r] - o))
            rc = MPI_Isend((const char *)send + sdispls[r] + o, (int)piece_of(scounts[r] - o),
                           MPI_BYTE, r, 0, CM(c), &req[k++]);
    }
    if (rc == MPI_SUCCESS)
        rc = MPI_Waitall((int)k, req, MPI_STATUSES_IGNORE);
    free(req);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, rc, "MPI_Isend/MPI_Irecv of an all-to-all");
}

static int m_barrier(moe_comm *c, moe_err *e)
{
    MPI_TRY(MPI_Barrier(CM(c)));
    return 0;
}

/* one reduce per block to its owner, in pieces; in place where recv is the
 * rank's own block of send */
static int m_reduce_scatter(moe_comm *c, const void *send, void *recv, const size_t *counts,
                            moe_dtype t, moe_err *e)
{
    size_t es = moe_dtype_size(t), off = 0;
    for (int r = 0; r < c->size; r++) {
        const char *blk = (const char *)send + off * es;
        int in_place = r == c->rank && blk == recv;
        for (size_t o = 0; o < counts[r]; o += piece_of(counts[r] - o)) {
            const void *sb = in_place ? MPI_IN_PLACE : blk + o * es;
            void *rb = r == c->rank ? (char *)recv + o * es : NULL;
            MPI_TRY(MPI_Reduce(sb, rb, (int)piece_of(counts[r] - o), mpi_type(t), MPI_SUM, r,
                               CM(c)));
        }
        off += counts[r];
    }
    return 0;
}

static const moe_comm_ops MPI_OPS;

static int wrap(moe_comm **out, MPI_Comm comm, int owns, const char *name, moe_err *e)
{
    int rank, size, wr;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_TRY(MPI_Comm_rank(comm, &rank));
    MPI_TRY(MPI_Comm_size(comm, &size));
    MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &wr));
    int *wranks = malloc(sizeof(int) * (size_t)size);
    moe_comm *c = calloc(1, sizeof *c);
    mpi_ctx *x = calloc(1, sizeof *x);
    if (!wranks || !c || !x) {
        free(wranks);
        free(c);
        free(x);
        return moe_errf(e, "out of memory");
    }
    int rc = MPI_Allgather(&wr, 1, MPI_INT, wranks, 1, MPI_INT, comm);
    if (rc != MPI_SUCCESS) {
        free(wranks);
        free(c);
        free(x);
        return mpi_fail(e, rc, "MPI_Allgather of the world ranks");
    }
    x->comm = comm;
    x->owns_mpi = owns;
    if (comm_init_fields(c, "mpi", name, rank, size, wranks, &MPI_OPS, x, e)) {
        free(wranks);
        free(c);
        free(x);
        return -1;
    }
    free(wranks);
    *out = c;
    return 0;
}

static int m_split(moe_comm *c, int color, int key, const char *name, moe_comm **out, moe_err *e)
{
    MPI_Comm sub;
    MPI_TRY(MPI_Comm_split(CM(c), color, key, &sub));
    if (wrap(out, sub, 0, name, e)) {
        MPI_Comm_free(&sub);
        return -1;
    }
    return 0;
}

static void m_abort(moe_comm *c, int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void m_destroy(moe_comm *c)
{
    mpi_ctx *x = c->impl_ctx;
    MPI_Comm_free(&x->comm);
    if (x->owns_mpi) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin)
            MPI_Finalize();
    }
    free(x);
    comm_free_fields(c);
    free(c);
}

static const moe_comm_ops MPI_OPS = {
    .allreduce_sum = m_allreduce,
    .allgather = m_allgather,
    .allgatherv = m_allgatherv,
    .alltoallv = m_alltoallv,
    .broadcast = m_broadcast,
    .barrier = m_barrier,
    .reduce_scatter_sum = m_reduce_scatter,
    .split = m_split,
    .abort_job = m_abort,
    .destroy = m_destroy,
};

int comm_mpi_built(void) { return 1; }

int comm_mpi_create(moe_comm **out, moe_err *e)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* the watchdog thread may call MPI_Abort while the main thread waits */
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail(e, rc, "MPI_Init_thread");
    }
    MPI_Comm world;
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &world));
    if (wrap(out, world, 0, "world", e))
        return -1;
    ((mpi_ctx *)(*out)->impl_ctx)->owns_mpi = !inited;
    return 0;
}

#endif

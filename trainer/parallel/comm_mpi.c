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

static int to_int(size_t v, int *out, const char *what, moe_err *e)
{
    if (v > INT_MAX)
        return moe_errf(e, "%s of %zu elements is more than MPI's int counts carry", what, v);
    *out = (int)v;
    return 0;
}

/* size_t counts/displacements -> MPI's ints, in one scratch array */
static int *int_arrays(moe_comm *c, const size_t *a, const size_t *b, moe_err *e)
{
    int *v = malloc(sizeof(int) * 2 * (size_t)c->size);
    if (!v) {
        moe_errf(e, "out of memory");
        return NULL;
    }
    for (int r = 0; r < c->size; r++)
        if (to_int(a[r], &v[r], "a message", e) || to_int(b ? b[r] : 0, &v[c->size + r],
                                                          "a displacement", e)) {
            free(v);
            return NULL;
        }
    return v;
}

static int m_allreduce(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e)
{
    int cn = 0;
    if (to_int(n, &cn, "allreduce", e))
        return -1;
    MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, cn, mpi_type(t), MPI_SUM, CM(c)));
    return 0;
}

static int m_allgather(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t, moe_err *e)
{
    int cn = 0;
    if (to_int(n, &cn, "allgather", e))
        return -1;
    MPI_TRY(MPI_Allgather(send, cn, mpi_type(t), recv, cn, mpi_type(t), CM(c)));
    return 0;
}

static int m_allgatherv(moe_comm *c, const void *send, size_t n, void *recv, const size_t *counts,
                        const size_t *displs, moe_dtype t, moe_err *e)
{
    int *v = int_arrays(c, counts, displs, e);
    if (!v)
        return -1;
    int rc = MPI_Allgatherv(send, v[c->rank], mpi_type(t), recv, v, v + c->size, mpi_type(t),
                            CM(c));
    free(v);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, rc, "MPI_Allgatherv");
}

static int m_alltoallv(moe_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                       void *recv, const size_t *rcounts, const size_t *rdispls, moe_err *e)
{
    int *s = int_arrays(c, scounts, sdispls, e), *r = s ? int_arrays(c, rcounts, rdispls, e) : NULL;
    int rc = MPI_SUCCESS;
    if (s && r)
        rc = MPI_Alltoallv(send, s, s + c->size, MPI_BYTE, recv, r, r + c->size, MPI_BYTE, CM(c));
    int ok = s && r;
    free(s);
    free(r);
    if (!ok)
        return -1;
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, rc, "MPI_Alltoallv");
}

static int m_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e)
{
    int cn = 0;
    if (to_int(bytes, &cn, "broadcast", e))
        return -1;
    MPI_TRY(MPI_Bcast(buf, cn, MPI_BYTE, root, CM(c)));
    return 0;
}

static int m_barrier(moe_comm *c, moe_err *e)
{
    MPI_TRY(MPI_Barrier(CM(c)));
    return 0;
}

static int m_reduce_scatter(moe_comm *c, const void *send, void *recv, const size_t *counts,
                            moe_dtype t, moe_err *e)
{
    int *v = int_arrays(c, counts, NULL, e);
    if (!v)
        return -1;
    int rc = MPI_Reduce_scatter(send, recv, v, mpi_type(t), MPI_SUM, CM(c));
    free(v);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(e, rc, "MPI_Reduce_scatter");
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

static const moe_comm_ops MPI_OPS = {m_allreduce, m_allgather, m_allgatherv, m_alltoallv,
                                     m_broadcast, m_barrier,   m_reduce_scatter, m_split,
                                     m_abort,     m_destroy};

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

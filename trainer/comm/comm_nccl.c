/* moekit: the NCCL communicator (see comm_nccl.h). Built when CUDA and
 * nccl.h are found (MOE_HAVE_NCCL). */
#include "comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MOE_HAVE_NCCL

int comm_nccl_built(void) { return 0; }

int comm_nccl_create(moe_comm **out, int rank, int size, moe_comm *bootstrap, moe_err *e)
{
    return moe_errf(e, "this moekit was built without NCCL (needs CUDA and nccl.h at build time)");
}

int comm_nccl_world_on_device(moe_comm **out, int rank, int size, int local_rank, moe_err *e)
{
    return comm_nccl_create(out, rank, size, NULL, e);
}

void comm_nccl_set_timeout(double seconds) { (void)seconds; }

#else

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <time.h>

#include "../../common/host_wait.h"
#include "../backend/backend.h"

/* done events kept per communicator: a wait for collective seq waits on
 * done[seq % RING], recorded after seq or after a later one of the same
 * stream (which finishes after it): never too early. Longer than what a
 * communicator keeps in flight: at L1 the optimizer queues ~350 expert
 * weight all-gathers (64 MiB buckets over DP) that the next forward waits
 * for layer by layer; a reused slot would make the first wait the last. */
enum { RING = 1024 };

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;  /* this communicator's collectives, in order */
    cudaStream_t compute; /* the bound backend's stream, NULL before comm_bind */
    cudaEvent_t ready;    /* recorded on `compute` as each collective starts */
    cudaEvent_t done[RING];
    char *scratch;        /* device staging for host buffers */
    size_t scratch_bytes;
    int aborted;
} nccl_ctx;

static double init_timeout_s = 600;

void comm_nccl_set_timeout(double seconds)
{
    if (seconds > 0)
        init_timeout_s = seconds;
}

static nccl_ctx *CX(moe_comm *c) { return c->impl_ctx; }

static ncclDataType_t nccl_type(moe_dtype t)
{
    switch (t) {
    case MOE_DT_REAL: return sizeof(real) == 8 ? ncclFloat64 : ncclFloat32;
    case MOE_DT_DOUBLE: return ncclFloat64;
    case MOE_DT_INT64: return ncclInt64;
    case MOE_DT_BYTE: return ncclInt8;
    }
    return ncclInt8;
}

static int nccl_fail(moe_err *e, ncclResult_t r, const char *call)
{
    return moe_errf(e, "%s failed: %s", call, ncclGetErrorString(r));
}

static int cuda_fail(moe_err *e, cudaError_t r, const char *call)
{
    return moe_errf(e, "%s failed: %s", call, cudaGetErrorString(r));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Communicators are non-blocking (ncclConfig_t.blocking = 0), so that
 * initialisation and splits can be timed and aborted: a call may return
 * ncclInProgress, and the communicator is usable once its asynchronous
 * state leaves it. Waits until then, `timeout_s` at most. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t r, double timeout_s)
{
    double t0 = now_s();
    while (r == ncclInProgress) {
        if (now_s() - t0 > timeout_s)
            return ncclInProgress;
        usleep(100);
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess)
            return ncclInternalError;
    }
    return r;
}

#define NCCL_TRY(call)                                                                             \
    do {                                                                                           \
        ncclResult_t r_ = settle(CX(c)->comm, (call), init_timeout_s);                             \
        if (r_ != ncclSuccess)                                                                     \
            return nccl_fail(e, r_, #call);                                                        \
    } while (0)
#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t r_ = (call);                                                                   \
        if (r_ != cudaSuccess)                                                                     \
            return cuda_fail(e, r_, #call);                                                        \
    } while (0)

static int is_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* a plain host pointer on older runtimes */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* The host waits for this communicator's stream, polling NCCL's
 * asynchronous errors (a peer that failed) instead of blocking in
 * cudaStreamSynchronize; the watchdog sees the wait as a host wait. */
static int wait_done(moe_comm *c, moe_err *e)
{
    nccl_ctx *x = CX(c);
    int rc = 0;
    host_wait_begin("collective on host buffers");
    for (int i = 0;; i++) {
        cudaError_t q = cudaStreamQuery(x->stream);
        if (q == cudaSuccess)
            break;
        if (q != cudaErrorNotReady) {
            rc = cuda_fail(e, q, "waiting for an NCCL collective");
            break;
        }
        ncclResult_t ae = ncclSuccess;
        ncclCommGetAsyncError(x->comm, &ae);
        if (ae != ncclSuccess && ae != ncclInProgress) {
            rc = nccl_fail(e, ae, "NCCL (asynchronous error from a peer)");
            break;
        }
        if (i > 64)
            usleep(20);
    }
    host_wait_end();
    return rc;
}

/* Stream order, in: the collective about to be queued starts after
 * everything queued on the bound backend so far. Unbound (tests of the
 * transport alone), the host waits for the whole device instead. */
static int order_in(moe_comm *c, moe_err *e)
{
    nccl_ctx *x = CX(c);
    if (x->aborted)
        return moe_errf(e, "the %s communicator was aborted", c->name);
    if (!x->compute) {
        host_wait_begin("unbound collective");
        cudaError_t r = cudaDeviceSynchronize();
        host_wait_end();
        CUDA_TRY(r);
        return 0;
    }
    CUDA_TRY(cudaEventRecord(x->ready, x->compute));
    CUDA_TRY(cudaStreamWaitEvent(x->stream, x->ready, 0));
    return 0;
}

/* ... and out: collective c->issued is done when its event is */
static int order_out(moe_comm *c, moe_err *e)
{
    nccl_ctx *x = CX(c);
    CUDA_TRY(cudaEventRecord(x->done[c->issued % RING], x->stream));
    return x->compute ? 0 : wait_done(c, e);
}

static int n_wait(moe_comm *c, uint64_t seq, moe_err *e)
{
    nccl_ctx *x = CX(c);
    if (!x->compute || !seq)
        return 0;
    CUDA_TRY(cudaStreamWaitEvent(x->compute, x->done[seq % RING], 0));
    return 0;
}

static int n_bind(moe_comm *c, moe_backend *be, moe_err *e)
{
    if (!be->queue_create)
        return moe_errf(e, "NCCL carries GPU memory: the %s backend has no device queue", be->name);
    CX(c)->compute = (cudaStream_t)cuda_backend_stream(be);
    return 0;
}

static int scratch(moe_comm *c, size_t bytes, moe_err *e)
{
    nccl_ctx *x = CX(c);
    if (bytes <= x->scratch_bytes)
        return 0;
    if (x->scratch) {
        /* the last collective that used it may still run */
        CUDA_TRY(cudaStreamSynchronize(x->stream));
        cudaFree(x->scratch);
    }
    x->scratch = NULL;
    x->scratch_bytes = 0;
    CUDA_TRY(cudaMalloc((void **)&x->scratch, bytes));
    x->scratch_bytes = bytes;
    return 0;
}

/* Device views of (send, recv): host buffers are copied into the scratch
 * buffer (send at 0, recv after it). */
typedef struct {
    const void *send;
    void *recv;
    void *host_recv;
    size_t recv_bytes;
    int on_host;      /* a side is host memory: the call returns with the result in place */
    int recv_on_host; /* its bytes cross the host link on the way back */
} staged;

static int stage(moe_comm *c, staged *s, const void *send, size_t sbytes, void *recv,
                 size_t rbytes, moe_err *e)
{
    memset(s, 0, sizeof *s);
    int send_dev = !send || is_device(send), recv_dev = !recv || is_device(recv);
    if (order_in(c, e))
        return -1;
    if (send_dev && recv_dev) {
        s->send = send;
        s->recv = recv;
        return 0;
    }
    size_t so = (sbytes + 255) / 256 * 256;
    if (scratch(c, so + rbytes + 1, e))
        return -1;
    nccl_ctx *x = CX(c);
    if (send && sbytes) {
        CUDA_TRY(cudaMemcpyAsync(x->scratch, send, sbytes, cudaMemcpyDefault, x->stream));
        c->host_bytes[0] += send_dev ? 0 : sbytes;
    }
    s->send = x->scratch;
    s->recv = x->scratch + so;
    if (send == recv && send) /* in place */
        s->recv = x->scratch;
    s->host_recv = recv;
    s->recv_bytes = rbytes;
    s->on_host = 1;
    s->recv_on_host = !recv_dev;
    return 0;
}

static int finish(moe_comm *c, staged *s, moe_err *e)
{
    nccl_ctx *x = CX(c);
    if (s->host_recv && s->recv_bytes) {
        CUDA_TRY(cudaMemcpyAsync(s->host_recv, s->recv, s->recv_bytes, cudaMemcpyDefault,
                                 x->stream));
        c->host_bytes[1] += s->recv_on_host ? s->recv_bytes : 0;
    }
    if (order_out(c, e))
        return -1;
    /* a host side: its values are read (or its buffer reused) on return */
    return s->on_host && x->compute ? wait_done(c, e) : 0;
}

static int n_allreduce(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e)
{
    size_t b = n * moe_dtype_size(t);
    staged s;
    if (stage(c, &s, buf, b, buf, b, e))
        return -1;
    NCCL_TRY(ncclAllReduce(s.send, s.recv, n, nccl_type(t), ncclSum, CX(c)->comm, CX(c)->stream));
    return finish(c, &s, e);
}

static int n_allgather(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t,
                       moe_err *e)
{
    size_t b = n * moe_dtype_size(t);
    staged s;
    if (stage(c, &s, send, b, recv, b * (size_t)c->size, e))
        return -1;
    NCCL_TRY(ncclAllGather(s.send, s.recv, n, nccl_type(t), CX(c)->comm, CX(c)->stream));
    return finish(c, &s, e);
}

static int n_allgatherv(moe_comm *c, const void *send, size_t n, void *recv, const size_t *counts,
                        const size_t *displs, moe_dtype t, moe_err *e)
{
    size_t es = moe_dtype_size(t), total = 0;
    for (int r = 0; r < c->size; r++)
        if (displs[r] + counts[r] > total)
            total = displs[r] + counts[r];
    staged s;
    if (stage(c, &s, send, n * es, recv, total * es, e))
        return -1;
    nccl_ctx *x = CX(c);
    /* one broadcast per rank, from its block into everyone's */
    NCCL_TRY(ncclGroupStart());
    for (int r = 0; r < c->size; r++)
        NCCL_TRY(ncclBroadcast(s.send, (char *)s.recv + displs[r] * es, counts[r], nccl_type(t), r,
                               x->comm, x->stream));
    NCCL_TRY(ncclGroupEnd());
    return finish(c, &s, e);
}

static int n_alltoallv(moe_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                       void *recv, const size_t *rcounts, const size_t *rdispls, moe_err *e)
{
    size_t sb = 0, rb = 0;
    for (int r = 0; r < c->size; r++) {
        if (sdispls[r] + scounts[r] > sb)
            sb = sdispls[r] + scounts[r];
        if (rdispls[r] + rcounts[r] > rb)
            rb = rdispls[r] + rcounts[r];
    }
    staged s;
    if (stage(c, &s, send, sb, recv, rb, e))
        return -1;
    nccl_ctx *x = CX(c);
    NCCL_TRY(ncclGroupStart());
    for (int r = 0; r < c->size; r++) {
        if (scounts[r])
            NCCL_TRY(ncclSend((const char *)s.send + sdispls[r], scounts[r], ncclInt8, r, x->comm,
                              x->stream));
        if (rcounts[r])
            NCCL_TRY(ncclRecv((char *)s.recv + rdispls[r], rcounts[r], ncclInt8, r, x->comm,
                              x->stream));
    }
    NCCL_TRY(ncclGroupEnd());
    return finish(c, &s, e);
}

static int n_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e)
{
    staged s;
    if (stage(c, &s, buf, bytes, buf, bytes, e))
        return -1;
    NCCL_TRY(ncclBroadcast(s.send, s.recv, bytes, ncclInt8, root, CX(c)->comm, CX(c)->stream));
    return finish(c, &s, e);
}

static int n_barrier(moe_comm *c, moe_err *e)
{
    int64_t one = 1;
    return n_allreduce(c, &one, 1, MOE_DT_INT64, e);
}

static int n_reduce_scatter(moe_comm *c, const void *send, void *recv, const size_t *counts,
                            moe_dtype t, moe_err *e)
{
    size_t es = moe_dtype_size(t), total = 0;
    int equal = 1;
    for (int r = 0; r < c->size; r++) {
        total += counts[r];
        equal &= counts[r] == counts[0];
    }
    staged s;
    if (stage(c, &s, send, total * es, recv, counts[c->rank] * es, e))
        return -1;
    nccl_ctx *x = CX(c);
    if (equal) {
        NCCL_TRY(ncclReduceScatter(s.send, s.recv, counts[0], nccl_type(t), ncclSum, x->comm,
                                   x->stream));
    } else { /* uneven shards: one reduce to each block's owner */
        size_t o = 0;
        NCCL_TRY(ncclGroupStart());
        for (int r = 0; r < c->size; r++) {
            NCCL_TRY(ncclReduce((const char *)s.send + o * es, s.recv, counts[r], nccl_type(t),
                                ncclSum, r, x->comm, x->stream));
            o += counts[r];
        }
        NCCL_TRY(ncclGroupEnd());
    }
    return finish(c, &s, e);
}

static const moe_comm_ops NCCL_OPS;

static void ctx_free(nccl_ctx *x)
{
    if (x->stream)
        cudaStreamDestroy(x->stream);
    if (x->ready)
        cudaEventDestroy(x->ready);
    for (int i = 0; i < RING; i++)
        if (x->done[i])
            cudaEventDestroy(x->done[i]);
    if (x->scratch)
        cudaFree(x->scratch);
    free(x);
}

static int wrap(moe_comm **out, ncclComm_t comm, const char *name, int world_rank, moe_err *e)
{
    int rank, size;
    ncclResult_t nr;
    if ((nr = ncclCommUserRank(comm, &rank)) != ncclSuccess ||
        (nr = ncclCommCount(comm, &size)) != ncclSuccess)
        return nccl_fail(e, nr, "ncclCommUserRank/ncclCommCount");
    moe_comm *c = calloc(1, sizeof *c);
    nccl_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return moe_errf(e, "out of memory");
    }
    x->comm = comm;
    cudaError_t cr = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking);
    if (cr == cudaSuccess)
        cr = cudaEventCreateWithFlags(&x->ready, cudaEventDisableTiming);
    for (int i = 0; i < RING && cr == cudaSuccess; i++)
        cr = cudaEventCreateWithFlags(&x->done[i], cudaEventDisableTiming);
    if (cr != cudaSuccess) {
        ctx_free(x);
        free(c);
        return cuda_fail(e, cr, "the NCCL communicator's stream and events");
    }
    if (comm_init_fields(c, "nccl", name, rank, size, NULL, &NCCL_OPS, x, e)) {
        ctx_free(x);
        free(c);
        return -1;
    }
    c->device_memory = 1;
    /* every member's world rank, for messages */
    int64_t mine = world_rank, *all = malloc(sizeof(int64_t) * (size_t)size);
    if (!all || n_allgather(c, &mine, all, 1, MOE_DT_INT64, e)) {
        free(all);
        x->comm = NULL; /* the caller destroys it */
        c->ops->destroy(c);
        return all ? -1 : moe_errf(e, "out of memory");
    }
    for (int r = 0; r < size; r++)
        c->world_ranks[r] = (int)all[r];
    free(all);
    *out = c;
    return 0;
}

/* A communicator made non-blocking, waited for `init_timeout_s` at most;
 * one that does not come up in time is aborted, with a message that says
 * what to look at. */
static int made_in_time(ncclComm_t comm, ncclResult_t r, const char *what, moe_err *e)
{
    r = settle(comm, r, init_timeout_s);
    if (r == ncclSuccess)
        return 0;
    ncclCommAbort(comm);
    if (r == ncclInProgress)
        return moe_errf(e, "%s did not finish within parallel.timeout_s = %g s: a rank did not "
                           "join (it died, hangs, or cannot reach the others' network)",
                        what, init_timeout_s);
    return nccl_fail(e, r, what);
}

/* The child's handle of a non-blocking split, written by NCCL's own init thread
 * when the split's job ends: neither the return of ncclCommSplit nor the
 * parent leaving ncclInProgress orders that write (the handle came back NULL
 * on an H100 in some runs and not in others), so the slot is read atomically
 * until it is filled, the parent reports an error, or the timeout ends. The
 * slot is on the heap and given up on failure: the init thread may still
 * write it after this function has returned. */
static ncclResult_t await_split_handle(ncclComm_t parent, ncclComm_t *slot, ncclComm_t *child,
                                       double timeout_s)
{
    double t0 = now_s();
    for (;;) {
        *child = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        if (*child)
            return ncclSuccess;
        ncclResult_t pr = ncclSuccess;
        if (ncclCommGetAsyncError(parent, &pr) != ncclSuccess)
            return ncclInternalError;
        if (pr != ncclSuccess && pr != ncclInProgress)
            return pr;
        if (now_s() - t0 > timeout_s)
            return ncclInProgress;
        usleep(100);
    }
}

static int n_split(moe_comm *c, int color, int key, const char *name, moe_comm **out, moe_err *e)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    char what[96];
    snprintf(what, sizeof what, "ncclCommSplit of the %s group", name);
    ncclComm_t *slot = calloc(1, sizeof *slot), sub = NULL;
    if (!slot)
        return moe_errf(e, "%s: out of host memory", what);
    ncclResult_t r = ncclCommSplit(CX(c)->comm, color, key, slot, &cfg);
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail(e, r, what); /* slot given up: see await_split_handle */
    r = await_split_handle(CX(c)->comm, slot, &sub, init_timeout_s);
    if (r == ncclInProgress)
        return moe_errf(e, "%s did not finish within parallel.timeout_s = %g s: a rank did "
                           "not join (it died, hangs, or cannot reach the others)",
                        what, init_timeout_s);
    if (r != ncclSuccess)
        return nccl_fail(e, r, what);
    free(slot);
    /* the parent may still be finishing the split: it is settled before its
     * next use, the child before its first */
    r = ncclInProgress;
    if (ncclCommGetAsyncError(CX(c)->comm, &r) == ncclSuccess)
        r = settle(CX(c)->comm, r, init_timeout_s);
    if (r != ncclSuccess) {
        ncclCommAbort(sub);
        return r == ncclInProgress
                   ? moe_errf(e, "%s: the parent communicator did not settle within "
                                 "parallel.timeout_s = %g s", what, init_timeout_s)
                   : nccl_fail(e, r, what);
    }
    if (made_in_time(sub, ncclInProgress, what, e))
        return -1;
    if (wrap(out, sub, name, c->world_ranks[c->rank], e)) {
        ncclCommAbort(sub);
        return -1;
    }
    return 0;
}

/* Frees every rank stuck in this communicator's kernels. Idempotent: the
 * watchdog aborts every communicator, then ends the job through the world. */
static void n_abort_comm(moe_comm *c)
{
    nccl_ctx *x = CX(c);
    if (x->aborted || !x->comm)
        return;
    x->aborted = 1;
    ncclCommAbort(x->comm);
}

static void n_abort(moe_comm *c, int code)
{
    n_abort_comm(c);
    _exit(code);
}

static int n_async_error(moe_comm *c, moe_err *e)
{
    nccl_ctx *x = CX(c);
    if (x->aborted || !x->comm)
        return 0;
    ncclResult_t ae = ncclSuccess;
    if (ncclCommGetAsyncError(x->comm, &ae) != ncclSuccess || ae == ncclSuccess ||
        ae == ncclInProgress)
        return 0;
    return nccl_fail(e, ae, "NCCL (asynchronous error)");
}

static void n_destroy(moe_comm *c)
{
    nccl_ctx *x = CX(c);
    if (x->comm && !x->aborted) {
        cudaStreamSynchronize(x->stream);
        ncclCommDestroy(x->comm);
    }
    ctx_free(x);
    comm_free_fields(c);
    free(c);
}

static const moe_comm_ops NCCL_OPS = {
    .allreduce_sum = n_allreduce,
    .allgather = n_allgather,
    .allgatherv = n_allgatherv,
    .alltoallv = n_alltoallv,
    .broadcast = n_broadcast,
    .barrier = n_barrier,
    .reduce_scatter_sum = n_reduce_scatter,
    .split = n_split,
    .abort_job = n_abort,
    .destroy = n_destroy,
    .bind = n_bind,
    .wait = n_wait,
    .async_error = n_async_error,
    .abort_comm = n_abort_comm,
};

int comm_nccl_built(void) { return 1; }

int comm_nccl_create(moe_comm **out, int rank, int size, moe_comm *bootstrap, moe_err *e)
{
    /* A step keeps collectives of several communicators in flight at once
     * (the EP exchange beside the gradient reduce-scatter): NCCL then orders
     * their kernels on the GPU in host program order, which is the same on
     * every rank, so two communicators cannot wait on each other. A user's
     * own setting wins. */
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0);
    ncclUniqueId id;
    if (bootstrap) {
        if (bootstrap->size != size || bootstrap->rank != rank)
            return moe_errf(e, "NCCL bootstrap over a group of %d ranks (this is %d) for a world "
                               "of %d (rank %d)", bootstrap->size, bootstrap->rank, size, rank);
        ncclResult_t r = rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
        if (r != ncclSuccess)
            return nccl_fail(e, r, "ncclGetUniqueId");
        if (comm_broadcast(bootstrap, &id, sizeof id, 0, e))
            return moe_err_prefix(e, "broadcasting the NCCL id");
    } else {
        if (size > 1 && !getenv("NCCL_COMM_ID"))
            return moe_errf(e, "%d ranks without MPI need NCCL_COMM_ID=host:port on every rank "
                               "(the first node of the job and a free port) for NCCL to meet",
                            size);
        ncclResult_t r = ncclGetUniqueId(&id); /* the same id on every rank under NCCL_COMM_ID */
        if (r != ncclSuccess)
            return nccl_fail(e, r, "ncclGetUniqueId");
    }
    ncclComm_t comm = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    char what[96];
    snprintf(what, sizeof what, "NCCL initialisation of rank %d of %d", rank, size);
    ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &cfg);
    if (!comm)
        return nccl_fail(e, r, what);
    if (made_in_time(comm, r, what, e))
        return -1;
    if (wrap(out, comm, "world", rank, e)) {
        ncclCommAbort(comm);
        return -1;
    }
    return 0;
}

int comm_nccl_world_on_device(moe_comm **out, int rank, int size, int local_rank, moe_err *e)
{
    int n = 0;
    cudaError_t cr = cudaGetDeviceCount(&n);
    if (cr != cudaSuccess || n < 1)
        return moe_errf(e, "rank %d of %d over NCCL needs a GPU: %s", rank, size,
                        cr != cudaSuccess ? cudaGetErrorString(cr) : "none is visible");
    int dev = local_rank > 0 ? local_rank % n : 0;
    if ((cr = cudaSetDevice(dev)) != cudaSuccess)
        return moe_errf(e, "rank %d: cannot use GPU %d of %d: %s", rank, dev, n,
                        cudaGetErrorString(cr));
    return comm_nccl_create(out, rank, size, NULL, e);
}

#endif

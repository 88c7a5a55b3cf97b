/* moekit: the communicator between training ranks.
 *
 * One table of collectives, filled by an implementation:
 *   single  world size 1, no launcher (every collective is a copy);
 *   mpi     Open MPI, host memory (the CPU backend's buffers);
 *   nccl    GPU memory (the CUDA backend), bootstrapped over MPI or
 *           NCCL_COMM_ID; see comm_nccl.h.
 * Counts and displacements of the v-collectives are in BYTES for the byte
 * collectives and in ELEMENTS for the typed ones, as MPI does; they are
 * size_t on every transport (MPI's int counts are carried in pieces).
 *
 * Stream order (backend.h states the backend's side of it). A communicator
 * that carries a backend's memory is bound to that backend (comm_bind; its
 * splits inherit it), and a collective on the backend's buffers is QUEUED,
 * never waited for on the host:
 *   - it starts once everything queued on the backend before the call is
 *     done: its inputs are written, and earlier reads of its output buffers
 *     are over (read-after-write and write-after-read);
 *   - comm_wait(req) queues the backend's later work behind it.
 * The plain calls are _start and comm_wait at once: correct anywhere,
 * overlapping nothing. Between a _start and its wait the caller may queue
 * independent work, and must queue nothing that writes the collective's
 * inputs or touches its outputs. Host buffers (counts, scalars) are done
 * when the call returns: the host waited, which counts as a named host wait
 * (common/host_wait.h). The cpu backend, MPI and the single communicator
 * complete every call on return, so the same code is synchronous there.
 *
 * Every call goes through the wrappers below, which time the call: a
 * collective that waits longer than the watchdog's timeout (a peer died or
 * hangs), or a host wait stuck behind one, ends the job with a message
 * naming this rank, the operation, its group and the peers it was waiting
 * for, after aborting every communicator of the rank (watchdog.h). */
#ifndef MOE_COMM_H
#define MOE_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

typedef enum { MOE_DT_REAL, MOE_DT_DOUBLE, MOE_DT_INT64, MOE_DT_BYTE } moe_dtype;

size_t moe_dtype_size(moe_dtype t);

typedef struct moe_comm moe_comm;
struct moe_backend;

/* A queued collective: seq is its number on c (comm_wait's argument). */
typedef struct {
    moe_comm *c;
    uint64_t seq;
} moe_comm_req;

/* A transport's operations: each transport (comm_single.c, comm_mpi.c,
 * comm_nccl.c, comm_local.c) fills one table by field name; an operation it
 * has not (bind, wait, async_error, abort_comm) is left NULL. A new
 * transport is one file with one such table. */
typedef struct {
    int (*allreduce_sum)(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e);
    /* recv[size * n] = every rank's send[n], rank order */
    int (*allgather)(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t, moe_err *e);
    /* recv[displs[r] ..] = rank r's send of counts[r] elements; in place
     * where send is recv + displs[rank] */
    int (*allgatherv)(moe_comm *c, const void *send, size_t n, void *recv, const size_t *counts,
                      const size_t *displs, moe_dtype t, moe_err *e);
    /* byte all-to-all: send[sdispls[r]..+scounts[r]) goes to rank r */
    int (*alltoallv)(moe_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                     void *recv, const size_t *rcounts, const size_t *rdispls, moe_err *e);
    int (*broadcast)(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e);
    int (*barrier)(moe_comm *c, moe_err *e);
    /* sum of every rank's send[sum counts], rank r receives the block
     * [sum counts[<r], + counts[r]) in recv; in place where recv is send +
     * sum counts[<rank] (the other blocks of send are then left undefined) */
    int (*reduce_scatter_sum)(moe_comm *c, const void *send, void *recv, const size_t *counts,
                              moe_dtype t, moe_err *e);
    /* A sub-communicator of the ranks that pass the same color, ordered by key. */
    int (*split)(moe_comm *c, int color, int key, const char *name, moe_comm **out, moe_err *e);
    /* End every rank of the job now (the watchdog's last resort). */
    void (*abort_job)(moe_comm *c, int code);
    void (*destroy)(moe_comm *c);
    /* ---- stream order; NULL where every call completes on return ---- */
    /* order this communicator's device collectives against be's queue */
    int (*bind)(moe_comm *c, struct moe_backend *be, moe_err *e);
    /* the bound backend's later work waits for collective `seq` (and every
     * one before it) */
    int (*wait)(moe_comm *c, uint64_t seq, moe_err *e);
    /* ---- failure; NULL where there is nothing to poll or abort ---- */
    /* 0, or -1 with the error a peer's failure left on this communicator
     * (polled by the watchdog) */
    int (*async_error)(moe_comm *c, moe_err *e);
    /* stop this communicator's queued and running collectives so nothing
     * spins on a dead peer; the communicator is unusable after it */
    void (*abort_comm)(moe_comm *c);
} moe_comm_ops;

struct moe_comm {
    const char *impl;      /* "single", "mpi", "nccl" */
    char name[32];         /* "world", "ep", "dp": for messages */
    int rank, size;
    int *world_ranks;      /* [size]: world rank of each member, for messages */
    int device_memory;     /* 1: collectives carry the bound backend's memory, queued in
                              stream order (a GPU's; a cpu backend's with queues), else host
                              memory, done on return */
    /* bytes staged over the host link for host buffers handed to a GPU
     * transport: [0] host to device, [1] device to host */
    uint64_t host_bytes[2];
    struct moe_backend *be; /* the bound backend (comm_bind), NULL for host memory */
    uint64_t issued;        /* collectives started on it: the last one's seq */
    const char *last_op;    /* the last one, for the watchdog's message */
    const moe_comm_ops *ops;
    void *impl_ctx;
};

/* ---- implementations ---- */

/* World size 1. */
int comm_single_create(moe_comm **out, moe_err *e);

/* 1 when this build has the MPI implementation. */
int comm_mpi_built(void);
/* 1 when the environment says an MPI launcher started us (mpirun, srun
 * --mpi=pmix): OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK is set. */
int comm_mpi_launched(void);
/* MPI_Init and the world communicator; fails with a reason when MPI is not
 * built in. */
int comm_mpi_create(moe_comm **out, moe_err *e);
/* The most elements one MPI call carries (default and ceiling INT_MAX; 0
 * is the default); larger messages go in pieces. The trainer sets it from
 * parallel.mpi_max_count, so tests cover the pieces with small messages. */
void comm_mpi_set_max_count(size_t n);

/* Set up a communicator's shared fields (implementations call this). */
int comm_init_fields(moe_comm *c, const char *impl, const char *name, int rank, int size,
                     const int *world_ranks, const moe_comm_ops *ops, void *ctx, moe_err *e);
void comm_free_fields(moe_comm *c);

/* ---- the calls (watched by the watchdog) ---- */

int comm_allreduce_sum(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e);
int comm_allgather(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t, moe_err *e);
int comm_allgatherv(moe_comm *c, const void *send, size_t n, void *recv, const size_t *counts,
                    const size_t *displs, moe_dtype t, moe_err *e);
int comm_alltoallv(moe_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                   void *recv, const size_t *rcounts, const size_t *rdispls, moe_err *e);
int comm_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e);
int comm_barrier(moe_comm *c, moe_err *e);
int comm_reduce_scatter_sum(moe_comm *c, const void *send, void *recv, const size_t *counts,
                            moe_dtype t, moe_err *e);
int comm_split(moe_comm *c, int color, int key, const char *name, moe_comm **out, moe_err *e);
void comm_destroy(moe_comm *c);

/* Bind c to the backend whose buffers its collectives carry (its later
 * splits are bound too). */
int comm_bind(moe_comm *c, struct moe_backend *be, moe_err *e);

/* The queued forms (stream order above): each fills *req; comm_wait then
 * orders the bound backend's later work after it. */
int comm_alltoallv_start(moe_comm *c, const void *send, const size_t *scounts,
                         const size_t *sdispls, void *recv, const size_t *rcounts,
                         const size_t *rdispls, moe_comm_req *req, moe_err *e);
int comm_reduce_scatter_sum_start(moe_comm *c, const void *send, void *recv, const size_t *counts,
                                  moe_dtype t, moe_comm_req *req, moe_err *e);
int comm_allgatherv_start(moe_comm *c, const void *send, size_t n, void *recv,
                          const size_t *counts, const size_t *displs, moe_dtype t,
                          moe_comm_req *req, moe_err *e);
int comm_wait(const moe_comm_req *req, moe_err *e);

/* All ranks agree on a status: 0 when every rank passes ok = 0, else -1.
 * A rank that failed keeps its own message; the others get one naming the
 * lowest failing rank and what it said (`what` describes the step). Lets a
 * rank-0-only task (reading a checkpoint) fail the whole job cleanly. */
int comm_agree(moe_comm *c, int failed, const char *what, moe_err *e);

#endif

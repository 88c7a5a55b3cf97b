/* moekit: the NCCL communicator (GPU memory; the CUDA backend's buffers).
 *
 * Collectives run on one CUDA stream of this communicator, ordered against
 * the bound backend's stream by events (comm.h's stream order): none is
 * waited for on the host unless a buffer is host memory. Host buffers are
 * staged through a device scratch buffer, so the trainer's scalar
 * reductions and the dispatcher's host counts need no second path; those
 * host waits poll ncclCommGetAsyncError, and the watchdog polls it too, so
 * a peer's failure surfaces as an error and a hang as a watched wait (the
 * watchdog then aborts every communicator).
 *
 * Bootstrap: the unique id is made by world rank 0 and broadcast over
 * `bootstrap` (the MPI world, as nccl-tests does); without MPI every rank
 * derives the same id from NCCL_COMM_ID=host:port (ranks and size then come
 * from the launcher's environment). Sub-groups come from ncclCommSplit. */
#ifndef MOE_COMM_NCCL_H
#define MOE_COMM_NCCL_H

#include "comm.h"

/* 1 when this build has the NCCL implementation. */
int comm_nccl_built(void);
/* The world communicator of `size` ranks on the current CUDA device.
 * bootstrap: a communicator of the same ranks to broadcast the id over, or
 * NULL (size 1, or NCCL_COMM_ID set on every rank). */
int comm_nccl_create(moe_comm **out, int rank, int size, moe_comm *bootstrap, moe_err *e);
/* The world of a launch without MPI (par_launch_from_env): this rank takes
 * GPU local_rank mod the visible GPUs, and the ranks meet at NCCL_COMM_ID. */
int comm_nccl_world_on_device(moe_comm **out, int rank, int size, int local_rank, moe_err *e);

/* How long initialisation and splits may take (parallel.timeout_s; 600 s
 * until set): communicators are made non-blocking, and one that is not up
 * in time is aborted with a message, instead of hanging on a rank that never
 * joins. */
void comm_nccl_set_timeout(double seconds);

#endif

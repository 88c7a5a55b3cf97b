/* moekit: the collective watchdog.
 *
 * A dead or hung peer shows up on the ranks still alive as a wait that
 * never ends: in a collective that blocks the host (MPI, host buffers), or,
 * with collectives queued on the GPU (comm.h's stream order), in the next
 * host wait behind them (the route counts, the loss; common/host_wait.h).
 * A thread watches every thread's wait in progress and polls every
 * communicator of the process for the errors a peer's failure leaves on it
 * (NCCL's asynchronous errors). When a wait outlasts the timeout, or an
 * error appears, it prints which rank waited, in which operation of which
 * group and for which peers, aborts EVERY communicator of the process
 * (world, EP, DP: a kernel spinning on one communicator while another is
 * aborted can deadlock NCCL) and ends the job through the world (MPI_Abort,
 * or exit), so every rank exits non-zero and `srun --kill-on-bad-exit=1`
 * ends the rest. */
#ifndef MOE_WATCHDOG_H
#define MOE_WATCHDOG_H

#include "comm.h"

/* Start watching with this timeout (seconds, > 0); `world` is what ends the
 * job. One watchdog per process; a second start only changes the timeout. */
int watchdog_start(double timeout_s, moe_comm *world, moe_err *e);
void watchdog_stop(void);
/* The next collective on this thread may wait `seconds` more than the
 * timeout (INFINITY: unwatched): the ranks that wait while others write or
 * read a checkpoint, whose pace the file system sets. */
void watchdog_allow(double seconds);
/* Bracket one collective call (comm.c does this for every call). */
void watchdog_enter(const moe_comm *c, const char *op);
void watchdog_leave(void);
/* Every communicator of the process, for the abort and the error polls
 * (comm_init_fields / comm_free_fields call these). */
void watchdog_track(moe_comm *c);
void watchdog_untrack(moe_comm *c);

#endif

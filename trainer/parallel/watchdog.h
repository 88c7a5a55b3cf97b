/* moekit: the collective watchdog.
 *
 * A blocked collective is how a dead or hung peer shows up on the ranks
 * that are still alive: they wait forever (until the Slurm time limit). A
 * thread watches the collective in progress; when one waits longer than
 * the timeout it prints which rank waited, in which operation of which
 * group and for which peers, then aborts the job through the world
 * communicator (MPI_Abort / ncclCommAbort), so every rank exits non-zero. */
#ifndef MOE_WATCHDOG_H
#define MOE_WATCHDOG_H

#include "comm.h"

/* Start watching with this timeout (seconds, > 0); `world` is what gets
 * aborted. One watchdog per process; a second start only changes the
 * timeout. */
int watchdog_start(double timeout_s, moe_comm *world, moe_err *e);
void watchdog_stop(void);
/* The next collective on this thread may wait `seconds` more than the
 * timeout (INFINITY: unwatched). For the ranks that wait while rank 0 alone
 * reads or writes a checkpoint: the file system, not a peer, sets that
 * pace. */
void watchdog_allow(double seconds);
/* Bracket one collective (comm.c does this for every call). */
void watchdog_enter(const moe_comm *c, const char *op);
void watchdog_leave(void);

#endif

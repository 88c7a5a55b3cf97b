/* moekit checkpoints: one writer per checkpoint directory.
 *
 * <root>/moekit.lock carries an exclusive fcntl (POSIX) lock for as long as
 * the run that writes checkpoints there lives, and says who holds it:
 *   host=<hostname> pid=<pid> job=<SLURM_JOB_ID or -> since=<UTC time>
 * A second run is refused at start-up with that line. The kernel (or, on
 * NFS, the lock manager) drops the lock when its holder dies, however it
 * dies, so a killed run's directory is taken over by the next run with no
 * manual cleanup. fcntl locks reach across the nodes of NFS and of Lustre
 * mounted with -o flock. */
#ifndef MOE_CKPT_LOCK_H
#define MOE_CKPT_LOCK_H

#include "../../common/err.h"

#define CKPT_LOCK_FILE "moekit.lock"

/* mkdir -p root, check it is a writable directory, take the lock. Returns
 * the lock's descriptor (keep it open: closing it releases the lock), or -1
 * with e naming the holder when another run has it. */
int ckpt_lock_acquire(const char *root, moe_err *e);
void ckpt_lock_release(int fd);

#endif

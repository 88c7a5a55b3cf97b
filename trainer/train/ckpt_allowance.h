/* moekit: how long a collective may wait on checkpoint I/O.
 *
 * During a save or a load the ranks meet in collectives that wait for the
 * slowest writer or reader, or for rank 0 alone while it looks for, reads
 * or commits a checkpoint: there the file system, not a dead peer, sets the
 * pace, so such a collective gets more than parallel.timeout_s. It gets a
 * bounded allowance, never an unwatched wait, so a rank that dies in the
 * middle of a save still ends the job:
 *
 *   allowance = bytes / checkpoint.min_write_mb_per_s + parallel.timeout_s
 *
 * where bytes is what the save or load moves on the rank that moves the
 * most (each call site says how it knows that), and the watchdog aborts the
 * collective once it has waited parallel.timeout_s + allowance. */
#ifndef MOE_CKPT_ALLOWANCE_H
#define MOE_CKPT_ALLOWANCE_H

#include <stdint.h>

#include "../config/config.h"

/* Seconds: bytes at min_mb_per_s (MB = 10^6 bytes, as the save's report
 * prints rates) plus timeout_s. min_mb_per_s must be > 0 (the config
 * refuses anything else); a value that is not gives INFINITY rather than a
 * division by zero. */
double ckpt_allowance_s(uint64_t bytes, double min_mb_per_s, double timeout_s);

/* watchdog_allow(ckpt_allowance_s(bytes, ...)) with the run's
 * checkpoint.min_write_mb_per_s and parallel.timeout_s, for the next
 * collective of this thread. */
void ckpt_allow(const moe_config *c, uint64_t bytes);

#endif

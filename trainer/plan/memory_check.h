/* moekit: a GPU rank's memory plan against what its GPU has free, before
 * the run allocates anything large (runtime.memory_check). */
#ifndef MOE_TRAIN_MEMORY_CHECK_H
#define MOE_TRAIN_MEMORY_CHECK_H

#include "../backend/backend.h"
#include "../config/config.h"

/* Plan config c at EP x DP as this backend lays it out and compare the need
 * (the CUDA context, already in use, left out) with be->mem_free. 0 when it
 * fits, when the check is off or the backend cannot say (the CPU); else,
 * with runtime.memory_check = refuse, -1 with e saying what is short and
 * what would fit (and the plan's table printed to stderr by rank 0); with
 * warn, 0 after the message on stderr. */
int memory_check_before_alloc(const moe_config *c, moe_backend *be, int ep, int dp, int rank,
                              moe_err *e);

#endif

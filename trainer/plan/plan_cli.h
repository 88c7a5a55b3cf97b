/* moekit: `moe-train --plan [--plan-gpus N] [--plan-gpu-mem GIB]`: print the
 * memory plan of config c (plan.h) without allocating it. gpus: the world
 * (DP = gpus / parallel.ep), 0 = the config's; gpu_mem_gib: memory of one
 * GPU, 0 = unknown; backend "cpu" sizes for CPU ranks, else for GPUs.
 * Returns the exit status. */
#ifndef MOE_PLAN_CLI_H
#define MOE_PLAN_CLI_H

#include "../config/config.h"

int plan_main(const moe_config *c, int gpus, double gpu_mem_gib, const char *backend);

/* argv[*i] starts with --plan: --plan, --plan-gpus N or --plan-gpu-mem GIB
 * (taking argv[*i + 1]) sets *plan and the value. Returns 0, or -1 having
 * said what is wrong (an unknown --plan option, a missing or bad value). */
int plan_option(int argc, char **argv, int *i, int *plan, int *gpus, double *gpu_mem_gib);

#endif

/* moekit: `moe-train --plan [--plan-gpus N] [--plan-gpu-mem GIB]`: print the
 * memory plan of config c (plan.h) without allocating it. gpus: the world
 * (DP = gpus / parallel.ep), 0 = the config's; gpu_mem_gib: memory of one
 * GPU, 0 = unknown; backend "cpu" sizes for CPU ranks, else for GPUs.
 * Returns the exit status. */
#ifndef MOE_PLAN_CLI_H
#define MOE_PLAN_CLI_H

#include "../config/config.h"

int plan_main(const moe_config *c, int gpus, double gpu_mem_gib, int backend);

/* --plan-gpu-mem's value: a positive number of GiB into *gib; -1 having said
 * what is wrong. */
int plan_gpu_mem_parse(const char *s, double *gib);

#endif

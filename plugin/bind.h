/* moekit SPANK plugin: binding a task to its GPU's CPUs and memory (bind=yes).
 *
 * Best effort, in the task after Slurm dropped to the user: the task may
 * only narrow what Slurm already allowed it, so the GPU's local CPUs are
 * intersected with the task's current affinity, and memory is preferred
 * (not bound) on the GPU's NUMA node so a full node spills instead of
 * failing. What could not be done is reported, never fatal. */
#ifndef MOE_PLUGIN_BIND_H
#define MOE_PLUGIN_BIND_H

#include <sched.h>
#include <stddef.h>

#include "../common/err.h"

/* Which of the n_visible GPUs Slurm gave this task is its own: local_rank's
 * turn round the list. -1 when there is nothing to choose (one GPU, or one
 * task on the node, which then keeps all of them). */
int bind_pick_gpu(int n_visible, int local_rank, int local_world_size);

/* Entry `index` of a comma-separated list such as CUDA_VISIBLE_DEVICES. */
int bind_list_entry(const char *list, int index, char *out, size_t n, moe_err *e);

/* Number of entries of a comma-separated list ("" has none). */
int bind_list_count(const char *list);

/* "0-15,32-47" into a CPU set. Returns 0, or -1 naming the bad part. */
int bind_parse_cpus(const char *list, cpu_set_t *set, moe_err *e);

/* Set this process's CPU affinity to the GPU's CPUs (within what it already
 * has) and prefer its NUMA node for memory. gpu_cpus "" or numa_node < 0
 * skip that part. Appends what happened, one sentence each, to note. */
void bind_apply(const char *gpu_cpus, int numa_node, char *note, size_t n);

#endif

/* moekit SPANK plugin: the trainer's command line and environment.
 *
 * Plain C, no Slurm: from the verdict, the resolved config and the task's
 * place in the step, build what task_init hands to execve. The argv follows
 * the trainer's contract
 *   moe-train --config PATH [--backend cpu] precision.compute=P
 *             [precision.allow_fp8_block=true] parallel.ep=E parallel.dp=D
 *             [--moe-set items...] precision.strict=true
 * (strict: the trainer trains in the verdict's P or stops, never choosing again)
 * and the environment is the job's with every inherited MOE_* variable
 * replaced by the plugin's own, so only the verdict and the policy (data=)
 * speak to the trainer. */
#ifndef MOE_PLUGIN_LAUNCH_H
#define MOE_PLUGIN_LAUNCH_H

#include <stddef.h>

#include "../launch/verdict.h"

/* Where this task stands in the step. */
typedef struct {
    int rank, world_size;             /* global task id, tasks in the step */
    int local_rank, local_world_size; /* on this node */
    unsigned job_id, step_id;
    char master_addr[256];            /* first node of the step */
} moe_task_place;

typedef struct {
    char **argv; /* NULL-terminated; owned */
    char **envp; /* NULL-terminated; owned */
} moe_launch;

/* Build argv and envp. data_dir: the policy's data=, passed as
 * MOE_DATA_DIR (the job's own MOE_* variables are dropped), or NULL. set_items are the --moe-set items (already checked).
 * cuda_visible: the value for CUDA_VISIBLE_DEVICES, or NULL to keep the
 * job's. Returns 0, or -1 (out of memory) with a message. */
int launch_build(moe_launch *l, const moe_verdict *v, const char *config_path,
                 const char *data_dir, char *const *set_items, int n_items, const moe_task_place *place,
                 char *const *job_env, const char *cuda_visible, moe_err *e);
void launch_free(moe_launch *l);

/* The value of NAME in a NULL-terminated environment, or NULL. */
const char *launch_getenv(char *const *env, const char *name);

/* First host of a Slurm node list: "node[03-05,9],gpu7" -> "node03". */
int launch_first_host(const char *nodelist, char *out, size_t n, moe_err *e);

/* The rendezvous port of a step: derived from the job and step ids, so
 * every task computes the same one, and spread over 20000-31999, above the
 * privileged ports and below Linux's default ephemeral range (32768+). */
int launch_master_port(unsigned job_id, unsigned step_id);

#endif

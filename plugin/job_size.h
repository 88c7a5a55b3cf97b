/* moekit SPANK plugin: how many GPUs and tasks a job asks for, at submit time.
 *
 * SPANK shows an sbatch/srun/salloc plugin the options only of its own
 * plugin, so the early DP x EP check reads the size options the way the
 * command itself does: its command line, then the input environment
 * variables, then (sbatch) the #SBATCH lines of the script, each source
 * filling only what a stronger one left unset. This is a courtesy check that
 * refuses a job before it queues; the authoritative check runs on the node
 * with the GPUs and tasks Slurm really gave the step. Anything not
 * understood stays unknown (0) and is not checked early. */
#ifndef MOE_PLUGIN_JOB_SIZE_H
#define MOE_PLUGIN_JOB_SIZE_H

#include <stdio.h>

typedef struct {
    int nodes;           /* -N/--nodes (the minimum of a range) */
    int ntasks;          /* -n/--ntasks */
    int ntasks_per_node; /* --ntasks-per-node */
    int gpus;            /* -G/--gpus: for the whole job */
    int gpus_per_node;   /* --gpus-per-node, --gres=gpu[:type]:N; -1: a --gres without
                            GPUs (e.g. --gres=none) replaced the script's request */
    int gpus_per_task;   /* --gpus-per-task */
    char script[4096];   /* sbatch: the batch script named on the command line ("" if none) */
} moe_job_size;

/* Scan a command line (argv[0] is the program, e.g. "sbatch"). Stops at the
 * first operand: for sbatch, the script, whose path is kept in js->script.
 * Fills only fields still 0. */
void job_size_scan_argv(moe_job_size *js, int argc, char *const *argv);

/* Scan the #SBATCH lines at the top of a batch script. Fills only fields
 * still 0. */
void job_size_scan_script(moe_job_size *js, FILE *script);

/* Read the size input variables of the command (prefix "SBATCH_",
 * "SALLOC_" or, for srun, "SLURM_", which inside an allocation also carries
 * the allocation's size). env is a NULL-terminated "NAME=value" array.
 * Fills only fields still 0. */
void job_size_scan_env(moe_job_size *js, const char *prefix, char *const *env);

/* Totals for the whole job; 0 = unknown or none. */
int job_size_total_gpus(const moe_job_size *js);
int job_size_total_tasks(const moe_job_size *js);

#endif

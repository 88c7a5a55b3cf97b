/* moekit: which of the node's GPUs a Slurm step was given, in CUDA order,
 * and the moe_step the verdict works on. */
#ifndef MOE_TOPO_STEP_H
#define MOE_TOPO_STEP_H

#include "../launch/verdict.h"
#include "topo.h"

/* The step's GPUs as indices into t->gpus, in the order CUDA numbers them
 * inside the step (CUDA_DEVICE_ORDER=PCI_BUS_ID). The first source that is
 * set (non-NULL) decides:
 *   step_gpus     SLURM_STEP_GPUS: node-level indices (/dev/nvidiaN minors),
 *                 "0,1" or ranges "0-3"; CUDA order is PCI order among them.
 *   job_gpus      SLURM_JOB_GPUS, same form (batch steps have only this one).
 *   cuda_visible  CUDA_VISIBLE_DEVICES: node indices or GPU UUIDs ("GPU-..."),
 *                 in the order given, which is the order CUDA uses. UUIDs
 *                 need NVML or moe.uuid in the XML; MIG devices ("MIG-...")
 *                 are not supported.
 *   none set      every GPU of the node, as a process started by hand sees.
 * A set but empty value means no GPUs (CUDA reads "" that way). Unknown
 * indices, duplicates and unreadable values are errors naming the variable.
 * out must hold TOPO_MAX_GPUS entries; *from (may be NULL) names the source. */
int topo_step_gpus(const moe_topo *t, const char *step_gpus, const char *job_gpus,
                   const char *cuda_visible, int *out, int *n_out, const char **from,
                   moe_err *e);

/* The GPUs of a Slurm job step (the plugin's rule, from the step's
 * environment env): SLURM_STEP_GPUS, which Slurm sets for every step that
 * holds GPUs; without it the step holds none, whatever SLURM_JOB_GPUS or
 * CUDA_VISIBLE_DEVICES it inherited (`srun --gres=none` inside a batch
 * job, or a job that asked for no GPU on a GPU node). */
int topo_slurm_step_gpus(const moe_topo *t, char *const env[], int *out, int *n_out,
                         const char **from, moe_err *e);

/* One Slurm-style list of node GPU numbers ("0,1", "0-3") to indices into
 * t->gpus in PCI order; `what` names the list's source in errors. */
int topo_gpus_from_list(const moe_topo *t, const char *what, const char *list, int *out,
                        int *n_out, moe_err *e);

/* Look a variable up in an environment array (NULL: this process's). */
const char *topo_env_get(char *const env[], const char *name);

/* Fill *step from the topology and a job environment (NULL: this process's;
 * the SPANK plugin passes the job's S_JOB_ENV): the GPUs as topo_step_gpus
 * picks them from SLURM_STEP_GPUS / SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES,
 * ntasks from SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), nnodes from
 * SLURM_STEP_NUM_NODES (else SLURM_NNODES); 0 where unset. The whole struct
 * is overwritten: set step->num_experts afterwards. */
int topo_fill_step(const moe_topo *t, char *const env[], moe_step *step, moe_err *e);

/* Copy chosen GPUs (indices into t->gpus) into a moe_step's GPU list. */
void topo_step_from_indices(const moe_topo *t, const int *idx, int n, moe_step *step);

/* Memory of the smallest of the chosen GPUs in bytes (what a rank can
 * use), 0 when none says. */
unsigned long long topo_step_min_memory(const moe_topo *t, const int *idx, int n);
/* What a run may take on the step's tightest GPU: the least free memory the
 * driver reports among them (*gpu: that GPU's index, *is_free 1), or, where
 * a GPU's free memory is unknown (no driver here: a login node), the least
 * total (*is_free 0). 0 if neither is known. */
unsigned long long topo_step_room(const moe_topo *t, const int *idx, int n, int *gpu, int *is_free);

#endif

/* moekit SPANK plugin: state shared by the per-context files.
 *
 * spank_moe.c holds the entry points and dispatches on the context:
 *   allocator (sbatch, salloc)  spank_moe_alloc.c   early checks, job control env
 *   local (srun)                spank_moe_local.c   early checks, with the real task count
 *   remote (slurmstepd)         spank_moe_remote.c  verdict and trainer launch in task_init
 * The state is global because SPANK option callbacks receive no handle. */
#ifndef MOE_SPANK_MOE_H
#define MOE_SPANK_MOE_H

#include <slurm/spank.h>

#include "job_size.h"
#include "../launch/verdict.h"

typedef struct {
    moe_policy policy;      /* the admin's plugstack.conf arguments */
    moe_request request;    /* the user's --moe-* options */
    int policy_failed;      /* plugstack.conf arguments refused: every --moe-* job is refused */
    moe_err policy_err;     /* why, worded for the user */
    int option_failed;      /* a --moe-* value was refused (reported from task_init remotely) */
    moe_err option_err;     /* the first refusal */
} moe_plugin;

extern moe_plugin moe_state;

int moe_alloc_post_opt(spank_t sp);
int moe_local_post_opt(spank_t sp);
int moe_local_user_init(spank_t sp);
int moe_remote_task_init(spank_t sp);

/* Submit-time checks shared by sbatch/salloc and srun: the request's own
 * consistency and policy, then DP x EP against the size the job asks for
 * (0 = unknown). `who` names the command in messages. Prints the refusal
 * and returns -1 (never ESPANK_ERROR, which Slurm 22.05 ignores). */
int moe_submit_check(const char *who, int requested_gpus, int requested_tasks);

/* Copy the request into the job control environment (seen by the batch
 * script as SLURM_SPANK_MOE_*, even with --export=NONE, and by prolog and
 * epilog as SPANK_MOE_*). */
void moe_submit_export(spank_t sp);

/* sbatch, salloc: make the job's srun steps end every task once one task
 * exits non-zero (srun --kill-on-bad-exit=1), unless the submitter set
 * SLURM_KILL_BAD_EXIT themselves. */
void moe_submit_kill_on_bad_exit(void);

/* This process's command line (from /proc/self/cmdline) scanned for the
 * job's size, then the environment with the given input prefix. */
void moe_submit_job_size(moe_job_size *js, const char *env_prefix);

#endif

/* moekit SPANK plugin: entry points.
 *
 * plugstack.conf:  required /path/spank_moe.so trainer=... configs=... [policy...]
 *                  (a wrong argument never fails slurm_spank_init: see plugin/README.md)
 * Users:           sbatch|srun|salloc --moe-config=NAME [--moe-ep=N] ... (see plugin/README.md)
 *
 * Each entry point dispatches on the context to one file; a job without any
 * --moe-* option is never touched. */
#include <slurm/spank.h>
#include <string.h>

#include "args.h"
#include "../launch/policy.h"
#include "planner.h"
#include "spank_moe.h"

SPANK_PLUGIN(moe, 1)

moe_plugin moe_state;

static int option_cb(int val, const char *optarg, int remote)
{
    moe_err e;
    if (moe_state.policy_failed) {
        /* The job is refused with the policy's reason (moe_submit_check,
         * task_init), whatever this value is. */
        moe_state.request.active = 1;
        return 0;
    }
    if (args_apply(&moe_state.request, (moe_arg_id)val, optarg,
                   moe_state.policy.allow_user_configs, &e) == 0)
        return 0;
    if (remote) {
        /* In slurmstepd a failure here would drain the node and tell the user
         * nothing; task_init refuses instead, where the job's stderr shows it. */
        if (!moe_state.option_failed)
            moe_state.option_err = e;
        moe_state.option_failed = 1;
        return 0;
    }
    slurm_error("moekit: %s", e.msg);
    return -1;
}

static int register_options(spank_t sp)
{
    /* Slurm keeps pointers into this table for the life of the process. */
    static struct spank_option opts[MOE_ARG_COUNT];
    for (int i = 0; i < MOE_ARG_COUNT; i++) {
        opts[i] = (struct spank_option){
            .name = (char *)moe_args[i].name,
            .arginfo = (char *)moe_args[i].arginfo,
            .usage = (char *)moe_args[i].usage,
            .has_arg = moe_args[i].arginfo != NULL,
            .val = i,
            .cb = option_cb,
        };
        spank_err_t rc = spank_option_register(sp, &opts[i]);
        if (rc != ESPANK_SUCCESS) {
            slurm_error("moekit: cannot register --%s: %s", moe_args[i].name, spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    memset(&moe_state, 0, sizeof moe_state);
    moe_err e;
    if (policy_parse(&moe_state.policy, ac, av, &e) < 0) {
        /* A broken site policy must not let moekit jobs run unchecked, nor
         * touch anyone else's: failing here would fail every job (or, in
         * slurmstepd, drain the node). Every --moe-* job is refused with
         * this reason instead, at submit and in task_init. */
        moe_state.policy_failed = 1;
        moe_errf(&moe_state.policy_err, "the site's plugstack.conf arguments for spank_moe.so "
                                        "are wrong (%s); moekit jobs cannot run until an admin "
                                        "fixes them", e.msg);
        if (ctx != S_CTX_REMOTE)
            slurm_verbose("moekit: %s", moe_state.policy_err.msg);
    }
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR || ctx == S_CTX_REMOTE)
        return register_options(sp);
    return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
        return moe_alloc_post_opt(sp);
    case S_CTX_LOCAL:
        /* srun checks the config here and again in local_user_init (with
         * Slurm's task count): the same question, asked of the trainer once */
        if (moe_state.request.active)
            planner_share_init();
        return moe_local_post_opt(sp);
    case S_CTX_REMOTE:
        /* Remote: a failure here drains a batch step's node; everything is
         * decided in task_init instead. Here, in slurmstepd before it forks
         * the tasks, only the region through which the step's tasks on
         * this node share the trainer's answers (planner_share_init: asked
         * once per node, not once per task); mapping it opens nothing and
         * never fails the step. */
        if (moe_state.request.active && planner_share_init() < 0)
            slurm_verbose("moekit: no shared answers for this step's tasks: each asks alone");
        return 0;
    default:
        return 0;
    }
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    return spank_context() == S_CTX_LOCAL ? moe_local_user_init(sp) : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    return spank_context() == S_CTX_REMOTE ? moe_remote_task_init(sp) : 0;
}

/* moekit SPANK plugin: local context (srun).
 *
 * Checked twice: after the options (with the size the command line and the
 * allocation's environment give), and in local_user_init, where Slurm knows
 * the step's real task count; either refusal makes srun exit 1 before any
 * task starts. */
#include <stdint.h>

#include "spank_moe.h"

/* GPUs the step asks for, kept for the second check. */
static int requested_gpus;

int moe_local_post_opt(spank_t sp)
{
    if (!moe_state.request.active && !moe_state.option_failed)
        return 0;
    moe_job_size js;
    moe_submit_job_size(&js, "SLURM_");
    requested_gpus = job_size_total_gpus(&js);
    if (moe_submit_check("srun", requested_gpus, job_size_total_tasks(&js)) < 0)
        return -1;
    moe_submit_export(sp);
    return 0;
}

int moe_local_user_init(spank_t sp)
{
    if (!moe_state.request.active)
        return 0;
    uint32_t tasks = 0;
    if (spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &tasks) != ESPANK_SUCCESS)
        return 0; /* the node checks again with everything known */
    return moe_submit_check("srun", requested_gpus, (int)tasks);
}

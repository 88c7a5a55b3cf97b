/* moekit SPANK plugin: allocator context (sbatch, salloc).
 *
 * The last moment to refuse with the user watching: a refusal here makes
 * sbatch exit 1 and nothing is queued. An accepted job gets the request in
 * its job control environment and kill-on-bad-exit for its srun steps. */
#include <errno.h>
#include <string.h>

#include "spank_moe.h"

int moe_alloc_post_opt(spank_t sp)
{
    if (!moe_state.request.active && !moe_state.option_failed)
        return 0;
    /* sbatch and salloc read different input variables. */
    const char *prog = program_invocation_short_name;
    const char *who = strcmp(prog, "salloc") == 0 ? "salloc" : "sbatch";
    moe_job_size js;
    moe_submit_job_size(&js, strcmp(who, "salloc") == 0 ? "SALLOC_" : "SBATCH_");
    if (moe_submit_check(who, job_size_total_gpus(&js), job_size_total_tasks(&js)) < 0)
        return -1;
    moe_submit_export(sp);
    moe_submit_kill_on_bad_exit();
    return 0;
}

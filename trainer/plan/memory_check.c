/* moekit: the trainer's own memory check (memory_check.h). */
#include "memory_check.h"

#include <stdio.h>

#include "plan.h"

int memory_check_before_alloc(const moe_config *c, moe_backend *be, int ep, int dp, int rank,
                              moe_err *e)
{
    if (c->runtime.memory_check == MOE_RT_MEMCHECK_OFF || !be->device_memory || !be->mem_free)
        return 0;
    size_t free_b = be->mem_free(be);
    if (!free_b)
        return 0; /* the driver did not say: nothing to compare with */
    char what[96];
    snprintf(what, sizeof what, "rank %d's GPU has free (cudaMemGetInfo)", rank);
    plan_room room = {(double)free_b, what, 1};
    char msg[4096];
    moe_err pe = {{0}};
    int refuse = c->runtime.memory_check == MOE_RT_MEMCHECK_REFUSE;
    int fit = plan_fit_room(c, ep, dp, &room, refuse, msg, sizeof msg, &pe);
    if (fit == PLAN_FITS)
        return 0;
    if (pe.msg[0]) { /* no plan: the run's own allocations will say what is short */
        fprintf(stderr, "moe-train: warning: rank %d: no memory plan: %s\n", rank, pe.msg);
        return 0;
    }
    if (rank == 0) {
        moe_plan p;
        if (!plan_make(&p, c, ep, dp, be, &pe))
            plan_print(stderr, &p, c, (double)free_b);
    }
    if (fit == PLAN_WARN) {
        fprintf(stderr, "moe-train: warning: %s (runtime.memory_check=warn)\n", msg);
        return 0;
    }
    return moe_errf(e, "%s (runtime.memory_check=refuse; warn or off to start anyway)", msg);
}

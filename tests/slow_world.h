/* Tests of the watchdog: a two-rank stand-in communicator (over the single
 * one) whose barrier sleeps slow_world_ticks x 50 ms, or until the watchdog
 * aborts it; slow_world_aborted is the abort's exit code (-1: none). */
#ifndef MOE_TEST_SLOW_WORLD_H
#define MOE_TEST_SLOW_WORLD_H

#include <stdio.h>
#include <unistd.h>

#include "../trainer/comm/comm.h"

static int slow_world_aborted = -1, slow_world_ticks = 40;

static int slow_world_barrier(moe_comm *c, moe_err *e)
{
    (void)c;
    for (int i = 0; i < slow_world_ticks && slow_world_aborted < 0; i++)
        usleep(50 * 1000);
    return slow_world_aborted < 0 ? 0 : moe_errf(e, "aborted");
}

static void slow_world_abort(moe_comm *c, int code)
{
    (void)c;
    slow_world_aborted = code;
}

/* two: the stand-in named `name`, built on base (a single communicator),
 * with ops and ranks as its storage */
static void slow_world_make(moe_comm *two, moe_comm_ops *ops, int ranks[2], const moe_comm *base,
                            const char *name)
{
    *ops = *base->ops;
    ops->barrier = slow_world_barrier;
    ops->abort_job = slow_world_abort;
    *two = *base;
    ranks[0] = 0, ranks[1] = 1;
    two->ops = ops;
    two->size = 2;
    two->world_ranks = ranks;
    snprintf(two->name, sizeof two->name, "%s", name);
}

#endif

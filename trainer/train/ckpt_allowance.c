/* moekit: how long a collective may wait on checkpoint I/O (ckpt_allowance.h). */
#include "ckpt_allowance.h"

#include <math.h>

#include "../comm/watchdog.h"

double ckpt_allowance_s(uint64_t bytes, double min_mb_per_s, double timeout_s)
{
    if (!(min_mb_per_s > 0))
        return INFINITY;
    return (double)bytes / (min_mb_per_s * 1e6) + timeout_s;
}

void ckpt_allow(const moe_config *c, uint64_t bytes)
{
    watchdog_allow(ckpt_allowance_s(bytes, c->checkpoint.min_write_mb_per_s,
                                    c->parallel.timeout_s));
}

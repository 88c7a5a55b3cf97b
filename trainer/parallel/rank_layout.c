/* moekit: the rank layout arithmetic (see parallel.h); apart from the
 * bootstrap so programs that only lay out ranks do not link MPI. */
#include <stdio.h>

#include "parallel.h"

#include "../../common/layout.h"

int par_layout(moe_par *p, int rank, int size, int ep, int dp, moe_err *e)
{
    moe_layout_code code = layout_rule(size, ep, dp, 0, &dp);
    if (code == MOE_LAYOUT_NOT_POSITIVE && ep < 1)
        return moe_errf(e, "parallel.ep = %d: must be at least 1", ep);
    if (code == MOE_LAYOUT_EP_SPLITS_RANKS || (code == MOE_LAYOUT_EP_OVER_RANKS && dp == 0))
        return moe_errf(e, "parallel.ep = %d does not divide the %d ranks of this job, so "
                           "DP (ranks / EP) has no whole value: start a multiple of %d ranks "
                           "or change parallel.ep",
                        ep, size, ep);
    if (code != MOE_LAYOUT_OK)
        return moe_errf(e, "parallel.ep = %d x parallel.dp = %d = %lld rank%s, but this job has %d "
                           "rank%s: start EP x DP ranks, or set parallel.dp = 0 (ranks / EP)",
                        ep, dp, (long long)ep * dp, (long long)ep * dp == 1 ? "" : "s", size,
                        size == 1 ? "" : "s");
    p->rank = rank;
    p->size = size;
    p->ep_size = ep;
    p->dp_size = dp;
    p->ep_rank = rank % ep;
    p->dp_rank = rank / ep;
    int n = snprintf(p->layout, sizeof p->layout, "EP=%d x DP=%d over %d rank%s", ep, dp, size,
                     size == 1 ? "" : "s");
    if (ep > 1 && size > 1) {
        n += snprintf(p->layout + n, sizeof p->layout - (size_t)n, " (EP groups: ranks");
        for (int g = 0; g < dp && (size_t)n + 24 < sizeof p->layout; g++)
            n += snprintf(p->layout + n, sizeof p->layout - (size_t)n, "%s %d-%d", g ? "," : "",
                          g * ep, g * ep + ep - 1);
        if ((size_t)n + 2 < sizeof p->layout)
            snprintf(p->layout + n, sizeof p->layout - (size_t)n, ")");
    }
    return 0;
}

/* data.blend: which part each draw of a period comes from (data_internal.h).
 * Quotas are the weights rounded to 1/BLEND_PERIOD by largest remainders
 * (every part with a weight gets at least one draw); the draws are spread
 * by the greatest-deficit rule, so part d has taken close to
 * quota_d * k / BLEND_PERIOD of the first k draws of every period. Draw i of
 * the whole run is then part[i % P], the (i / P) quota + rank[i % P]-th
 * window of that part: no counting from the start on resume. */
#include "data_internal.h"

#include <math.h>
#include <string.h>

/* share[d]: part d's weight over the largest (0..1], so their sum cannot
 * overflow whatever the weights. */
static void quotas(data_blend *b, const double *share, int n)
{
    double rem[256], total = 0;
    uint32_t used = 0;
    for (int d = 0; d < n; d++)
        total += share[d];
    for (int d = 0; d < n; d++) {
        double exact = share[d] / total * BLEND_PERIOD;
        b->quota[d] = (uint32_t)floor(exact);
        if (b->quota[d] == 0)
            b->quota[d] = 1;
        rem[d] = exact - floor(exact);
        used += b->quota[d];
    }
    while (used < BLEND_PERIOD) { /* largest remainders first */
        int best = 0;
        for (int d = 1; d < n; d++)
            if (rem[d] > rem[best])
                best = d;
        b->quota[best]++;
        rem[best] = -1;
        used++;
    }
    while (used > BLEND_PERIOD) { /* minimum quotas pushed it over: take from the largest */
        int big = 0;
        for (int d = 1; d < n; d++)
            if (b->quota[d] > b->quota[big])
                big = d;
        b->quota[big]--;
        used--;
    }
}

int blend_build(data_blend *b, const data_part *parts, int n, moe_err *e)
{
    if (n < 1 || n > 256)
        return moe_errf(e, "data.blend: %d stores, need 1..256", n);
    if (n > BLEND_PERIOD)
        return moe_errf(e, "data.blend: too many stores");
    double max = 0, share[256];
    for (int d = 0; d < n; d++) {
        double w = parts[d].weight;
        if (!(w > 0) || !isfinite(w))
            return moe_errf(e, "data.blend[%d].weight = %g: must be finite and > 0", d, w);
        if (w > max)
            max = w;
    }
    for (int d = 0; d < n; d++)
        share[d] = parts[d].weight / max;
    memset(b, 0, sizeof *b);
    quotas(b, share, n);
    uint32_t taken[256] = {0};
    for (uint32_t i = 0; i < BLEND_PERIOD; i++) {
        int best = 0;
        double best_deficit = -1e300;
        for (int d = 0; d < n; d++) {
            double deficit = (double)b->quota[d] * (i + 1) / BLEND_PERIOD - taken[d];
            if (taken[d] < b->quota[d] && deficit > best_deficit) {
                best_deficit = deficit;
                best = d;
            }
        }
        b->part[i] = (uint16_t)best;
        b->rank[i] = taken[best]++;
    }
    return 0;
}

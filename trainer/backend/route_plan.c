#include "route_plan.h"

#include <stdlib.h>
#include <string.h>

int route_plan_build(const int32_t *topk_idx, int N, int K, int E, int64_t *count,
                     int64_t *offset, int32_t *row_token, int32_t *slot_row, moe_err *e)
{
    size_t nk = (size_t)N * K;
    memset(count, 0, sizeof(int64_t) * E);
    for (size_t i = 0; i < nk; i++) {
        int x = topk_idx[i];
        if (x < 0 || x >= E)
            return moe_errf(e, "route plan: token %zu slot %zu routed to expert %d of %d", i / K,
                            i % K, x, E);
        count[x]++;
    }
    offset[0] = 0;
    for (int x = 0; x < E; x++)
        offset[x + 1] = offset[x] + count[x];
    int64_t *fill = malloc(sizeof(int64_t) * (E > 0 ? E : 1));
    if (!fill)
        return moe_errf(e, "route plan: out of memory");
    memcpy(fill, offset, sizeof(int64_t) * E);
    /* stable: rows of one expert stay in (token, slot) order */
    for (size_t i = 0; i < nk; i++) {
        int64_t row = fill[topk_idx[i]]++;
        row_token[row] = (int32_t)(i / K);
        slot_row[i] = (int32_t)row;
    }
    free(fill);
    return 0;
}

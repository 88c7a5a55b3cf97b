/* moekit: the expert-major routing plan, computed on the host. Both backends
 * build it the same way (the CUDA one from a host copy of the routed
 * indices), so rows of one expert keep (token, slot) order everywhere. */
#ifndef MOE_ROUTE_PLAN_H
#define MOE_ROUTE_PLAN_H

#include <stdint.h>

#include "../../common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* From topk_idx[N*K] (host): count[E] and offset[E+1] per expert,
 * row_token[N*K] (source token of each expert-major row) and
 * slot_row[N*K] (expert-major row of each (token, slot)). An index outside
 * 0..E-1 is an error naming the token and slot. */
int route_plan_build(const int32_t *topk_idx, int N, int K, int E, int64_t *count,
                     int64_t *offset, int32_t *row_token, int32_t *slot_row, moe_err *e);

#ifdef __cplusplus
}
#endif

#endif

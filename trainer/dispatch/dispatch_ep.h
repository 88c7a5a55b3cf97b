/* moekit: the expert-parallel token dispatcher.
 *
 * The E experts are split over the EP group: rank q owns experts
 * [q E_local, (q+1) E_local). For each MoE layer:
 *   dispatch  count this rank's (token, slot) pairs per global expert,
 *             exchange the per-(rank, expert) counts, send each pair's token
 *             row and router weight to the expert's owner (all-to-all), and
 *             sort what arrives to expert-major order (expert, then source
 *             rank, then the source's token order) for the grouped GEMM;
 *   combine   send every expert output row back to its token's rank and sum
 *             each token's slots there;
 *   backward  the same two all-to-alls in the other direction for the
 *             output and input gradients (and router weights' gradients).
 * A rank that receives no rows still joins every collective. */
#ifndef MOE_DISPATCH_EP_H
#define MOE_DISPATCH_EP_H

#include "dispatch.h"
#include "../comm/comm.h"

/* ep: the EP group (its size divides E); E: global experts. */
int dispatcher_ep_create(moe_dispatcher **out, moe_comm *ep, int E, moe_err *e);
/* Expert buffers of N K x factor rows (parallel.expert_capacity_factor; at
 * most every row of the group, P N K), the rows beyond them in further
 * passes. factor 0 (the default): P N K rows, one pass. Set before the
 * model is made (max_rows). */
void dispatcher_ep_set_capacity(moe_dispatcher *d, double factor);
/* parallel.overlap_expert_exchange: every layer in at least two passes of at
 * most half the capacity, each pass's exchanges in flight beside another
 * pass's expert compute (dispatch_ep.c says which). The same bits as without
 * on the cpu backend; set before the model is made (max_rows halves). */
void dispatcher_ep_set_overlap(moe_dispatcher *d, int on);

#endif

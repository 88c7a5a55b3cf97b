/* moekit: data-parallel gradient reduction with sharded AdamW state
 * (ZeRO-1/2 style).
 *
 * Two groups of parameters: dense ones (attention, norms, router,
 * embeddings, head) are replicated on every rank, experts on the ranks of
 * one DP group. Each group is packed into one vector and split into
 * near-equal shards over the ranks that replicate it. Per step:
 *   reduce-scatter the gradients (sums: each rank's loss is already scaled
 *   by the global target count), so each rank holds the reduced gradient of
 *   its shard only; the global gradient norm is the allreduced sum of the
 *   shards' squares (every element counted once); AdamW updates the shard
 *   with the moments only this rank keeps; all-gather the updated masters.
 * Moment memory per rank is 1/world of the dense and 1/DP of the experts. */
#ifndef MOE_ZERO_H
#define MOE_ZERO_H

#include "../ckpt/slices.h"
#include "../model/model.h"
#include "parallel.h"

typedef struct moe_zero moe_zero;

int zero_create(moe_zero **out, moe_model *m, moe_par *p, moe_err *e);
void zero_destroy(moe_zero *z);

/* Reduce the model's gradients, clip to `clip` (0 = no clipping) by the
 * global norm, update the shards with h (grad_scale is set here) and
 * gather the new weights into the model. *norm_out: the global norm before
 * clipping. Fails (collectively) when the norm is not finite. */
int zero_step(moe_zero *z, moe_adamw_hyper h, double clip, double *norm_out, moe_err *e);

/* AdamW moment bytes this rank keeps, and what one unsharded rank keeps. */
size_t zero_moment_bytes(const moe_zero *z);
size_t zero_unsharded_moment_bytes(const moe_zero *z);

/* Collective: the full moments of this rank's layout (host, n_elems each). */
int zero_get_moments(moe_zero *z, real *m_host, real *v_host, moe_err *e);
/* Local: keep this rank's shards of moments in this rank's layout. */
int zero_set_moments(moe_zero *z, const real *m_host, const real *v_host, moe_err *e);

/* The training state in checkpoints (ckpt/slices.h): with for_save, what
 * this rank writes (the fp32 masters and both moments of its shards, so the
 * job writes every element once, in parallel); else what it loads (every
 * tensor it holds and its shards' moments), from any layout. The moments
 * are named exp_avg.<tensor> and exp_avg_sq.<tensor>. */
int zero_ckpt_slices(moe_zero *z, int for_save, ckpt_slice_list *out, moe_err *e);

#endif

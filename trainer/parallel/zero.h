/* moekit: the distributed optimizer (Megatron-Core's design, with moekit's
 * split masters), on the backend's memory.
 *
 * Two groups of parameters: dense ones (attention, norms, router,
 * embeddings, head) are replicated on every rank and shard over the world;
 * experts are replicated over their DP group and shard over it. The model's
 * flat gradient buffer is cut into buckets (contiguous ranges of one group,
 * at most parallel.grad_bucket_mb of gradients); each bucket is split into
 * near-equal slices over its group, and this rank's shard is its slice of
 * every bucket. Per step, with no host staging:
 *   1. every bucket is reduce-scattered in place in the gradient buffer
 *      (sums: each rank's loss is scaled by the global target count), so
 *      this rank's slices hold the reduced gradients;
 *   2. the global gradient norm is the world's sum of the slices' squares
 *      (every element lives in exactly one slice) and clips the update;
 *   3. AdamW updates the slices (backend op adamw_shard) from the state only
 *      this rank keeps: the two moments (fp32 or bf16) and, where the
 *      backend splits masters, the masters' low 16 bits (the high halves are
 *      the bf16 compute copy, which every rank has whole);
 *   4. every bucket's compute copy is all-gathered in place.
 * State per rank: compute copy 2 + gradient 4 bytes per local parameter, and
 * 10 bytes per shard element (6 with bf16 moments): 6 + 10/d bytes a
 * parameter. On the cpu backend the compute copy is the fp32 master, so the
 * shard keeps the moments only. */
#ifndef MOE_ZERO_H
#define MOE_ZERO_H

#include "../ckpt/slices.h"
#include "../model/model.h"
#include "parallel.h"

typedef struct moe_zero moe_zero;

typedef struct {
    size_t bucket_bytes; /* gradient bytes of one reduce-scatter (parallel.grad_bucket_mb) */
    int moments_bf16;    /* optimizer.moments_dtype = bf16 */
} moe_zero_opts;

/* The shards of model m over p's groups (p->world for the dense
 * parameters and the norm, p->dp for the experts): their collectives must
 * take the backend's memory (NCCL or the in-process communicator on GPUs,
 * MPI on cpu). m must come from model_create_parallel(with_moments = 0);
 * from here its masters go through this optimizer (model_get_masters is
 * then collective). */
int zero_create(moe_zero **out, moe_model *m, moe_par *p, const moe_zero_opts *o, moe_err *e);
void zero_destroy(moe_zero *z);

/* The next backward is the step's last micro-batch: each bucket starts its
 * reduce-scatter as soon as the backward has finished its gradients (the
 * model's grads_ready hook), overlapping the backward of the layers below
 * it (Megatron-Core's overlap_grad_reduce). zero_step starts the rest and
 * queues the update behind them all. Without it zero_step reduces all. */
void zero_arm(moe_zero *z);

/* Reduce the model's gradients, clip to `clip` (0 = no clipping) by the
 * global norm, update the shards with h (grad_scale is set here) and
 * gather the new weights into the model. *norm_out: the global norm before
 * clipping; a non-finite norm leaves the weights alone (every rank sees the
 * same norm, so the caller stops them all). */
int zero_step(moe_zero *z, moe_adamw_hyper h, double clip, double *norm_out, moe_err *e);

/* Bytes this rank keeps for the optimizer: the moments, and the moments of
 * one unsharded rank (the same storage type). */
size_t zero_moment_bytes(const moe_zero *z);
size_t zero_unsharded_moment_bytes(const moe_zero *z);
/* The whole shard: moments and the masters' remainder. */
size_t zero_state_bytes(const moe_zero *z);
/* Bytes one step's collectives send per rank: the gradient reduce-scatter
 * and the weight all-gather of each group (0 dense, 1 experts). */
void zero_step_traffic(const moe_zero *z, size_t rs_bytes[2], size_t ag_bytes[2]);
int zero_n_buckets(const moe_zero *z);

/* Collective: the full moments of this rank's layout (host, n_elems each). */
int zero_get_moments(moe_zero *z, real *m_host, real *v_host, moe_err *e);
/* Local: keep this rank's shards of moments in this rank's layout. */
int zero_set_moments(moe_zero *z, const real *m_host, const real *v_host, moe_err *e);

/* The training state in checkpoints (ckpt/slices.h): with for_save, what
 * this rank writes, else what it loads from any layout; both are this
 * rank's shard, so the job writes every element once, in parallel: the fp32
 * masters of its slices (rebuilt from the low halves and the compute copy,
 * or the compute copy itself where that is fp32) and its slices of both
 * moments, named exp_avg.<tensor> and exp_avg_sq.<tensor>, BF16 with bf16
 * moments, else F32. After loading, zero_ckpt_loaded. */
int zero_ckpt_slices(moe_zero *z, int for_save, ckpt_slice_list *out, moe_err *e);
/* The masters of the shard alone (initialising from weights). */
int zero_ckpt_master_slices(moe_zero *z, ckpt_slice_list *out, moe_err *e);
/* Collective, after every rank has loaded its slices: the compute copy
 * all-gathered, so every rank holds its whole weights again. */
int zero_ckpt_loaded(moe_zero *z, moe_err *e);

#endif

/* moekit CUDA backend: the FP8 copies of the weights, made once an optimizer
 * step (runtime.fp8_weight_cache).
 *
 * Without it every use of a weight quantises it again: the forward of each
 * micro-batch, its backward and its recompute. With it fp8_quant_weight
 * finds the copy made since the weights last changed and quantises only the
 * first time. A copy is keyed by the weight's address, shape and
 * orientation (w or w^T) and is valid for one generation: the generation
 * moves on whenever the backend changes weights in bulk (AdamW in any
 * form, masters to weights, masters made, new run options or recipe; a
 * freed buffer's copies are dropped) and when an upload,
 * copy, fill or conversion writes into a weight that has a copy. The NCCL
 * all-gather that writes a rank's weights after a sharded AdamW needs no
 * rule of its own: that AdamW moved the generation on, and the next
 * quantisation is queued after the all-gather.
 *
 * Memory: a copy's codes (out x in bytes) and scales, for each weight the
 * FP8 GEMMs read, in each orientation they read it: at Mixtral-8x7B's expert
 * sizes 2 x 3 x 58.7 MB an expert and layer (the plan's row,
 * plan_device.c). Allocated on first use, kept until the backend ends. */
#ifndef MOE_CUDA_FP8_WEIGHT_CACHE_H
#define MOE_CUDA_FP8_WEIGHT_CACHE_H

#include <stddef.h>

#include "../../lowp/fp8_gemm.h"

struct moe_backend;
typedef struct cuda_fp8_wcopy cuda_fp8_wcopy;

/* 1 and *o when w's copy in this orientation is current */
int cuda_wcache_find(struct moe_backend *be, const void *w, size_t out, size_t in, int transposed,
                     lowp_fp8_operand *o);
/* the storage for w's copy (codes of codes_bytes, scales of scale_bytes) that
 * cuda_wcache_keep then marks current; NULL when the cache is off or its
 * memory cannot be had (the caller quantises into scratch, as without it) */
cuda_fp8_wcopy *cuda_wcache_claim(struct moe_backend *be, const void *w, size_t out, size_t in,
                                  int transposed, size_t codes_bytes, size_t scale_bytes,
                                  void **codes, void **scales);
void cuda_wcache_keep(struct moe_backend *be, cuda_fp8_wcopy *c, const lowp_fp8_operand *o);
/* every copy stale (the weights changed in bulk) */
void cuda_wcache_weights_changed(struct moe_backend *be);
/* every copy stale if [p, p + bytes) overlaps a weight that has one */
void cuda_wcache_wrote(struct moe_backend *be, const void *p, size_t bytes);
/* the copies of weights in [p, p + bytes) dropped and their memory freed (p is
 * being freed; a later buffer at its address is other weights) */
void cuda_wcache_forget(struct moe_backend *be, const void *p, size_t bytes);
void cuda_wcache_set(struct moe_backend *be, int on);
/* the bytes the copies hold now */
size_t cuda_wcache_bytes(struct moe_backend *be);
void cuda_wcache_destroy(struct moe_backend *be);

#endif

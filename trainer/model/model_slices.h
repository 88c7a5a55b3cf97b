/* moekit: the model's training state as checkpoint slices (ckpt/slices.h).
 *
 * A group's packing is the order in which an optimizer shards it: the
 * tensors of one kind (dense, or this rank's experts) in parameter-table
 * order, each tensor's local elements in flat-buffer order. A packed range
 * [lo, lo + n) becomes slices of the Hugging Face tensors it covers (an
 * expert tensor per global expert), their data found through `src`. */
#ifndef MOE_MODEL_SLICES_H
#define MOE_MODEL_SLICES_H

#include "../ckpt/slices.h"
#include "model.h"

typedef enum {
    SLICE_SRC_MASTERS,     /* the fp32 masters, wherever model.h keeps them */
    SLICE_SRC_FLAT,        /* a real buffer of the model's flat layout (m->m, m->v) */
    SLICE_SRC_SHARD,       /* a real buffer holding only the range itself */
    SLICE_SRC_FLAT_BF16,   /* the same of bf16 (moments_bf16): BF16 slices */
    SLICE_SRC_SHARD_BF16,
    SLICE_SRC_SPLIT_SHARD, /* fp32 masters split between a shard buffer of their
                            * low halves and the compute copy (split_master.h) */
    SLICE_SRC_HOST         /* a real host buffer of the model's flat layout */
} slice_src;

/* Elements of a group's packing (experts: 1 for this rank's experts). */
size_t model_packed_elems(const moe_model *m, int experts);

/* Slices of packed elements [lo, lo + n) of a group, named prefix + the
 * Hugging Face name, F32. base: the buffer for FLAT and SHARD. */
int model_packed_slices(moe_model *m, int experts, size_t lo, size_t n, const char *prefix,
                        slice_src src, void *base, ckpt_slice_list *out, moe_err *e);

/* Slices of flat-layout elements [flat, flat + n) (any tensors they cross).
 * Shard sources hold element flat at base index base_at. */
int model_flat_slices(moe_model *m, size_t flat, size_t n, const char *prefix, slice_src src,
                      void *base, size_t base_at, ckpt_slice_list *out, moe_err *e);

/* Every tensor this rank holds, whole: the dense ones and its experts. */
int model_all_slices(moe_model *m, const char *prefix, slice_src src, void *base,
                     ckpt_slice_list *out, moe_err *e);

#endif

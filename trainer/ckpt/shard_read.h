/* moekit checkpoints: reading tensor slices from a checkpoint in any layout.
 *
 * A shard set is the tensors of a directory as pieces of files:
 *   - a sharded checkpoint (checkpoint.index.json, shard_write.h): each
 *     rank's file and its pieces; every byte read is checked against the
 *     index's per-block SHA-256 as it is read, so a resume verifies exactly
 *     what it reads, once;
 *   - a single-file checkpoint of earlier moekit versions (model.safetensors
 *     and optimizer.safetensors) or a Hugging Face model directory (one file
 *     or shards listed by model.safetensors.index.json): each tensor one
 *     piece (their MANIFEST, where there is one, is checked by ckpt_dir.h).
 * shard_set_fill fills the slices a rank asks for (their put()) with
 * pread at the pieces' offsets, through the caller's staging buffer: a rank
 * reads its slices and nothing else, whatever layout wrote them. */
#ifndef MOE_CKPT_SHARD_READ_H
#define MOE_CKPT_SHARD_READ_H

#include "slices.h"

#define CKPT_INDEX_FILE "checkpoint.index.json"
#define CKPT_INDEX_FORMAT "moekit-sharded-checkpoint-1"

typedef struct shard_set shard_set;

typedef struct {
    const char *name;
    st_dtype dtype; /* of the stored pieces */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} shard_tensor;

int shard_set_open(const char *dir, shard_set **out, moe_err *e);
void shard_set_close(shard_set *s);

/* The distinct tensors, sorted by name. */
int shard_set_count(const shard_set *s);
const shard_tensor *shard_set_tensor(const shard_set *s, int i);
const shard_tensor *shard_set_find(const shard_set *s, const char *name);

/* Fill every slice of `want` through put(). A slice's tensor must exist
 * with the slice's shape and its elements must all be stored; stored
 * BF16/F16/F64 convert to F32 slices and F32/F16/F64 to BF16 slices (rounded
 * to nearest even); other dtypes must match. */
int shard_set_fill(shard_set *s, const ckpt_slice_list *want, void *staging, size_t staging_bytes,
                   moe_err *e);

/* Bytes read from the files so far (headers excluded). */
uint64_t shard_set_bytes_read(const shard_set *s);

#endif

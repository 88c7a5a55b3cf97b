/* moekit checkpoints: Hugging Face model directories.
 *
 * A directory holds either model.safetensors, or shards listed by
 * model.safetensors.index.json ({"weight_map": {tensor name: shard file}}),
 * the two layouts save_pretrained writes (the single file wins when both are
 * present, as in transformers). hf_dir_open validates every shard header and
 * checks that each tensor the index names is in its shard, so a missing or
 * mismatched shard fails at open, not halfway through loading a model.
 * config.json is read and written by trainer/config/hf_config.h. */
#ifndef MOE_CKPT_HF_DIR_H
#define MOE_CKPT_HF_DIR_H

#include <stdint.h>

#include "../../common/err.h"
#include "safetensors.h"

#define HF_SINGLE_FILE "model.safetensors"
#define HF_INDEX_FILE "model.safetensors.index.json"

typedef struct hf_dir hf_dir;

int hf_dir_open(const char *path, hf_dir **out, moe_err *e);
void hf_dir_close(hf_dir *d);

/* 1 if the checkpoint has a tensor of that name, else 0. */
int hf_dir_has(const hf_dir *d, const char *name);

/* Tensors are indexed 0..hf_dir_count-1 in name order, across all shards
 * (what a loader needs to report tensors it did not expect). */
int hf_dir_count(const hf_dir *d);
const char *hf_dir_name(const hf_dir *d, int index);

/* Copy the tensor's description (dtype, shape, ...) into *out. */
int hf_dir_tensor_info(const hf_dir *d, const char *name, st_info *out, moe_err *e);

/* Read a tensor as fp32, checking its shape: see st_read_f32. */
int hf_dir_read_f32(hf_dir *d, const char *name, int ndim, const int64_t *shape, float *dst, moe_err *e);

#endif

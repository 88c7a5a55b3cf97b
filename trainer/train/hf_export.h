/* moekit: a checkpoint as a complete Hugging Face model directory.
 *
 * From any checkpoint moekit reads (sharded in any rank layout, single-file,
 * or a model directory), streamed through a bounded staging buffer:
 *   model.safetensors, or model-0000N-of-0000M.safetensors and
 *   model.safetensors.index.json past max_shard_bytes   the weights (bf16 or fp32)
 *   config.json, generation_config.json                  for MixtralForCausalLM
 *   tokenizer.json, tokenizer_config.json,
 *   special_tokens_map.json                              the byte tokenizer
 *   README.md                                            the model card: data, steps,
 *                                                        held-out loss, precision,
 *                                                        moekit version, the config
 *   moekit_export.json                                   the step of the checkpoint
 *                                                        exported (where it has one)
 * Shards are independent: rank r of w writes the shards i with i % w == r,
 * then one rank writes the rest. */
#ifndef MOE_HF_EXPORT_H
#define MOE_HF_EXPORT_H

#include <stdio.h>

#include <stdint.h>

#include "../ckpt/safetensors.h"

#define HF_EXPORT_DEFAULT_SHARD_BYTES ((uint64_t)5000000000) /* "5GB", as save_pretrained */

typedef struct {
    st_dtype dtype;           /* ST_BF16 or ST_F32 */
    uint64_t max_shard_bytes; /* a shard grows up to this (a larger tensor gets its own) */
    void *staging;            /* at least 16 bytes */
    size_t staging_bytes;
} hf_export_opts;

/* Rank `rank` of `world` writes its shards. *busiest (unless NULL): the bytes
 * the busiest rank reads and writes for its shards (fp32 read, o->dtype
 * written), from the plan every rank makes alike; 0 when there is no plan. */
int hf_export_shards(const char *ckpt, const char *out, const hf_export_opts *o, int rank,
                     int world, uint64_t *busiest, moe_err *e);
int hf_export_finish(const char *ckpt, const char *out, const hf_export_opts *o, moe_err *e);

#define HF_EXPORT_SOURCE_FILE "moekit_export.json"
/* The step of the checkpoint model_dir was exported from, or -1 (no
 * record, not an export, unreadable). */
int64_t hf_export_source_step(const char *model_dir);

/* Replace (or create) final with the complete directory tmp: rename, with
 * the previous one moved aside until the new one is in place. */
int hf_export_publish(const char *tmp, const char *final, moe_err *e);

#endif

/* moekit config: Hugging Face Mixtral config.json <-> moe_model_cfg.
 *
 * Reads what transformers 4.x and 5.x save for MixtralForCausalLM (rope_theta
 * at the top level, or in rope_parameters / rope_scaling) and refuses, with
 * the key and its line, what moekit's model cannot represent: another
 * model_type, a rope_type other than "default", a sliding window, tied
 * embeddings, an activation other than silu, quantized weights.
 * Absent optional keys take MixtralConfig's defaults, except
 * num_key_value_heads, which defaults to num_attention_heads (plain MHA).
 * The structural sizes (hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, num_local_experts, num_experts_per_tok, vocab_size)
 * are required: transformers always writes them, and guessing 8x7B sizes for
 * a hand-written file would only fail later.
 *
 * The written file loads with transformers 5.x MixtralForCausalLM
 * .from_pretrained (and 4.x, which reads the top-level rope_theta); token
 * ids are the genomic tokenizer's (EOS 0, PAD 1, BOS 2). */
#ifndef MOE_CONFIG_HF_CONFIG_H
#define MOE_CONFIG_HF_CONFIG_H

#include "../../common/err.h"
#include "config.h"

/* Fill *out from config.json at path. head_dim is always set (hidden_size /
 * num_attention_heads when the file has none). Fields of moe_model_cfg that
 * config.json does not carry are left as they were. */
int hf_config_read(const char *path, moe_model_cfg *out, moe_err *e);

/* Write config.json for cfg (head_dim 0 = hidden_size / num_heads). */
int hf_config_write(const char *path, const moe_model_cfg *cfg, moe_err *e);
/* The same, saying the weights are stored as torch_dtype ("bfloat16", ...). */
int hf_config_write_as(const char *path, const moe_model_cfg *cfg, const char *torch_dtype, moe_err *e);

#endif

/* moekit: the largest run a configuration may describe.
 *
 * Each limit is far beyond any model trained today (Mixtral-8x7B: 32
 * layers, 8 experts, 4096 wide, 8192 tokens) and keeps every size the
 * trainer and the memory plan compute inside its type (tokens of a
 * micro-batch and expert rows in an int, parameters and bytes in 64 bits),
 * and the plan's own host memory and time bounded whatever the model: the
 * plan holds two layers, the optimizer's bucket table and the expert
 * parallel count tables, which these bound. The schema's rows take the
 * single-key limits from here; config_scale_check ties keys together. */
#ifndef MOE_CONFIG_SCALE_H
#define MOE_CONFIG_SCALE_H

#include "config.h"

#define MOE_MAX_LAYERS 65536
#define MOE_MAX_EXPERTS 4096
#define MOE_MAX_HIDDEN 65536
#define MOE_MAX_HEADS 1024
#define MOE_MAX_HEAD_DIM 1024
#define MOE_MAX_INTERMEDIATE (1 << 20)
#define MOE_MAX_VOCAB (1 << 24)
#define MOE_MAX_POSITIONS (1 << 24)
#define MOE_MAX_MICRO_BATCH 65536
#define MOE_MAX_EP 1024
#define MOE_MAX_DP 65536
/* CPU threads: runtime.threads, moe-train --threads, moe-data --threads */
#define MOE_MAX_THREADS 1024
/* tokens of one micro-batch (train.micro_batch_size x train.seq_length) */
#define MOE_MAX_TOKENS (1 << 24)
/* ranks of one run (EP x DP) */
#define MOE_MAX_WORLD 65536
/* parameters of the whole model: 2^48, 281 trillion */
#define MOE_MAX_PARAMS 281474976710656.0
/* reduce-scatters a step: this rank's gradients over parallel.grad_bucket_mb */
#define MOE_MAX_BUCKETS 262144

/* The rules between keys at EP = ep x DP = dp (dp 0: not yet known, as
 * parallel.dp = 0 leaves it): the micro-batch's tokens and expert rows, the
 * model's parameters, the gradient buckets of one rank, the world. 0, or -1
 * with e naming the keys, the value and the limit. */
int config_scale_check(const moe_config *c, int ep, int dp, moe_err *e);

#endif

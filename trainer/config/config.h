/* moekit: the run configuration.
 *
 * A run is described by libconfig files in configs/. A config may name a
 * parent with `base = "defaults";` (a name in the same directory, or a path);
 * the chain is loaded parent first, each file overriding what it sets, then
 * the command-line overrides `path.to.key=value` on top. Every key below is
 * listed in the schema (config_schema.c); an unknown key, a wrong type or an
 * out-of-range value is an error naming the file and line (or the override)
 * and the allowed values. */
#ifndef MOE_CONFIG_H
#define MOE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define MOE_PATH_MAX 4096
#define MOE_MAX_FILES 16

typedef struct {
    int hidden_size;          /* model.hidden_size */
    int num_layers;           /* model.num_layers */
    int num_heads;            /* model.num_heads */
    int num_kv_heads;         /* model.num_kv_heads (GQA; divides num_heads) */
    int head_dim;             /* model.head_dim (0 = hidden_size / num_heads) */
    int num_experts;          /* model.num_experts */
    int top_k;                /* model.top_k (1..num_experts) */
    int intermediate_size;    /* model.intermediate_size (expert FFN width) */
    int vocab_size;           /* model.vocab_size */
    int max_position_embeddings; /* model.max_position_embeddings */
    double rope_theta;        /* model.rope_theta */
    double rms_norm_eps;      /* model.rms_norm_eps */
    double router_aux_loss_coef; /* model.router_aux_loss_coef (0 disables) */
    double init_std;          /* model.init_std (normal init of matrices) */
} moe_model_cfg;

typedef struct {
    int steps;                /* train.steps: optimizer steps */
    int micro_batch_size;     /* train.micro_batch_size: sequences per micro-batch */
    int seq_length;           /* train.seq_length: tokens per sequence */
    int grad_accum_steps;     /* train.grad_accum_steps */
    double grad_clip;         /* train.grad_clip: global L2 norm, 0 disables */
    uint64_t seed;            /* train.seed: init, data order, everything */
    int eval_every_n_steps;   /* train.eval_every_n_steps: 0 = only at the end */
    int eval_batches;         /* train.eval_batches: micro-batches per evaluation */
    int activation_recompute; /* train.activation_recompute (bool) */
} moe_train_cfg;

typedef struct {
    double lr;                /* optimizer.lr: peak learning rate */
    double beta1, beta2;      /* optimizer.betas = [b1, b2] */
    double eps;               /* optimizer.eps */
    double weight_decay;      /* optimizer.weight_decay (decoupled; not on norms) */
} moe_optim_cfg;

typedef struct {
    int warmup_steps;         /* scheduler.warmup_steps: linear from 0 */
    double min_lr_ratio;      /* scheduler.min_lr_ratio: cosine floor / lr */
} moe_sched_cfg;

typedef struct {
    int n_files;
    char files[MOE_MAX_FILES][MOE_PATH_MAX]; /* data.files: FASTA / FASTA.gz; relative paths
                                                resolve against the moekit data dir */
    int stride;               /* data.stride: window start spacing (0 = seq_length) */
    double val_fraction;      /* data.val_fraction: held-out share of every record */
    double reverse_complement; /* data.reverse_complement: probability per window */
    int mask_degenerate_bases; /* data.mask_degenerate_bases (bool): no loss on non-ACGT targets */
    int shuffle;              /* data.shuffle (bool) */
} moe_data_cfg;

typedef struct {
    char ckpt_dir[MOE_PATH_MAX];    /* checkpoint.ckpt_dir ("" = no checkpoints) */
    int save_every_n_steps;         /* checkpoint.save_every_n_steps (0 = never mid-run) */
    int max_checkpoints;            /* checkpoint.max_checkpoints (0 = keep all) */
    int resume_from_checkpoint;     /* checkpoint.resume_from_checkpoint (bool): latest in ckpt_dir */
    int save_final_model;           /* checkpoint.save_final_model (bool) */
    char init_from[MOE_PATH_MAX];   /* checkpoint.init_from: an HF Mixtral dir to start from ("" = random) */
    int overwrite;                  /* checkpoint.overwrite (bool): a run without resume may replace
                                       the checkpoints already in ckpt_dir */
    int staging_mb;                 /* checkpoint.staging_mb: host staging buffer per rank (MiB) */
} moe_ckpt_cfg;

typedef struct {
    int frequency;                  /* logger.frequency: log line every N steps */
    char run_dir[MOE_PATH_MAX];     /* logger.run_dir: metrics.jsonl, loss.png ("" = no files) */
} moe_logger_cfg;

typedef struct {
    int ep;                         /* parallel.ep: expert-parallel size */
    int dp;                         /* parallel.dp: data-parallel size (0 = world / ep) */
    double timeout_s;               /* parallel.timeout_s: collective wait before abort */
} moe_parallel_cfg;

typedef enum {
    MOE_PREC_AUTO = 0,
    MOE_PREC_FP32,
    MOE_PREC_BF16,
    MOE_PREC_FP8_BLOCK,
    MOE_PREC_MXFP8,
    MOE_PREC_MXFP8_EMULATED,
} moe_precision;

typedef struct {
    moe_precision compute;          /* precision.compute: auto|fp32|bf16|fp8_block|mxfp8|mxfp8_emulated */
    int allow_fp8_block;            /* precision.allow_fp8_block (bool): auto may pick fp8_block on Hopper */
    int fp8_saved_activations;      /* precision.fp8_saved_activations (bool): fp8_block keeps h1, h3 in E4M3 */
    char layers[64];                /* precision.layers: experts|all (which GEMMs go low precision) */
} moe_precision_cfg;

typedef struct {
    char backend[16];               /* runtime.backend: auto|cpu|cuda */
    int threads;                    /* runtime.threads: CPU threads (0 = OpenMP default) */
} moe_runtime_cfg;

typedef struct {
    char name[256];                 /* the config's name (file stem) */
    char path[MOE_PATH_MAX];        /* the file given (or found) */
    moe_model_cfg model;
    moe_train_cfg train;
    moe_optim_cfg optimizer;
    moe_sched_cfg scheduler;
    moe_data_cfg data;
    moe_ckpt_cfg checkpoint;
    moe_logger_cfg logger;
    moe_parallel_cfg parallel;
    moe_precision_cfg precision;
    moe_runtime_cfg runtime;
} moe_config;

/* Resolve `name_or_path`: a path (contains '/' or ends in .cfg and exists) or a
 * name looked up as <configs_dir>/<name>.cfg. configs_dir NULL means the
 * default search: $MOE_CONFIG_DIR, then the directory the binary was
 * installed with (MOE_CONFIG_DIR_DEFAULT, set at build time). Then apply the
 * overrides ("a.b=value", n_overrides of them) and validate the whole. */
int config_load(moe_config *cfg, const char *name_or_path, const char *configs_dir,
                int n_overrides, char *const *overrides, moe_err *e);

/* Fill cfg with the built-in defaults only (what an empty file gives). */
void config_defaults(moe_config *cfg);

/* Validate cross-field rules (heads divide, top_k <= experts, ...). */
int config_validate(const moe_config *cfg, moe_err *e);

/* Write the effective config as libconfig text (for the run dir and for
 * checkpoints), so a run can be reproduced from what it saved. The file is
 * self-contained (every key, no base) and replaced atomically; path "-"
 * writes to stdout. An invalid config is refused. */
int config_save(const moe_config *cfg, const char *path, moe_err *e);

/* The file `name_or_path` names, as config_load finds it (out_size bytes at
 * out). A name that is not found lists the available configs. */
int config_resolve_path(const char *name_or_path, const char *configs_dir, char *out,
                        size_t out_size, moe_err *e);

/* Apply one "a.b=value" override to cfg, typed by the schema. It does not
 * validate the whole: call config_validate when done changing cfg. */
int config_apply_override(moe_config *cfg, const char *override, moe_err *e);

const char *precision_name(moe_precision p);
int precision_parse(const char *s, moe_precision *out);

#endif

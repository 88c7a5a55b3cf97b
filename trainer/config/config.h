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
#include "../../common/precision.h"
#include "../data/data_cfg.h" /* moe_data_cfg, MOE_PATH_MAX */
#include "config_enums.h"

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
    int recompute_experts;    /* train.recompute_experts (bool) */
} moe_train_cfg;

typedef struct {
    double lr;                /* optimizer.lr: peak learning rate */
    double beta1, beta2;      /* optimizer.betas = [b1, b2] */
    double eps;               /* optimizer.eps */
    double weight_decay;      /* optimizer.weight_decay (decoupled; not on norms) */
    moe_moments_dtype moments_dtype; /* optimizer.moments_dtype: fp32|bf16 (storage of the moments) */
} moe_optim_cfg;

typedef struct {
    int warmup_steps;         /* scheduler.warmup_steps: linear from 0 */
    double min_lr_ratio;      /* scheduler.min_lr_ratio: cosine floor / lr */
} moe_sched_cfg;

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
    double min_write_mb_per_s;      /* checkpoint.min_write_mb_per_s: the floor bandwidth (MB/s) a
                                       save or load is allowed before the watchdog aborts it */
} moe_ckpt_cfg;

typedef struct {
    int frequency;                  /* logger.frequency: log line every N steps */
    char run_dir[MOE_PATH_MAX];     /* logger.run_dir: metrics.jsonl, loss.png ("" = no files) */
    int tensorboard;                /* logger.tensorboard: TensorBoard event files in run_dir */
} moe_logger_cfg;

typedef struct {
    int ep;                         /* parallel.ep: expert-parallel size */
    int dp;                         /* parallel.dp: data-parallel size (0 = world / ep) */
    double timeout_s;               /* parallel.timeout_s: collective wait before abort */
    int grad_bucket_mb;             /* parallel.grad_bucket_mb: gradient MiB per reduce-scatter */
    double expert_capacity_factor;  /* parallel.expert_capacity_factor: expert rows per pass */
    int overlap_expert_exchange;    /* parallel.overlap_expert_exchange (bool): exchange beside experts */
    int mpi_max_count;              /* parallel.mpi_max_count: elements per MPI call (0 = INT_MAX) */
} moe_parallel_cfg;

typedef struct {
    moe_precision compute;          /* precision.compute: auto|fp32|bf16|fp8_block|mxfp8|mxfp8_emulated */
    int allow_fp8_block;            /* precision.allow_fp8_block (bool): fp8_block may run on Hopper */
    int strict;                     /* precision.strict (bool): refuse rather than fall back */
    int fp8_saved_activations;      /* precision.fp8_saved_activations (bool): fp8_block keeps h1, h3 in E4M3 */
    moe_lowp_layers layers;         /* precision.layers: experts|all (which GEMMs go low precision) */
} moe_precision_cfg;

typedef struct {
    moe_backend_choice backend;     /* runtime.backend: auto|cpu|cuda */
    int threads;                    /* runtime.threads: CPU threads (0 = OpenMP default) */
    /* how the run goes, not what it computes (studies, comparisons, tests) */
    char fp8_gemms[32];             /* runtime.fp8_gemms: comma list of fprop,dgrad,wgrad or none */
    int fp8_chunk_rows;             /* runtime.fp8_chunk_rows: FP8 rows per expert GEMM (128k) */
    int fp8_fused_save;             /* runtime.fp8_fused_save (bool): SwiGLU kernel quantises h */
    int fp8_weight_cache;           /* runtime.fp8_weight_cache (bool): FP8 weights once a step */
    int expert_chunk_rows;          /* runtime.expert_chunk_rows: an expert's rows a pass (forward
                                       SwiGLU and down projection, backward) */
    moe_rt_gemm gemm;               /* runtime.gemm: cublaslt|cublas */
    moe_rt_attention attention;     /* runtime.attention: mma|wmma|simt */
    moe_rt_init_on init_on;         /* runtime.init_on: device|host */
    char cudnn_lib[MOE_PATH_MAX];   /* runtime.cudnn_lib: cuDNN library file ("" = the sonames) */
    moe_rt_memory_check memory_check; /* runtime.memory_check: refuse|warn|off */
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
    /* With checkpoint.init_from: bit i set when the i-th model.* key was set
     * where init_from is set or later (a child config, the command line);
     * see config_model_key_explicit. Not a key: never written or read. */
    uint32_t model_explicit;
} moe_config;

/* Resolve `name_or_path`: a path (contains '/' or ends in .cfg and exists) or a
 * name looked up as <configs_dir>/<name>.cfg. configs_dir NULL means the
 * default search (config_default_dir). A `base` name that is not beside its
 * child is looked up in the same directory. Then apply the overrides
 * ("a.b=value", n_overrides of them) and validate the whole. */
int config_load(moe_config *cfg, const char *name_or_path, const char *configs_dir,
                int n_overrides, char *const *overrides, moe_err *e);

/* The configs directory when none is given: $MOE_CONFIG_DIR, else the one
 * installed beside this binary (../share/moekit/configs), else this source
 * tree's configs/ for a binary built here. Written to buf, returned. */
const char *config_default_dir(char *buf, size_t n);

/* 1 when model.* key `path` was set by this run itself for a checkpoint.init_from
 * start (in the file that names init_from, a config based on it, or on the
 * command line): such a value must agree with the Hugging Face config.json;
 * every other model.* value is taken from config.json, as from_pretrained
 * does. */
int config_model_key_explicit(const moe_config *cfg, const char *path);

/* Fill cfg with the built-in defaults only (what an empty file gives). */
void config_defaults(moe_config *cfg);

/* The legacy environment variables of runtime.* and parallel.* keys
 * (MOE_FP8_GEMMS, ..., MOE_CUDNN_LIB, MOE_MPI_MAX_COUNT), applied to cfg as
 * config_load applies them, for a command that has no config file (eval).
 * It does not validate the whole. */
int config_apply_env(moe_config *cfg, moe_err *e);

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

/* runtime.fp8_gemms's list as MOE_FP8_* bits (common/precision.h); a word that is none of
 * fprop, dgrad, wgrad, none is an error naming it. */
int config_fp8_gemms_mask(const char *list, int *mask, moe_err *e);

#endif

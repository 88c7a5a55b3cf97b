/* moekit: the table of every configuration key. Keep rows of one group
 * together: config_save emits a group where its first row appears. */
#include "config_schema.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_scale.h"
#include "config_suggest.h"
#include "runtime_defaults.h"

/* Indexed by config_enums.h's enums. */
const char *const config_moments_dtype_names[] = {"fp32", "bf16", NULL};
const char *const config_layers_names[] = {"experts", "all", NULL};
const char *const config_backend_names[] = {"auto", "cpu", "cuda", NULL};
const char *const config_pack_names[] = {"auto", "packed", "padded", NULL};
/* Indexed by moe_rt_gemm, moe_rt_attention, moe_rt_init_on, moe_rt_memory_check
 * (config_enums.h). */
static const char *const gemm_choices[] = {"cublaslt", "cublas", NULL};
static const char *const attention_choices[] = {"cudnn", "mma", "wmma", "simt", NULL};
static const char *const init_on_choices[] = {"device", "host", NULL};
static const char *const memory_check_choices[] = {"refuse", "warn", "off", NULL};

#define AT(field) offsetof(moe_config, field)

/* Integer ranges. */
#define AT_LEAST(lo) .imin = (lo), .imax = INT_MAX
#define BETWEEN(lo, hi) .imin = (lo), .imax = (hi)

/* Float ranges. */
#define POSITIVE .fmin = 0, .fmin_open = 1, .fmax = INFINITY
#define NON_NEGATIVE .fmin = 0, .fmax = INFINITY
#define UNIT_CLOSED .fmin = 0, .fmax = 1
#define UNIT_HALF_OPEN .fmin = 0, .fmax = 1, .fmax_open = 1

#define INT_KEY(p, field, range, d, text)                                                  \
    {.path = p, .type = KEY_INT, .offset = AT(field), range, .def = d, .doc = text}
#define FLOAT_KEY(p, field, range, d, text)                                                \
    {.path = p, .type = KEY_FLOAT, .offset = AT(field), range, .def = d, .doc = text}
#define BOOL_KEY(p, field, d, text)                                                        \
    {.path = p, .type = KEY_BOOL, .offset = AT(field), .def = d, .doc = text}
#define STRING_KEY(p, field, d, text)                                                      \
    {.path = p, .type = KEY_STRING, .offset = AT(field),                                   \
     .size = sizeof(((moe_config *)0)->field), .def = d, .doc = text}
#define ENUM_KEY(p, field, list, d, text)                                                  \
    {.path = p, .type = KEY_ENUM, .offset = AT(field), .choices = list, .def = d, .doc = text}

const config_key config_keys[] = {
    INT_KEY("model.hidden_size", model.hidden_size, BETWEEN(1, MOE_MAX_HIDDEN), "256",
            "width of the residual stream"),
    INT_KEY("model.num_layers", model.num_layers, BETWEEN(1, MOE_MAX_LAYERS), "4", "decoder layers"),
    INT_KEY("model.num_heads", model.num_heads, BETWEEN(1, MOE_MAX_HEADS), "8", "attention (query) heads"),
    INT_KEY("model.num_kv_heads", model.num_kv_heads, BETWEEN(1, MOE_MAX_HEADS), "2",
            "key/value heads (grouped-query attention); must divide num_heads"),
    INT_KEY("model.head_dim", model.head_dim, BETWEEN(0, MOE_MAX_HEAD_DIM), "0",
            "width of one head; 0 = hidden_size / num_heads"),
    INT_KEY("model.num_experts", model.num_experts, BETWEEN(1, MOE_MAX_EXPERTS), "8",
            "experts per MoE layer"),
    INT_KEY("model.top_k", model.top_k, AT_LEAST(1), "2",
            "experts each token is routed to (1..num_experts)"),
    INT_KEY("model.intermediate_size", model.intermediate_size, BETWEEN(1, MOE_MAX_INTERMEDIATE), "896",
            "hidden width of one SwiGLU expert"),
    INT_KEY("model.vocab_size", model.vocab_size, BETWEEN(1, MOE_MAX_VOCAB), "256",
            "vocabulary; 256 = the byte-level nucleotide tokenizer"),
    INT_KEY("model.max_position_embeddings", model.max_position_embeddings, BETWEEN(1, MOE_MAX_POSITIONS),
            "8192", "longest sequence the model is built for (>= train.seq_length)"),
    FLOAT_KEY("model.rope_theta", model.rope_theta, POSITIVE, "1e6", "RoPE base frequency"),
    FLOAT_KEY("model.rms_norm_eps", model.rms_norm_eps, POSITIVE, "1e-5",
              "epsilon inside every RMSNorm"),
    FLOAT_KEY("model.router_aux_loss_coef", model.router_aux_loss_coef, NON_NEGATIVE, "0.0",
              "weight of the load-balancing loss; 0 disables it"),
    FLOAT_KEY("model.init_std", model.init_std, POSITIVE, "0.02",
              "standard deviation of the normal init of weight matrices"),

    INT_KEY("train.steps", train.steps, AT_LEAST(1), "20000", "optimizer steps"),
    INT_KEY("train.micro_batch_size", train.micro_batch_size, BETWEEN(1, MOE_MAX_MICRO_BATCH), "8",
            "sequences per micro-batch on each data-parallel rank"),
    INT_KEY("train.seq_length", train.seq_length, BETWEEN(1, MOE_MAX_POSITIONS), "1024", "tokens per sequence"),
    INT_KEY("train.grad_accum_steps", train.grad_accum_steps, AT_LEAST(1), "1",
            "micro-batches accumulated per optimizer step"),
    FLOAT_KEY("train.grad_clip", train.grad_clip, NON_NEGATIVE, "1.0",
              "clip the global gradient L2 norm to this; 0 disables clipping"),
    {.path = "train.seed", .type = KEY_U64, .offset = AT(train.seed), .imin = 0,
     .imax = INT64_MAX, .def = "42", .doc = "seed of the init, the data order, everything"},
    INT_KEY("train.eval_every_n_steps", train.eval_every_n_steps, AT_LEAST(0), "0",
            "evaluate every N steps; 0 = only at the end"),
    INT_KEY("train.eval_batches", train.eval_batches, AT_LEAST(1), "8",
            "validation micro-batches per evaluation"),
    BOOL_KEY("train.activation_recompute", train.activation_recompute, "false",
             "recompute activations in backward instead of keeping them"),
    BOOL_KEY("train.recompute_experts", train.recompute_experts, "false",
             "keep all but the experts' SwiGLU inputs, which the backward recomputes (less "
             "memory than keeping all, less time than activation_recompute)"),

    FLOAT_KEY("optimizer.lr", optimizer.lr, POSITIVE, "3e-3", "peak learning rate (AdamW)"),
    {.path = "optimizer.betas", .type = KEY_FLOAT_PAIR, .offset = AT(optimizer.beta1),
     .offset2 = AT(optimizer.beta2), UNIT_HALF_OPEN, .def = "0.9,0.95",
     .doc = "AdamW [beta1, beta2]"},
    FLOAT_KEY("optimizer.eps", optimizer.eps, POSITIVE, "1e-8", "AdamW epsilon"),
    FLOAT_KEY("optimizer.weight_decay", optimizer.weight_decay, NON_NEGATIVE, "0.1",
              "decoupled weight decay (not applied to norms)"),
    ENUM_KEY("optimizer.moments_dtype", optimizer.moments_dtype, config_moments_dtype_names,
             "fp32",
             "storage of AdamW's two moments: fp32, or bf16 (half the bytes; rounded to "
             "nearest even, the arithmetic stays fp32)"),

    INT_KEY("scheduler.warmup_steps", scheduler.warmup_steps, AT_LEAST(0), "2000",
            "linear warmup from 0 to lr over this many steps (<= train.steps)"),
    FLOAT_KEY("scheduler.min_lr_ratio", scheduler.min_lr_ratio, UNIT_CLOSED, "0.1",
              "floor of the cosine decay, as a fraction of lr"),

    {.path = "data.files", .type = KEY_STRING_LIST, .offset = AT(data.files),
     .offset2 = AT(data.n_files), .imin = 1, .imax = INT_MAX, .size = MOE_PATH_MAX,
     .def = "lambda_virus.fa.gz",
     .doc = "FASTA or FASTA.gz files, directories, globs or @lists (read into memory: for "
            "small inputs); relative paths are also looked up in the moekit data dir"},
    STRING_KEY("data.store", data.store, "",
               "a token store from moe-data prepare, memory-mapped; replaces data.files"),
    {.path = "data.blend", .type = KEY_BLEND, .offset = AT(data.blend), .offset2 = AT(data.n_blend),
     .imin = 0, .imax = 256, .def = "()",
     .doc = "token stores with weights, ( { store = \"A\"; weight = 0.7; }, ... ); replaces "
            "data.files"},
    INT_KEY("data.stride", data.stride, AT_LEAST(0), "0",
            "spacing of window starts in tokens; 0 = seq_length (no overlap)"),
    FLOAT_KEY("data.val_fraction", data.val_fraction, UNIT_HALF_OPEN, "0.1",
              "share of every record held out for validation"),
    FLOAT_KEY("data.reverse_complement", data.reverse_complement, UNIT_CLOSED, "0.0",
              "probability that a training window is reverse-complemented"),
    BOOL_KEY("data.mask_degenerate_bases", data.mask_degenerate_bases, "true",
             "no loss on targets that are not A, C, G or T"),
    BOOL_KEY("data.shuffle", data.shuffle, "true", "shuffle training windows every epoch"),
    ENUM_KEY("data.pack", data.pack, config_pack_names, "auto",
             "records end to end in every window (packed) or one record a window, padded; "
             "auto packs data.store and data.blend where the backend's attention takes sequence "
             "boundaries at its full rate"),

    STRING_KEY("checkpoint.ckpt_dir", checkpoint.ckpt_dir, "",
               "directory of checkpoints; empty = no checkpoints"),
    INT_KEY("checkpoint.save_every_n_steps", checkpoint.save_every_n_steps, AT_LEAST(0), "0",
            "save every N steps; 0 = never in the middle of a run"),
    INT_KEY("checkpoint.max_checkpoints", checkpoint.max_checkpoints, AT_LEAST(0), "3",
            "checkpoints kept in ckpt_dir; 0 = keep all"),
    BOOL_KEY("checkpoint.resume_from_checkpoint", checkpoint.resume_from_checkpoint, "false",
             "resume from the latest checkpoint in ckpt_dir when there is one"),
    BOOL_KEY("checkpoint.save_final_model", checkpoint.save_final_model, "true",
             "save the model when training ends"),
    STRING_KEY("checkpoint.init_from", checkpoint.init_from, "",
               "Hugging Face Mixtral directory to start from; empty = random init"),
    BOOL_KEY("checkpoint.overwrite", checkpoint.overwrite, "false",
             "a run without resume_from_checkpoint replaces the checkpoints in ckpt_dir"),
    INT_KEY("checkpoint.staging_mb", checkpoint.staging_mb, BETWEEN(1, 1048576), "1024",
            "host staging buffer per rank for checkpoint I/O, MiB (pinned on GPUs)"),
    FLOAT_KEY("checkpoint.min_write_mb_per_s", checkpoint.min_write_mb_per_s, POSITIVE, "50",
              "slowest checkpoint bandwidth to wait for, MB/s per rank: a collective that waits "
              "on a save or load may take its bytes at this rate plus parallel.timeout_s beyond "
              "parallel.timeout_s before a dead or hung rank aborts the job"),

    INT_KEY("logger.frequency", logger.frequency, AT_LEAST(1), "10",
            "print a log line every N steps"),
    STRING_KEY("logger.run_dir", logger.run_dir, "",
               "directory for metrics.jsonl and loss.png; empty = no files"),
    BOOL_KEY("logger.tensorboard", logger.tensorboard, "false",
             "also write TensorBoard event files (events.out.tfevents.*) in logger.run_dir"),

    INT_KEY("parallel.ep", parallel.ep, BETWEEN(1, MOE_MAX_EP), "1",
            "expert-parallel group size; must divide model.num_experts"),
    INT_KEY("parallel.dp", parallel.dp, BETWEEN(0, MOE_MAX_DP), "0",
            "data-parallel size; 0 = world size / ep"),
    FLOAT_KEY("parallel.timeout_s", parallel.timeout_s, POSITIVE, "300",
              "seconds a rank waits in a collective for its peers before the job is aborted"),
    INT_KEY("parallel.grad_bucket_mb", parallel.grad_bucket_mb, AT_LEAST(1), "64",
            "MiB of fp32 gradients the distributed optimizer reduce-scatters (and whose weights "
            "it all-gathers) in one collective"),
    FLOAT_KEY("parallel.expert_capacity_factor", parallel.expert_capacity_factor, POSITIVE,
              "1.5",
              "expert buffers hold micro-batch tokens x top_k x this many rows per rank (EP > "
              "1); rows beyond run in further passes, no token dropped"),
    BOOL_KEY("parallel.overlap_expert_exchange", parallel.overlap_expert_exchange, "false",
             "EP > 1: every layer in two or more passes of at most half the capacity, each "
             "pass's token exchange in flight beside another pass's expert compute"),
    INT_KEY("parallel.mpi_max_count", parallel.mpi_max_count, AT_LEAST(0), "0",
            "most elements one MPI call carries on CPU ranks, larger messages in pieces; 0 = "
            "MPI's limit (2^31 - 1); small values test the pieces (legacy: MOE_MPI_MAX_COUNT)"),

    {.path = "precision.compute", .type = KEY_ENUM, .offset = AT(precision.compute),
     .choices = precision_names, .def = "auto",
     .doc = "GEMM precision; auto = mxfp8 experts on data-centre Blackwell, fp8_block experts "
            "on Hopper (when allow_fp8_block), bf16 on other GPUs, fp32 on CPU; a recipe the "
            "GPU cannot run falls back to bf16 with the reason (see precision.strict)"},
    BOOL_KEY("precision.allow_fp8_block", precision.allow_fp8_block, "true",
             "fp8_block may run on Hopper: auto picks it there; false trains an asked "
             "fp8_block in bf16"),
    BOOL_KEY("precision.strict", precision.strict, "false",
             "a precision.compute the GPU cannot run stops the run at start-up instead of "
             "falling back to bf16 (the plugin sets it with the recipe its verdict chose)"),
    BOOL_KEY("precision.fp8_saved_activations", precision.fp8_saved_activations, "true",
             "fp8_block: keep the SwiGLU inputs for the backward in E4M3 (1x128 blocks), half "
             "of bf16's memory; false keeps them in bf16"),
    ENUM_KEY("precision.layers", precision.layers, config_layers_names, "experts",
             "which GEMMs run in low precision"),

    ENUM_KEY("runtime.backend", runtime.backend, config_backend_names, "auto",
             "compute backend; auto = cuda when a GPU is usable, else cpu"),
    /* libgomp crashes on a team of 65536; no node has more than 1024 CPUs. */
    INT_KEY("runtime.threads", runtime.threads, BETWEEN(0, MOE_MAX_THREADS), "0",
            "CPU threads, at most 1024; 0 = the OpenMP default"),
    STRING_KEY("runtime.fp8_gemms", runtime.fp8_gemms, "fprop,dgrad,wgrad",
               "which expert GEMMs fp8_block and mxfp8 run in FP8: a comma list of fprop, "
               "dgrad, wgrad, or none (the others in bf16; a precision study's knob)"),
    {.path = "runtime.fp8_chunk_rows", .type = KEY_INT, .offset = AT(runtime.fp8_chunk_rows),
     .imin = MOE_CHUNK_ROWS_ALIGN, .imax = 1 << 24,
     .def = MOE_DEFAULT_TEXT(MOE_DEFAULT_FP8_CHUNK_ROWS),
     .doc = "an expert's FP8 rows go through the GEMMs this many at a time (a multiple of 128; "
            "bounds the quantised copies however the router spreads tokens)"},
    {.path = "runtime.expert_chunk_rows", .type = KEY_INT, .offset = AT(runtime.expert_chunk_rows),
     .imin = MOE_CHUNK_ROWS_ALIGN, .imax = 1 << 24,
     .def = MOE_DEFAULT_TEXT(MOE_DEFAULT_EXPERT_CHUNK_ROWS),
     .doc = "on the GPU an expert's rows go through the SwiGLU, the down projection and the "
            "backward this many at a time (a multiple of 128; bounds the [rows, intermediate] "
            "scratch of the forward and the backward however the router spreads tokens)"},
    BOOL_KEY("runtime.fp8_fused_save", runtime.fp8_fused_save, "true",
             "fp8_block: the SwiGLU kernel quantises the saved h1, h3 itself; false runs the "
             "quantiser after it (the same bytes; a check and an ablation)"),
    BOOL_KEY("runtime.fp8_weight_cache", runtime.fp8_weight_cache, "true",
             "fp8_block / mxfp8: each weight's FP8 copies made once an optimizer step and kept "
             "for every micro-batch, backward and recompute (the plan's row: 2 x 3 x hidden x "
             "intermediate bytes an expert and layer); false quantises at every use, where "
             "memory is short"),
    ENUM_KEY("runtime.gemm", runtime.gemm, gemm_choices, "cublaslt",
             "library of the bf16 GEMMs: cublaslt (an algorithm per shape family) or cublas "
             "(cublasGemmEx every call; to compare)"),
    ENUM_KEY("runtime.attention", runtime.attention, attention_choices, "cudnn",
             "attention tried first: cudnn (cuDNN's fused flash attention where cuDNN loads and "
             "takes the shape), mma (mma.sync), wmma or simt (moekit's kernels, to test and "
             "time); a shape a family lacks falls to the next"),
    ENUM_KEY("runtime.init_on", runtime.init_on, init_on_choices, "device",
             "where the random init runs: device (where the backend can) or host (the same "
             "bits, slower; to compare)"),
    STRING_KEY("runtime.cudnn_lib", runtime.cudnn_lib, "",
               "the cuDNN library file the cuda backend opens for its attention; empty = "
               "libcudnn_graph.so.9, else libcudnn.so.9 (legacy: MOE_CUDNN_LIB)"),
    ENUM_KEY("runtime.memory_check", runtime.memory_check, memory_check_choices, "refuse",
             "before its first allocation a GPU rank compares the memory plan with what the "
             "GPU has free: refuse (a run that would not fit stops with the plan and what "
             "would fit), warn, or off"),
};

const size_t config_key_count = sizeof config_keys / sizeof config_keys[0];

/* Enum fields are stored through an int; make sure that is what they are. */
_Static_assert(sizeof(moe_precision) == sizeof(int) && sizeof(moe_rt_gemm) == sizeof(int) &&
                   sizeof(moe_rt_attention) == sizeof(int) &&
                   sizeof(moe_rt_init_on) == sizeof(int) &&
                   sizeof(moe_rt_memory_check) == sizeof(int) &&
                   sizeof(moe_moments_dtype) == sizeof(int) &&
                   sizeof(moe_lowp_layers) == sizeof(int) &&
                   sizeof(moe_backend_choice) == sizeof(int) &&
                   sizeof(moe_pack_mode) == sizeof(int),
               "enum keys must be int-sized");

const config_key *config_key_find(const char *path)
{
    for (size_t i = 0; i < config_key_count; i++)
        if (strcmp(config_keys[i].path, path) == 0)
            return &config_keys[i];
    return NULL;
}

/* Length of the group part of "group.key". */
static size_t group_len(const char *path)
{
    const char *dot = strchr(path, '.');
    return dot ? (size_t)(dot - path) : strlen(path);
}

int config_group_known(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < config_key_count; i++)
        if (group_len(config_keys[i].path) == n && strncmp(config_keys[i].path, name, n) == 0)
            return 1;
    return 0;
}

int config_unknown_key(const char *path, int is_group, moe_err *e)
{
    const char *names[sizeof config_keys / sizeof config_keys[0]];
    char groups[sizeof config_keys / sizeof config_keys[0]][32];
    const char *group_names[sizeof config_keys / sizeof config_keys[0]];
    size_t n_groups = 0;
    for (size_t i = 0; i < config_key_count; i++) {
        names[i] = config_keys[i].path;
        size_t g = group_len(names[i]);
        if (n_groups == 0 || strncmp(group_names[n_groups - 1], names[i], g) != 0 ||
            group_names[n_groups - 1][g] != '\0') {
            snprintf(groups[n_groups], sizeof groups[n_groups], "%.*s", (int)g, names[i]);
            group_names[n_groups] = groups[n_groups];
            n_groups++;
        }
    }
    const char *hint = is_group ? closest_word(path, group_names, n_groups)
                                : closest_word(path, names, config_key_count);
    if (!hint && !is_group) {
        /* The right key in the wrong group ("train.lr" for "optimizer.lr"). */
        const char *leaf = strrchr(path, '.');
        leaf = leaf ? leaf + 1 : path;
        for (size_t i = 0; i < config_key_count && !hint; i++)
            if (strcmp(strchr(names[i], '.') + 1, leaf) == 0)
                hint = names[i];
    }
    const char *what = is_group ? "group" : "key";
    if (hint)
        return moe_errf(e, "unknown %s '%s' (did you mean '%s'?)", what, path, hint);
    return moe_errf(e, "unknown %s '%s'", what, path);
}

int config_fp8_gemms_mask(const char *list, int *mask, moe_err *e)
{
    /* word i is bit 1 << i: MOE_FP8_FPROP, _DGRAD, _WGRAD */
    static const char *const words[] = {"fprop", "dgrad", "wgrad"};
    char buf[sizeof(((moe_config *)0)->runtime.fp8_gemms)];
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        return moe_errf(e, "runtime.fp8_gemms = \"%s\" is too long", list);
    *mask = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int bit = 0;
        for (int i = 0; i < 3; i++)
            if (!strcmp(t, words[i]))
                bit = 1 << i;
        if (!bit && strcmp(t, "none"))
            return moe_errf(e, "runtime.fp8_gemms = \"%s\": '%s' is not one of fprop, dgrad, "
                               "wgrad, none", list, t);
        *mask |= bit;
    }
    return 0;
}

void config_defaults(moe_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < config_key_count; i++) {
        moe_err e;
        /* The defaults are part of the program; the unit tests load every one,
         * so a failure here is a broken build, not a user error. */
        if (config_key_set_text(&config_keys[i], cfg, config_keys[i].def, &e)) {
            fprintf(stderr, "moekit: built-in default of %s is invalid: %s\n",
                    config_keys[i].path, e.msg);
            abort();
        }
    }
}

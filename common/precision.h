/* moekit: the precision vocabulary, one enum and one name table for the
 * config (precision.compute), the plugin (--moe-precision, the verdict) and
 * the backends, and the one rule of which recipe a GPU can run. */
#ifndef MOE_PRECISION_H
#define MOE_PRECISION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The order is the config's: config files and saved configs spell the
 * names, never the numbers. */
typedef enum {
    MOE_PREC_AUTO = 0,       /* the best recipe the hardware and policy allow */
    MOE_PREC_FP32,           /* the cpu backend */
    MOE_PREC_BF16,           /* any GPU of compute capability 8.0 or newer */
    MOE_PREC_FP8_BLOCK,      /* Hopper: E4M3 with 1x128 / 128x128 block scales */
    MOE_PREC_MXFP8,          /* data-centre Blackwell: E4M3 with 1x32 E8M0 scales */
    MOE_PREC_MXFP8_EMULATED, /* MXFP8 values through bf16 GEMMs, any GPU (accuracy studies) */
    MOE_PREC_COUNT
} moe_precision;

/* How an operand's E4M3 values are scaled along the GEMM's k. The numbers
 * are cuBLASLt's operand kinds in trainer/lowp/fp8_gemm.h. */
typedef enum {
    MOE_SCALES_FP32_1X128 = 0,   /* an fp32 scale per 128 values (Hopper activations) */
    MOE_SCALES_FP32_128X128 = 1, /* an fp32 scale per 128x128 tile (Hopper weights) */
    MOE_SCALES_E8M0_1X32 = 2     /* an E8M0 power of two per 32 values, cuBLASLt's swizzle */
} moe_scale_layout;

/* The three GEMMs of a linear layer, as bits: which of them an E4M3
 * recipe runs in FP8 (runtime.fp8_gemms: fprop, dgrad, wgrad; the others
 * in bf16). The one set of these flags, from the config to the kernels. */
enum { MOE_FP8_FPROP = 1, MOE_FP8_DGRAD = 2, MOE_FP8_WGRAD = 4 };

/* What a recipe's GEMMs multiply. */
typedef enum {
    MOE_GEMMS_FP32 = 0,      /* the cpu backend's fp32 */
    MOE_GEMMS_BF16,          /* bf16 tensor cores */
    MOE_GEMMS_E4M3,          /* block-scaled E4M3 tensor-core GEMMs (cuBLASLt) */
    MOE_GEMMS_E4M3_EMULATED  /* E4M3 values dequantised to bf16, bf16 GEMMs */
} moe_gemm_kind;

/* A GPU a recipe refuses, and why: the first clause whose compute-capability
 * major lies in [cc_lo, cc_hi] (-1: unknown) is the reason given. */
typedef struct {
    int cc_lo, cc_hi;
    const char *why;
} moe_recipe_refusal;

/* One low-precision recipe: everything the backends, the planner, the MFU
 * and the usage texts need to know of it. The row is chosen once for a run
 * (precision_recipe) and carried as a pointer; code reads its fields, never
 * its name. Adding a format is one row here and its folder of quantisers
 * (trainer/lowp/FORMAT/). */
typedef struct moe_recipe {
    moe_precision precision;     /* its name: precision_name(precision) */
    const char *help;            /* one clause for usage texts and config docs */
    int job_choice;              /* offered to jobs (--moe-precision) */
    moe_gemm_kind gemms;
    int block;                   /* values per scale along k (0: unscaled) */
    int align;                   /* rows and widths its E4M3 GEMMs take in multiples of */
    moe_scale_layout act_scales; /* activations and gradients, rowwise and columnwise */
    moe_scale_layout weight_scales;
    int cc_major;                /* the compute-capability major it needs: -1 any of 8.0
                                    or newer, 0 no GPU (the cpu backend) */
    moe_recipe_refusal refusals[4]; /* where cc_major is one major: the others' reasons */
    int saves_e4m3_swiglu_in;    /* the backward may keep h1, h3 as E4M3 (runtime.fp8_fused_save) */
    int fused_swiglu_quant;      /* SwiGLU x p writes the down projection's E4M3 operand */
    int peak_vs_bf16;            /* tensor-core peak over bf16's on GPUs with FP8 (9.0+) */
} moe_recipe;

/* The row of p; NULL for auto (no recipe: it picks one) and outside the enum. */
const moe_recipe *precision_recipe(moe_precision p);

/* The names jobs may ask for (auto and the rows with job_choice), in the
 * table's order, for texts the compiler must see whole (the plugin's option
 * table, help pages); test_common holds it to precision_name_list. */
#define MOE_PRECISION_JOB_NAMES "auto|bf16|fp8_block|mxfp8"

/* The recipes' names joined for a usage text: "auto, bf16, fp8_block or
 * mxfp8" (sep ", ", last " or "), job_only: only those offered to jobs.
 * Returns out. */
char *precision_name_list(char *out, size_t n, const char *sep, const char *last, int job_only);

/* The names, indexed by moe_precision, NULL-terminated (the config schema's
 * choices). */
extern const char *const precision_names[MOE_PREC_COUNT + 1];

/* "mxfp8", ...; "invalid" outside the enum. */
const char *precision_name(moe_precision p);
/* 0 and *out for a name above, else -1 (*out unchanged). */
int precision_parse(const char *s, moe_precision *out);

/* Whether a GPU of compute capability cc_major.cc_minor (cc_major < 0:
 * unknown) can run recipe p. Returns 1, or 0 with the reason as one clause
 * naming the recipe and what it needs in why (n bytes; may be NULL). auto
 * and fp32 are no GPU recipe. The plugin's verdict, moe-topo --check and
 * the CUDA backend all ask this. */
int precision_gpu_can_run(moe_precision p, int cc_major, int cc_minor, char *why, size_t n);

/* The GPU code this build carries (common/rules.mk): machine code for these
 * architectures ("90a 100a") and PTX of this one ("90"); precision_gpu_can_run
 * offers a recipe only where it has code. */
extern const char precision_build_sass[];
extern const char precision_build_ptx[];

#ifdef __cplusplus
}
#endif

#endif

/* moekit: which recipe a job trains in, from what was asked and the GPUs it
 * got: the one decision behind the plugin's verdict (launch/verdict.c) and
 * moe-train's own choice when no plugin chose for it (trainer.c).
 *
 *   - A GPU below compute capability 8.0: refused (no BF16 tensor cores).
 *   - Every GPU data-centre Blackwell (precision_gpu_can_run's MXFP8 rule):
 *     MXFP8 for auto, mxfp8 and fp8_block (moekit's Hopper recipe becomes
 *     the Blackwell one); bf16 when asked.
 *   - Otherwise, with the admin's on_non_blackwell=reject: refused.
 *   - Otherwise BF16, or fp8_block where every GPU is Hopper and fp8_block
 *     is allowed (asked, or auto). An asked recipe the GPUs cannot run falls
 *     back, unless the rules are strict: then it is refused.
 * The weakest GPU decides. Recipes that run on any GPU of 8.0 or newer
 * (bf16, mxfp8_emulated) are taken as asked; fp32 (the cpu backend's) is no
 * GPU recipe and is refused. auto is resolved here and nowhere else: it
 * never falls back and is never refused but for the GPUs or the policy. */
#ifndef MOE_PRECISION_CHOICE_H
#define MOE_PRECISION_CHOICE_H

#include <stddef.h>

#include "precision.h"

typedef struct {
    int reject_non_blackwell; /* the admin's on_non_blackwell=reject */
    int allow_fp8_block;      /* fp8_block allowed on Hopper */
    int strict;               /* an asked recipe or a refusal, never a fallback
                                 (precision.strict; the plugin's decided recipe) */
} precision_rules;

typedef struct {
    int cc_major, cc_minor; /* -1: unknown */
} precision_gpu;

typedef enum {
    PRECISION_AS_ASKED = 0, /* the recipe asked (auto: the best allowed) */
    PRECISION_UPGRADED,     /* fp8_block asked on Blackwell: MXFP8 */
    PRECISION_FELL_BACK,    /* the recipe asked cannot run here: BF16 */
    PRECISION_REFUSED
} precision_outcome;

typedef enum {
    PRECISION_WHY_NONE = 0,
    PRECISION_WHY_TOO_OLD,         /* refused: a GPU below 8.0 */
    PRECISION_WHY_BLACKWELL_ONLY,  /* refused: not all Blackwell, on_non_blackwell=reject */
    PRECISION_WHY_NOT_BLACKWELL,   /* mxfp8 asked, not every GPU can run it */
    PRECISION_WHY_FP8_NOT_HOPPER,  /* fp8_block asked, not every GPU is Hopper */
    PRECISION_WHY_FP8_NOT_ALLOWED, /* fp8_block asked on Hopper, not allowed */
    PRECISION_WHY_STRICT,          /* fp8_block asked on Blackwell, strict: no MXFP8 instead */
    PRECISION_WHY_NOT_GPU_RECIPE   /* refused: fp32 (or no recipe) asked of a GPU */
} precision_why;

typedef struct {
    precision_outcome outcome;
    moe_precision precision; /* what runs (MOE_PREC_AUTO when refused) */
    precision_why why;
    int gpu;                 /* the GPU that decided a fallback or refusal, else -1 */
} precision_choice;

/* The recipe for `want` (auto, bf16, fp8_block, mxfp8, mxfp8_emulated) on
 * n_gpus >= 1 GPUs under rules. */
precision_choice precision_choose(moe_precision want, const precision_gpu *gpus, int n_gpus,
                                  const precision_rules *rules);

/* One line for a fallback or refusal: "mxfp8 needs data-centre Blackwell
 * (compute capability 10.x); fp8_block is the Hopper recipe", the deciding
 * GPU's reason as precision_gpu_can_run gives it. Empty where why is
 * PRECISION_WHY_NONE (as asked, or fp8_block upgraded to mxfp8). */
void precision_choice_reason(const precision_choice *c, moe_precision want,
                             const precision_gpu *gpus, char *out, size_t n);

#endif

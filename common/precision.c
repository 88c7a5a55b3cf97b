/* moekit: the precision vocabulary and the GPU rule (see precision.h).
 *   bf16, mxfp8_emulated  compute capability 8.0 or newer (BF16 tensor cores);
 *                         a GPU whose capability is unknown is given bf16
 *   fp8_block             Hopper (9.x): moekit's block-scaled E4M3 GEMMs
 *   mxfp8                 data-centre Blackwell (10.x: B200, GB200, B300).
 *                         Consumer and workstation Blackwell (12.x) lacks the
 *                         sm_100 tensor-core path the MXFP8 kernels use.
 * and only where this build carries the kernels for the GPU (build_has_kernels): an
 * sm_100a-only build has no MXFP8 kernels for a B300 (10.3). */
#include "precision.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const precision_names[MOE_PREC_COUNT + 1] = {
    [MOE_PREC_AUTO] = "auto",
    [MOE_PREC_FP32] = "fp32",
    [MOE_PREC_BF16] = "bf16",
    [MOE_PREC_FP8_BLOCK] = "fp8_block",
    [MOE_PREC_MXFP8] = "mxfp8",
    [MOE_PREC_MXFP8_EMULATED] = "mxfp8_emulated",
    [MOE_PREC_COUNT] = NULL,
};

/* The recipes. bf16 and mxfp8_emulated run anywhere from 8.0; the E4M3
 * recipes only where their tensor-core kernels do. */
static const moe_recipe recipes[MOE_PREC_COUNT] = {
    [MOE_PREC_FP32] = {
        .precision = MOE_PREC_FP32, .help = "fp32 on the cpu backend",
        .gemms = MOE_GEMMS_FP32, .align = 1, .cc_major = 0,
        .refusals = {{INT_MIN, INT_MAX, "fp32 runs on the cpu backend only"}},
        .peak_vs_bf16 = 1,
    },
    [MOE_PREC_BF16] = {
        .precision = MOE_PREC_BF16, .help = "bf16 GEMMs, any GPU of compute capability 8.0+",
        .job_choice = 1, .gemms = MOE_GEMMS_BF16, .align = 1, .cc_major = -1,
        .peak_vs_bf16 = 1,
    },
    [MOE_PREC_FP8_BLOCK] = {
        .precision = MOE_PREC_FP8_BLOCK,
        .help = "E4M3 with fp32 1x128 / 128x128 block scales, Hopper (9.x)",
        .job_choice = 1, .gemms = MOE_GEMMS_E4M3, .block = 128, .align = 16,
        .act_scales = MOE_SCALES_FP32_1X128, .weight_scales = MOE_SCALES_FP32_128X128,
        .cc_major = 9,
        .refusals = {
            {10, INT_MAX, "fp8_block needs a Hopper GPU (compute capability 9.x); mxfp8 is "
                          "the Blackwell recipe"},
            {-1, -1, "fp8_block needs a Hopper GPU (compute capability 9.x), and this GPU's "
                     "is unknown"},
            {INT_MIN, INT_MAX, "fp8_block needs a Hopper GPU (compute capability 9.x)"},
        },
        .saves_e4m3_swiglu_in = 1, .peak_vs_bf16 = 2,
    },
    [MOE_PREC_MXFP8] = {
        .precision = MOE_PREC_MXFP8,
        .help = "E4M3 with E8M0 1x32 scales, data-centre Blackwell (10.x)",
        .job_choice = 1, .gemms = MOE_GEMMS_E4M3, .block = 32, .align = 32,
        .act_scales = MOE_SCALES_E8M0_1X32, .weight_scales = MOE_SCALES_E8M0_1X32,
        .cc_major = 10,
        .refusals = {
            {12, 12, "mxfp8 needs data-centre Blackwell (compute capability 10.x); consumer "
                     "Blackwell (12.x) lacks the sm_100 tensor-core path moekit's MXFP8 "
                     "kernels use"},
            {9, 9, "mxfp8 needs data-centre Blackwell (compute capability 10.x); fp8_block is "
                   "the Hopper recipe"},
            {-1, -1, "mxfp8 needs data-centre Blackwell (compute capability 10.x), and this "
                     "GPU's is unknown"},
            {INT_MIN, INT_MAX, "mxfp8 needs data-centre Blackwell (compute capability 10.x)"},
        },
        .fused_swiglu_quant = 1, .peak_vs_bf16 = 2,
    },
    [MOE_PREC_MXFP8_EMULATED] = {
        .precision = MOE_PREC_MXFP8_EMULATED,
        .help = "MXFP8 values through bf16 GEMMs, any GPU (accuracy studies)",
        .gemms = MOE_GEMMS_E4M3_EMULATED, .block = 32, .align = 1,
        .act_scales = MOE_SCALES_E8M0_1X32, .weight_scales = MOE_SCALES_E8M0_1X32,
        .cc_major = -1, .peak_vs_bf16 = 1,
    },
};

const moe_recipe *precision_recipe(moe_precision p)
{
    if ((int)p <= MOE_PREC_AUTO || p >= MOE_PREC_COUNT)
        return NULL;
    return &recipes[p];
}

char *precision_name_list(char *out, size_t n, const char *sep, const char *last, int job_only)
{
    const char *pick[MOE_PREC_COUNT];
    int k = 0;
    pick[k++] = precision_names[MOE_PREC_AUTO];
    for (int i = MOE_PREC_AUTO + 1; i < MOE_PREC_COUNT; i++)
        if (!job_only || recipes[i].job_choice)
            pick[k++] = precision_names[i];
    size_t used = 0;
    if (n)
        out[0] = 0;
    for (int i = 0; i < k && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%s",
                                 i == 0 ? "" : i == k - 1 ? last : sep, pick[i]);
    return out;
}

const char *precision_name(moe_precision p)
{
    if ((int)p < 0 || p >= MOE_PREC_COUNT)
        return "invalid";
    return precision_names[p];
}

int precision_parse(const char *s, moe_precision *out)
{
    for (int i = 0; s && i < MOE_PREC_COUNT; i++)
        if (strcmp(precision_names[i], s) == 0) {
            *out = (moe_precision)i;
            return 0;
        }
    return -1;
}

static int cannot(char *why, size_t n, const char *text)
{
    if (why && n)
        snprintf(why, n, "%s", text);
    return 0;
}

/* Which GPU code this build carries: the Makefile's MOE_CUDA_SASS (machine
 * code per architecture, "90a 100a") and MOE_CUDA_PTX (one PTX version the
 * driver compiles for newer GPUs, "90"), the same lists nvcc builds from
 * (common/rules.mk). */
#if !defined(MOE_CUDA_SASS) || !defined(MOE_CUDA_PTX)
#error "build through the Makefile: common/rules.mk defines MOE_CUDA_SASS and MOE_CUDA_PTX"
#endif
const char precision_build_sass[] = MOE_CUDA_SASS;
const char precision_build_ptx[] = MOE_CUDA_PTX;

/* "100a" -> 100, 'a'; "90" -> 90, 0. */
static int parse_arch(const char *s, int *num, char *suffix)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v <= 0)
        return -1;
    *num = (int)v;
    *suffix = (*end == 'a' || *end == 'f') ? *end : 0;
    return 0;
}

/* Whether the build has the tensor-core kernels (fp8_block's wgmma,
 * mxfp8's tcgen05) for compute capability cc_major.cc_minor. They live only
 * in arch-specific machine code: sm_XYa runs on exactly X.Y, sm_XYf on X.y
 * for y >= Y; no PTX the driver compiles has them. */
static int build_has_kernels(int cc_major, int cc_minor, char *why, size_t n)
{
    int cc = cc_major * 10 + cc_minor, num;
    char suffix, word[16], have[128] = "";
    size_t used = 0;
    for (const char *p = precision_build_sass; *p;) {
        size_t len = strcspn(p, " ");
        snprintf(word, sizeof word, "%.*s", (int)len, p);
        p += len + (p[len] == ' ');
        if (parse_arch(word, &num, &suffix) < 0)
            continue;
        if ((suffix == 'a' && num == cc) || (suffix == 'f' && num / 10 == cc_major && num <= cc))
            return 1;
        if (used < sizeof have)
            used += (size_t)snprintf(have + used, sizeof have - used, "%ssm_%s",
                                     used ? ", " : "", word);
    }
    if (why && n)
        snprintf(why, n, "this build of moekit carries its tensor-core kernels for %s only, none "
                         "of which runs on compute capability %d.%d (the build needs sm_%da)",
                 have[0] ? have : "no GPU", cc_major, cc_minor, cc);
    return 0;
}

int precision_gpu_can_run(moe_precision p, int cc_major, int cc_minor, char *why, size_t n)
{
    const moe_recipe *r = precision_recipe(p);
    if (!r)
        return cannot(why, n, p == MOE_PREC_AUTO ? "auto names no recipe: it picks one"
                                                 : "not a precision moekit knows");
    if (r->cc_major == 0)
        return cannot(why, n, r->refusals[0].why);
    if (cc_major >= 0 && cc_major < 8)
        return cannot(why, n, "moekit trains in BF16 at the least, which needs compute "
                              "capability 8.0 (Ampere) or newer");
    /* Recipes of any GPU (8.0+) are not checked against the build: its code
     * for Ampere/Ada is missing today (sm_90a, sm_100a, PTX 90), and
     * refusing those GPUs is the site's call (see NOTES.md). */
    if (r->cc_major < 0)
        return 1;
    if (cc_major == r->cc_major)
        return build_has_kernels(cc_major, cc_minor, why, n);
    for (const moe_recipe_refusal *f = r->refusals; f < r->refusals + 4 && f->why; f++)
        if (cc_major >= f->cc_lo && cc_major <= f->cc_hi)
            return cannot(why, n, f->why);
    return cannot(why, n, "not a precision moekit knows");
}

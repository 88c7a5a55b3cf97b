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
    if (p == MOE_PREC_AUTO)
        return cannot(why, n, "auto names no recipe: it picks one");
    if (p == MOE_PREC_FP32)
        return cannot(why, n, "fp32 runs on the cpu backend only");
    if (cc_major >= 0 && cc_major < 8)
        return cannot(why, n, "moekit trains in BF16 at the least, which needs compute "
                              "capability 8.0 (Ampere) or newer");
    switch (p) {
    case MOE_PREC_BF16:
    case MOE_PREC_MXFP8_EMULATED:
        /* Not checked against the build: its code for Ampere/Ada is missing
         * today (sm_90a, sm_100a, PTX 90), and refusing those GPUs is the
         * site's call (see NOTES.md). */
        return 1;
    case MOE_PREC_FP8_BLOCK:
        if (cc_major == 9)
            return build_has_kernels(cc_major, cc_minor, why, n);
        return cannot(why, n, cc_major >= 10 ? "fp8_block needs a Hopper GPU (compute "
                                               "capability 9.x); mxfp8 is the Blackwell recipe"
                              : cc_major < 0 ? "fp8_block needs a Hopper GPU (compute "
                                               "capability 9.x), and this GPU's is unknown"
                                             : "fp8_block needs a Hopper GPU (compute "
                                               "capability 9.x)");
    case MOE_PREC_MXFP8:
        if (cc_major == 10)
            return build_has_kernels(cc_major, cc_minor, why, n);
        return cannot(why, n, cc_major == 12 ? "mxfp8 needs data-centre Blackwell (compute "
                                               "capability 10.x); consumer Blackwell (12.x) "
                                               "lacks the sm_100 tensor-core path moekit's "
                                               "MXFP8 kernels use"
                              : cc_major == 9 ? "mxfp8 needs data-centre Blackwell (compute "
                                                "capability 10.x); fp8_block is the Hopper "
                                                "recipe"
                              : cc_major < 0 ? "mxfp8 needs data-centre Blackwell (compute "
                                               "capability 10.x), and this GPU's is unknown"
                                             : "mxfp8 needs data-centre Blackwell (compute "
                                               "capability 10.x)");
    default:
        return cannot(why, n, "not a precision moekit knows");
    }
}

/* moekit: the precision vocabulary and the GPU rule (see precision.h).
 *   bf16, mxfp8_emulated  compute capability 8.0 or newer (BF16 tensor cores);
 *                         a GPU whose capability is unknown is given bf16
 *   fp8_block             Hopper (9.x): moekit's block-scaled E4M3 GEMMs
 *   mxfp8                 data-centre Blackwell (10.x: B200, GB200, B300).
 *                         Consumer and workstation Blackwell (12.x) lacks the
 *                         sm_100 tensor-core path the MXFP8 kernels use. */
#include "precision.h"

#include <stdio.h>
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

int precision_gpu_can_run(moe_precision p, int cc_major, int cc_minor, char *why, size_t n)
{
    (void)cc_minor; /* every rule is by architecture (major) today */
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
        return 1;
    case MOE_PREC_FP8_BLOCK:
        if (cc_major == 9)
            return 1;
        return cannot(why, n, cc_major >= 10 ? "fp8_block needs a Hopper GPU (compute "
                                               "capability 9.x); mxfp8 is the Blackwell recipe"
                              : cc_major < 0 ? "fp8_block needs a Hopper GPU (compute "
                                               "capability 9.x), and this GPU's is unknown"
                                             : "fp8_block needs a Hopper GPU (compute "
                                               "capability 9.x)");
    case MOE_PREC_MXFP8:
        if (cc_major == 10)
            return 1;
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

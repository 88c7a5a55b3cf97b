/* moekit CUDA backend: choosing the expert FFN's precision, and proving on
 * this GPU that the chosen path works before the first step.
 * Which GPU runs which recipe is precision_gpu_can_run's rule (common/);
 * here, what this device must also prove:
 *   bf16, mxfp8_emulated  nothing (cuda_moe_mxemu.cu: bf16 GEMMs)
 *   fp8_block             a tiny block-scaled GEMM must run
 *   mxfp8                 a self-test runs the MXFP8 expert FFN forward and
 *                         backward on random data beside the emulated one (the
 *                         same MXFP8 values through bf16 GEMMs with fp32
 *                         accumulation) and refuses when they disagree, so a
 *                         scale layout the library reads differently than
 *                         documented stops the run with a reason instead of
 *                         training wrong.
 * runtime.fp8_gemms (set_run_opts) picks which of fprop, dgrad, wgrad go FP8
 * in the last two. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lowp/fp8_gemm.h"
#include "../route_plan.h"

#include "cuda_internal.h"
#include "cuda_fp8_weight_cache.h"

/* fp8_block: a 128 x 16 x 128 GEMM on zero codes and scales must run */
static int fp8_block_probe(cuda_ctx *c, moe_err *e)
{
    void *buf = NULL;
    cudaError_t err = cudaMalloc(&buf, 65536);
    if (err != cudaSuccess)
        return moe_errf(e, "cuda: fp8_block probe: cudaMalloc: %s", cudaGetErrorString(err));
    int rc = 0;
    uint8_t *p = (uint8_t *)buf;
    lowp_fp8_operand a = {p, p + 16384, LOWP_BLK_128X128};
    lowp_fp8_operand b = {p + 20480, p + 24576, LOWP_BLK_1X128};
    if ((err = cudaMemset(buf, 0, 65536)) != cudaSuccess)
        rc = moe_errf(e, "cuda: fp8_block probe: cudaMemset: %s", cudaGetErrorString(err));
    else if ((err = cudaDeviceSynchronize()) != cudaSuccess) /* the memset ran on another stream */
        rc = moe_errf(e, "cuda: fp8_block probe: %s", cudaGetErrorString(err));
    else if (lowp_fp8_gemm_run(c->fp8_gemm, c->stream, 128, 16, 128, &a, &b, p + 32768,
                               LOWP_OUT_BF16, 1.f, 0.f, e))
        rc = moe_err_prefix(e, "precision.compute=fp8_block on %s", c->device_name);
    else if ((err = cudaDeviceSynchronize()) != cudaSuccess)
        rc = moe_errf(e, "cuda: fp8_block probe GEMM: %s", cudaGetErrorString(err));
    cudaFree(buf);
    return rc;
}

/* ---- the MXFP8 self-test ---- */

enum { ST_E = 2, ST_ROWS = 64, ST_C = 64, ST_I = 128, ST_N = ST_E * ST_ROWS };

/* one run's buffers: inputs shared, outputs per path */
typedef struct {
    bf16 *h1, *h3, *a, *y, *dx;
    float *dp, *dw1, *dw3, *dw2;
} st_out;

static float *st_alloc(size_t n, int *bad)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess)
        *bad = 1;
    else if (cudaMemset(p, 0, n) != cudaSuccess)
        *bad = 1;
    return (float *)p;
}

/* relative L2 difference of two device arrays (bf16 or fp32) */
static double st_rel(const void *a, const void *b, size_t n, int fp32, int *bad)
{
    size_t es = fp32 ? 4 : 2;
    unsigned char *ha = (unsigned char *)malloc(n * es), *hb = (unsigned char *)malloc(n * es);
    double num = 0, den = 0;
    if (!ha || !hb || cudaMemcpy(ha, a, n * es, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(hb, b, n * es, cudaMemcpyDeviceToHost) != cudaSuccess) {
        *bad = 1;
    } else {
        for (size_t i = 0; i < n; i++) {
            double x, y;
            if (fp32) {
                x = ((float *)ha)[i], y = ((float *)hb)[i];
            } else {
                x = __bfloat162float(((bf16 *)ha)[i]), y = __bfloat162float(((bf16 *)hb)[i]);
            }
            num += (x - y) * (x - y);
            den += y * y;
        }
    }
    free(ha);
    free(hb);
    return isfinite(num) ? sqrt(num / (den > 0 ? den : 1)) : INFINITY;
}

static int mxfp8_self_test(moe_backend *be, moe_err *e)
{
    cuda_ctx *c = CTX(be);
    int bad = 0;
    const size_t nx = (size_t)ST_N * ST_C, nh = (size_t)ST_N * ST_I, nw = (size_t)ST_E * ST_I * ST_C;
    /* inputs: a fixed pseudo-random draw (the layouts are what is tested) */
    size_t n_in = 2 * nx + 3 * nw;
    bf16 *h = (bf16 *)malloc(n_in * sizeof(bf16));
    float hp[ST_N];
    if (!h)
        return moe_errf(e, "out of host memory");
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n_in; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)((s >> 40) & 0xFFFF) / 32768.f - 1.f;
        h[i] = __float2bfloat16(u * (i < 2 * nx ? 1.f : 0.2f) * (float)(1 << (int)(s >> 62)));
    }
    for (int i = 0; i < ST_N; i++)
        hp[i] = 0.25f + 0.5f * (float)(i % 7) / 7.f;
    bf16 *in = (bf16 *)st_alloc(n_in * sizeof(bf16), &bad);
    float *p_perm = st_alloc(sizeof hp, &bad);
    if (!bad && (cudaMemcpy(in, h, n_in * sizeof(bf16), cudaMemcpyHostToDevice) != cudaSuccess ||
                 cudaMemcpy(p_perm, hp, sizeof hp, cudaMemcpyHostToDevice) != cudaSuccess))
        bad = 1;
    free(h);
    bf16 *x = in, *dy = in + nx, *w1 = in + 2 * nx, *w3 = w1 + nw, *w2 = w3 + nw;
    st_out o[2];
    for (int k = 0; k < 2; k++) {
        o[k].h1 = (bf16 *)st_alloc(nh * 2, &bad), o[k].h3 = (bf16 *)st_alloc(nh * 2, &bad);
        o[k].a = (bf16 *)st_alloc(nh * 2, &bad), o[k].y = (bf16 *)st_alloc(nx * 2, &bad);
        o[k].dx = (bf16 *)st_alloc(nx * 2, &bad), o[k].dp = st_alloc(ST_N * 4, &bad);
        o[k].dw1 = st_alloc(nw * 4, &bad), o[k].dw3 = st_alloc(nw * 4, &bad);
        o[k].dw2 = st_alloc(nw * 4, &bad);
    }
    int64_t count[ST_E] = {ST_ROWS, ST_ROWS}, offset[ST_E + 1] = {0, ST_ROWS, ST_N};
    moe_route_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.expert_count = count, plan.expert_offset = offset;
    plan.n_experts = ST_E, plan.n_rows = ST_N, plan.n_tokens = ST_N / 2, plan.top_k = 2;
    double worst = 0;
    const char *worst_name = "";
    if (!bad && cudaDeviceSynchronize() != cudaSuccess) /* the set-up's copies: another stream */
        bad = 1;
    if (!bad) {
        for (int k = 0; k < 2; k++) {
            c->expert_recipe = precision_recipe(k ? MOE_PREC_MXFP8_EMULATED : MOE_PREC_MXFP8);
            be->experts_fwd(be, o[k].y, o[k].h1, o[k].h3, o[k].a, x, p_perm, w1, w3, w2, &plan,
                            ST_C, ST_I);
            be->experts_bwd(be, o[k].dx, o[k].dp, o[k].dw1, o[k].dw3, o[k].dw2, dy, x, o[k].h1,
                            o[k].h3, p_perm, w1, w3, w2, &plan, ST_C, ST_I, 1);
        }
        c->expert_recipe = precision_recipe(MOE_PREC_BF16);
        if (cuda_check(be, e) || cudaDeviceSynchronize() != cudaSuccess) {
            bad = 2;
        } else {
            struct { const char *name; const void *a, *b; size_t n; int fp32; } cmp[] = {
                {"h1", o[0].h1, o[1].h1, nh, 0},   {"y", o[0].y, o[1].y, nx, 0},
                {"dx", o[0].dx, o[1].dx, nx, 0},   {"dp", o[0].dp, o[1].dp, ST_N, 1},
                {"dw1", o[0].dw1, o[1].dw1, nw, 1}, {"dw3", o[0].dw3, o[1].dw3, nw, 1},
                {"dw2", o[0].dw2, o[1].dw2, nw, 1}};
            for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
                double r = st_rel(cmp[i].a, cmp[i].b, cmp[i].n, cmp[i].fp32, &bad);
                if (!(r <= worst)) {
                    worst = r;
                    worst_name = cmp[i].name;
                }
            }
        }
    }
    cudaFree(in);
    cudaFree(p_perm);
    for (int k = 0; k < 2; k++) {
        void *ps[] = {o[k].h1, o[k].h3, o[k].a, o[k].y, o[k].dx, o[k].dp, o[k].dw1, o[k].dw3, o[k].dw2};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            cudaFree(ps[i]);
    }
    if (bad == 2)
        return moe_err_prefix(e, "precision.compute=mxfp8 self-test on %s", c->device_name);
    if (bad)
        return moe_errf(e, "precision.compute=mxfp8 self-test on %s: cannot allocate or copy "
                           "its buffers",
                        c->device_name);
    /* the same MXFP8 values on both sides; only rounding and summation order
     * differ (bf16 outputs round once, ~2^-9) */
    if (!(worst <= 1e-2))
        return moe_errf(e,
                        "precision.compute=mxfp8 self-test on %s: the MXFP8 expert GEMMs differ "
                        "from the emulated ones by %.3g (relative, in %s; 1e-2 allowed): this "
                        "cuBLASLt reads the MXFP8 scales differently; use bf16",
                        c->device_name, worst, worst_name);
    return 0;
}

extern "C" int cuda_set_expert_precision(moe_backend *be, moe_precision p, int C, int I,
                                         moe_err *e)
{
    cuda_ctx *c = CTX(be);
    const char *precision = precision_name(p);
    char why[256];
    if (!precision_gpu_can_run(p, c->cc_major, c->cc_minor, why, sizeof why))
        return moe_errf(e, "precision.compute=%s on %s: %s; use bf16", precision,
                        c->device_name, why);
    cuda_wcache_forget(be, NULL, SIZE_MAX); /* copies of another recipe: made again */
    const moe_recipe *r = precision_recipe(p);
    if (r->gemms != MOE_GEMMS_E4M3) {
        c->expert_recipe = r; /* plain kernels and bf16 GEMMs */
        return 0;
    }
    const int align = r->align;
    if (C % align || I % align)
        return moe_errf(e,
                        "precision.compute=%s needs model.hidden_size and "
                        "model.intermediate_size to be multiples of %d (they are %d and %d)",
                        precision, align, C, I);
    if (!c->fp8_gemm && lowp_fp8_gemm_create(&c->fp8_gemm, CUDA_FP8_GEMM_WORKSPACE_BYTES, e))
        return -1;
    /* the E8M0 scales' swizzled layout is cuBLASLt's to read: checked
     * against the emulation; the fp32 block scales by a probe GEMM */
    if (r->act_scales == MOE_SCALES_E8M0_1X32) {
        int keep = c->fp8_gemms;
        c->fp8_gemms = MOE_FP8_FPROP | MOE_FP8_DGRAD | MOE_FP8_WGRAD; /* the self-test checks all three */
        int rc = mxfp8_self_test(be, e);
        c->fp8_gemms = keep;
        if (rc)
            return -1;
    } else if (fp8_block_probe(c, e)) {
        return -1;
    }
    c->expert_recipe = r;
    return 0;
}

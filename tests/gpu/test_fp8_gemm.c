/* The FP8 block-scaled GEMMs (trainer/lowp/fp8_gemm.c, cuBLASLt) against a
 * float64 GEMM of the dequantised operands, then their speed beside bf16.
 *
 * Correctness: operands drawn fresh (normal values, the magnitude varied by
 * 2^-6..2^6 per row and per 128-column block, so a scale read from the wrong
 * place is off by up to 2^12), quantised by the C reference (fp8.h) and
 * uploaded; the output is poisoned with NaN bytes first (or, when
 * accumulating, filled with random values that the reference adds). Shapes
 * cover the three GEMMs of a linear layer (fprop and dgrad: 128x128 weights
 * with 1x128 activations; wgrad: 1x128 with 1x128), bf16 and fp32 outputs,
 * outer sizes that are not multiples of 128, and k that is not. Then a
 * linear layer end to end with the GPU quantisers feeding the GEMMs, against
 * float64 on the unquantised bf16 values (this error is FP8's own).
 * Tolerances (relative Frobenius norm): bf16 out 4e-3 (one bf16 rounding is
 * 2^-9), fp32 out 1e-3; every element must be finite.
 *
 * Timing: the expert FFN's GEMM shapes of bench_8x7B_2L (hidden 4096, ffn
 * 14336, 2048 rows per expert) in FP8 block scaling and in bf16 through
 * cublasGemmEx, side by side, median of 9 after warm-up, plus 8192^3.
 * Last line: "fp8_gemm: N passed, N failed". Run on a GPU machine:
 *   build/tests/gpu/test_fp8_gemm [--no-bench] */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../../trainer/lowp/fp8.h"
#include "../../trainer/lowp/fp8_gemm.h"
#include "../../trainer/lowp/lowp_cuda.h"
#include "../test_rng.h"
#define GPU_CHECK_NAME "fp8_gemm"
#include "gpu_check.h"


static void *dmalloc(size_t n)
{
    void *p = NULL;
    CK(__func__, cudaMalloc(&p, n ? n : 16));
    return p;
}

static void *upload(const void *h, size_t n)
{
    void *d = dmalloc(n);
    CK(__func__, cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

/* bf16 [rows, cols]: normal values times 2^(-6..6) per row and per
 * 128-column block */
static uint16_t *random_bf16(size_t rows, size_t cols)
{
    uint16_t *x = xmalloc(rows * cols * 2);
    int *col_e = xmalloc(sizeof(int) * (cols / 128 + 1));
    for (size_t b = 0; b <= cols / 128; b++)
        col_e[b] = (int)(test_rng_u64() % 13) - 6;
    for (size_t r = 0; r < rows; r++) {
        int row_e = (int)(test_rng_u64() % 13) - 6;
        for (size_t c = 0; c < cols; c++)
            x[r * cols + c] =
                lowp_f32_to_bf16((float)ldexp(test_rng_normal(), row_e + col_e[c / 128]));
    }
    free(col_e);
    return x;
}

/* An operand [outer, k] quantised on the host, its dequantised values and
 * device copies of codes and scales. */
typedef struct {
    size_t outer, k;
    lowp_blk_kind kind;
    float *deq;
    uint8_t *d_codes;
    float *d_scales;
} operand;

static operand make_operand(const uint16_t *x, size_t outer, size_t k, lowp_blk_kind kind)
{
    operand o = {outer, k, kind, NULL, NULL, NULL};
    size_t ns = kind == LOWP_BLK_1X128 ? lowp_fp8blk_1x128_scales(outer, k)
                                       : lowp_fp8blk_128x128_scales(outer, k);
    uint8_t *codes = xmalloc(outer * k);
    float *scales = xmalloc(ns * sizeof(float));
    o.deq = xmalloc(outer * k * sizeof(float));
    if (kind == LOWP_BLK_1X128) {
        lowp_fp8blk_1x128(x, LOWP_BF16, outer, k, codes, scales);
        lowp_fp8blk_dequant_1x128(codes, scales, outer, k, o.deq);
    } else {
        lowp_fp8blk_128x128(x, LOWP_BF16, outer, k, codes, scales);
        lowp_fp8blk_dequant_128x128(codes, scales, outer, k, o.deq);
    }
    o.d_codes = upload(codes, outer * k);
    o.d_scales = upload(scales, ns * sizeof(float));
    free(codes);
    free(scales);
    return o;
}

static void free_operand(operand *o)
{
    free(o->deq);
    cudaFree(o->d_codes);
    cudaFree(o->d_scales);
}

static lowp_fp8_operand as_gemm(const operand *o)
{
    lowp_fp8_operand g = {o->d_codes, o->d_scales, o->kind};
    return g;
}

/* ref[n, m] = sum_k b[n, k] a[m, k] (+ c) in float64 */
static double *ref_gemm(const float *a, const float *b, const float *c, size_t m, size_t n, size_t k)
{
    double *r = xmalloc(m * n * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++) {
            double s = c ? c[i * m + j] : 0.0;
            for (size_t t = 0; t < k; t++)
                s += (double)b[i * k + t] * a[j * k + t];
            r[i * m + j] = s;
        }
    return r;
}

/* relative Frobenius error of the device output; -1 if any element is not
 * finite (unwritten poison included) */
static double rel_err(const void *d_out, lowp_out_type t, const double *ref, size_t count)
{
    size_t bytes = count * (t == LOWP_OUT_F32 ? 4 : 2);
    void *h = xmalloc(bytes);
    CK(__func__, cudaMemcpy(h, d_out, bytes, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        double v = t == LOWP_OUT_F32 ? ((float *)h)[i] : lowp_bf16_to_f32(((uint16_t *)h)[i]);
        if (!isfinite(v))
            bad = 1;
        num += (v - ref[i]) * (v - ref[i]);
        den += ref[i] * ref[i];
    }
    free(h);
    return bad ? -1.0 : sqrt(num / (den > 0 ? den : 1));
}

static void poison(void *d, size_t bytes) { CK(__func__, cudaMemset(d, 0xFF, bytes)); }

/* One GEMM with both operands quantised on the host. */
static void case_gemm(lowp_fp8_gemm *g, int m, int n, int k, lowp_blk_kind ak, lowp_blk_kind bk,
                      lowp_out_type ot, int accumulate, int may_refuse)
{
    uint16_t *ha = random_bf16(m, k), *hb = random_bf16(n, k);
    operand a = make_operand(ha, m, k, ak), b = make_operand(hb, n, k, bk);
    size_t es = ot == LOWP_OUT_F32 ? 4 : 2, count = (size_t)m * n;
    float *c = NULL;
    void *d_out = dmalloc(count * es);
    if (accumulate) {
        c = xmalloc(count * sizeof(float));
        void *hc = xmalloc(count * es);
        for (size_t i = 0; i < count; i++) {
            float v = (float)(test_rng_normal() * sqrt((double)k));
            if (ot == LOWP_OUT_BF16) {
                ((uint16_t *)hc)[i] = lowp_f32_to_bf16(v);
                v = lowp_bf16_to_f32(((uint16_t *)hc)[i]);
            } else {
                ((float *)hc)[i] = v;
            }
            c[i] = v;
        }
        CK(__func__, cudaMemcpy(d_out, hc, count * es, cudaMemcpyHostToDevice));
        free(hc);
    } else {
        poison(d_out, count * es);
    }
    lowp_fp8_operand ga = as_gemm(&a), gb = as_gemm(&b);
    moe_err e = {{0}};
    int rc = lowp_fp8_gemm_run(g, 0, m, n, k, &ga, &gb, d_out, ot, 1.f, accumulate ? 1.f : 0.f, &e);
    if (!rc)
        CK(__func__, cudaDeviceSynchronize());
    const char *an = ak == LOWP_BLK_128X128 ? "128x128" : "1x128";
    const char *bn = bk == LOWP_BLK_128X128 ? "128x128" : "1x128";
    if (rc) {
        /* may_refuse: a shape cuBLASLt may not have kernels for; refusing it
         * by name is correct, running it must give the right numbers */
        char named[64];
        snprintf(named, sizeof named, "m=%d n=%d k=%d", m, n, k);
        result(may_refuse && strstr(e.msg, named), "gemm m=%d n=%d k=%d A %s B %s %s%s: %s%s", m,
               n, k, an, bn, ot == LOWP_OUT_F32 ? "fp32" : "bf16", accumulate ? " +=" : "",
               may_refuse ? "refused by name: " : "", e.msg);
    } else {
        double *ref = ref_gemm(a.deq, b.deq, c, m, n, k);
        double err = rel_err(d_out, ot, ref, count), tol = ot == LOWP_OUT_F32 ? 1e-3 : 4e-3;
        result(err >= 0 && err <= tol, "gemm m=%d n=%d k=%d A %s B %s %s%s: rel %.2e (tol %.0e)%s",
               m, n, k, an, bn, ot == LOWP_OUT_F32 ? "fp32" : "bf16", accumulate ? " +=" : "", err,
               tol, err < 0 ? " NON-FINITE" : "");
        free(ref);
    }
    cudaFree(d_out);
    free_operand(&a);
    free_operand(&b);
    free(ha);
    free(hb);
    free(c);
}

static float *widen(const uint16_t *x, size_t n)
{
    float *f = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        f[i] = lowp_bf16_to_f32(x[i]);
    return f;
}

static uint16_t *transpose16(const uint16_t *x, size_t rows, size_t cols)
{
    uint16_t *t = xmalloc(rows * cols * 2);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            t[c * rows + r] = x[r * cols + c];
    return t;
}

/* MXFP8 (E8M0 per 32 along k, cuBLASLt's swizzled tiles): on compute
 * capability 10.x it must match float64 on the dequantised operands; below,
 * cuBLASLt has no such kernels and the call must be refused by name. */
static void case_mx_gemm(lowp_fp8_gemm *g, int cc_major, int m, int n, int k)
{
    uint16_t *ha = random_bf16(m, k), *hb = random_bf16(n, k);
    size_t kb = lowp_ceil_div(k, LOWP_MX_BLOCK);
    uint8_t *qa = xmalloc((size_t)m * k), *qb = xmalloc((size_t)n * k);
    uint8_t *sa = xmalloc((size_t)m * kb), *sb = xmalloc((size_t)n * kb);
    uint8_t *za = xmalloc(lowp_mx_swizzled_bytes(m, kb)), *zb = xmalloc(lowp_mx_swizzled_bytes(n, kb));
    float *da = xmalloc(4 * (size_t)m * k), *db = xmalloc(4 * (size_t)n * k);
    lowp_mxfp8_rowwise(ha, LOWP_BF16, m, k, qa, sa);
    lowp_mxfp8_rowwise(hb, LOWP_BF16, n, k, qb, sb);
    lowp_mx_swizzle_rowwise(sa, m, k, za);
    lowp_mx_swizzle_rowwise(sb, n, k, zb);
    lowp_mxfp8_dequant_rowwise(qa, sa, m, k, da);
    lowp_mxfp8_dequant_rowwise(qb, sb, n, k, db);
    uint8_t *d_qa = upload(qa, (size_t)m * k), *d_qb = upload(qb, (size_t)n * k);
    uint8_t *d_za = upload(za, lowp_mx_swizzled_bytes(m, kb));
    uint8_t *d_zb = upload(zb, lowp_mx_swizzled_bytes(n, kb));
    uint16_t *d_out = dmalloc((size_t)m * n * 2);
    poison(d_out, (size_t)m * n * 2);
    lowp_fp8_operand a = {d_qa, d_za, LOWP_MX_1X32}, b = {d_qb, d_zb, LOWP_MX_1X32};
    moe_err e = {{0}};
    int rc = lowp_fp8_gemm_run(g, 0, m, n, k, &a, &b, d_out, LOWP_OUT_BF16, 1.f, 0.f, &e);
    char named[64];
    snprintf(named, sizeof named, "m=%d n=%d k=%d", m, n, k);
    if (cc_major != 10) {
        result(rc != 0 && strstr(e.msg, named), "mxfp8 gemm %s refused below compute capability "
               "10.x: %s", named, rc ? e.msg : "it ran");
    } else if (rc) {
        result(0, "mxfp8 gemm %s: %s", named, e.msg);
    } else {
        CK(__func__, cudaDeviceSynchronize());
        double *ref = ref_gemm(da, db, NULL, m, n, k);
        double err = rel_err(d_out, LOWP_OUT_BF16, ref, (size_t)m * n);
        result(err >= 0 && err <= 4e-3, "mxfp8 gemm %s: rel %.2e (tol 4e-03)", named, err);
        free(ref);
    }
    void *dev[] = {d_qa, d_qb, d_za, d_zb, d_out};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
    free(ha), free(hb), free(qa), free(qb), free(sa), free(sb), free(za), free(zb), free(da),
        free(db);
}

/* k off the 16-byte grid is refused before cuBLASLt, by name. */
static void case_refused(lowp_fp8_gemm *g)
{
    uint8_t *buf = dmalloc(1 << 20);
    CK(__func__, cudaMemset(buf, 0, 1 << 20));
    lowp_fp8_operand a = {buf, (const float *)(buf + 262144), LOWP_BLK_128X128};
    lowp_fp8_operand b = {buf + 327680, (const float *)(buf + 589824), LOWP_BLK_1X128};
    moe_err e = {{0}};
    int rc = lowp_fp8_gemm_run(g, 0, 256, 128, 200, &a, &b, buf + 655360, LOWP_OUT_BF16, 1.f, 0.f, &e);
    result(rc != 0 && strstr(e.msg, "k=200"), "k off the 16-element grid is refused: %s", e.msg);
    cudaFree(buf);
}

/* A linear layer y = x w^T, x [T, K], w [N, K], dy [T, N]: the GPU
 * quantisers produce every operand (x and dy with their transposed 1x128
 * copies, w and w^T in 128x128), the GEMMs consume them directly. Against
 * float64 on the bf16 values: what FP8 block scaling costs in accuracy. */
static void case_linear(lowp_fp8_gemm *g, int T, int K, int N)
{
    uint16_t *hx = random_bf16(T, K), *hw = random_bf16(N, K), *hdy = random_bf16(T, N);
    uint16_t *hwt = transpose16(hw, N, K);
    uint16_t *dx16 = upload(hx, (size_t)T * K * 2), *dw16 = upload(hw, (size_t)N * K * 2);
    uint16_t *ddy16 = upload(hdy, (size_t)T * N * 2), *dwt16 = upload(hwt, (size_t)N * K * 2);
    uint8_t *xq = dmalloc((size_t)T * K), *xtq = dmalloc((size_t)T * K);
    uint8_t *dyq = dmalloc((size_t)T * N), *dytq = dmalloc((size_t)T * N);
    uint8_t *wq = dmalloc((size_t)N * K), *wtq = dmalloc((size_t)N * K);
    float *xs = dmalloc(4 * lowp_fp8blk_1x128_scales(T, K));
    float *xts = dmalloc(4 * lowp_fp8blk_1x128_scales(K, T));
    float *dys = dmalloc(4 * lowp_fp8blk_1x128_scales(T, N));
    float *dyts = dmalloc(4 * lowp_fp8blk_1x128_scales(N, T));
    float *ws = dmalloc(4 * lowp_fp8blk_128x128_scales(N, K));
    float *wts = dmalloc(4 * lowp_fp8blk_128x128_scales(K, N));
    moe_err e = {{0}};
    int rc = lowp_cuda_fp8blk_1x128(dx16, T, K, xq, xs, xtq, xts, 0, &e) ||
             lowp_cuda_fp8blk_1x128(ddy16, T, N, dyq, dys, dytq, dyts, 0, &e) ||
             lowp_cuda_fp8blk_128x128(dw16, N, K, wq, ws, NULL, NULL, 0, &e) ||
             lowp_cuda_fp8blk_128x128(dwt16, K, N, wtq, wts, NULL, NULL, 0, &e);
    uint16_t *y = dmalloc((size_t)T * N * 2), *dx = dmalloc((size_t)T * K * 2);
    float *dw = dmalloc((size_t)N * K * 4);
    poison(y, (size_t)T * N * 2);
    poison(dx, (size_t)T * K * 2);
    poison(dw, (size_t)N * K * 4);
    lowp_fp8_operand ow = {wq, ws, LOWP_BLK_128X128}, owt = {wtq, wts, LOWP_BLK_128X128};
    lowp_fp8_operand ox = {xq, xs, LOWP_BLK_1X128}, oxt = {xtq, xts, LOWP_BLK_1X128};
    lowp_fp8_operand ody = {dyq, dys, LOWP_BLK_1X128}, odyt = {dytq, dyts, LOWP_BLK_1X128};
    rc = rc || lowp_fp8_gemm_run(g, 0, N, T, K, &ow, &ox, y, LOWP_OUT_BF16, 1.f, 0.f, &e) ||
         lowp_fp8_gemm_run(g, 0, K, T, N, &owt, &ody, dx, LOWP_OUT_BF16, 1.f, 0.f, &e) ||
         lowp_fp8_gemm_run(g, 0, K, N, T, &oxt, &odyt, dw, LOWP_OUT_F32, 1.f, 0.f, &e);
    if (rc) {
        result(0, "linear T=%d K=%d N=%d: %s", T, K, N, e.msg);
    } else {
        CK(__func__, cudaDeviceSynchronize());
        float *fx = widen(hx, (size_t)T * K), *fw = widen(hw, (size_t)N * K);
        float *fdy = widen(hdy, (size_t)T * N), *fwt = widen(hwt, (size_t)N * K);
        float *fxt = xmalloc((size_t)T * K * 4), *fdyt = xmalloc((size_t)T * N * 4);
        for (int t = 0; t < T; t++) {
            for (int c = 0; c < K; c++)
                fxt[(size_t)c * T + t] = fx[(size_t)t * K + c];
            for (int c = 0; c < N; c++)
                fdyt[(size_t)c * T + t] = fdy[(size_t)t * N + c];
        }
        double *ry = ref_gemm(fw, fx, NULL, N, T, K), *rdx = ref_gemm(fwt, fdy, NULL, K, T, N);
        double *rdw = ref_gemm(fxt, fdyt, NULL, K, N, T);
        double ey = rel_err(y, LOWP_OUT_BF16, ry, (size_t)T * N);
        double edx = rel_err(dx, LOWP_OUT_BF16, rdx, (size_t)T * K);
        double edw = rel_err(dw, LOWP_OUT_F32, rdw, (size_t)N * K);
        /* E4M3 keeps 3 mantissa bits: ~2-3% per element, about that in a
         * product of two quantised operands */
        const double tol = 0.08;
        result(ey >= 0 && ey <= tol && edx >= 0 && edx <= tol && edw >= 0 && edw <= tol,
               "linear T=%d K=%d N=%d, GPU-quantised, vs unquantised float64: fprop %.3e, "
               "dgrad %.3e, wgrad %.3e (tol %.2f)",
               T, K, N, ey, edx, edw, tol);
        free(fx), free(fw), free(fdy), free(fwt), free(fxt), free(fdyt);
        free(ry), free(rdx), free(rdw);
    }
    void *bufs[] = {dx16, dw16, ddy16, dwt16, xq, xtq, dyq, dytq, wq, wtq,
                    xs, xts, dys, dyts, ws, wts, y, dx, dw};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        cudaFree(bufs[i]);
    free(hx), free(hw), free(hdy), free(hwt);
}

/* ---- timing -------------------------------------------------------------------- */

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct {
    lowp_fp8_gemm *g;
    cublasHandle_t blas;
    int m, n, k, fp32_acc;
    lowp_fp8_operand a, b;
    void *a16, *b16, *out;
    int fp8;
} bench_case;

static int bench_once(bench_case *c, moe_err *e)
{
    float beta = c->fp32_acc ? 1.f : 0.f;
    if (c->fp8)
        return lowp_fp8_gemm_run(c->g, 0, c->m, c->n, c->k, &c->a, &c->b, c->out,
                                 c->fp32_acc ? LOWP_OUT_F32 : LOWP_OUT_BF16, 1.f, beta, e);
    float alpha = 1.f;
    cudaDataType_t ct = c->fp32_acc ? CUDA_R_32F : CUDA_R_16BF;
    cublasStatus_t st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, c->m, c->n, c->k, &alpha,
                                     c->a16, CUDA_R_16BF, c->k, c->b16, CUDA_R_16BF, c->k, &beta,
                                     c->out, ct, c->m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : moe_errf(e, "cublasGemmEx: status %d", (int)st);
}

/* median milliseconds of 9 runs after 3 warm-ups; <0 on failure */
static float bench_ms(bench_case *c, moe_err *e)
{
    cudaEvent_t t0, t1;
    CK(__func__, cudaEventCreate(&t0));
    CK(__func__, cudaEventCreate(&t1));
    float ms[9];
    for (int i = 0; i < 3; i++)
        if (bench_once(c, e))
            return -1;
    for (int i = 0; i < 9; i++) {
        CK(__func__, cudaEventRecord(t0, 0));
        if (bench_once(c, e))
            return -1;
        CK(__func__, cudaEventRecord(t1, 0));
        CK(__func__, cudaEventSynchronize(t1));
        CK(__func__, cudaEventElapsedTime(&ms[i], t0, t1));
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    qsort(ms, 9, sizeof(float), cmp_f);
    return ms[4];
}

static void bench_shape(lowp_fp8_gemm *g, cublasHandle_t blas, const char *name, int m, int n,
                        int k, lowp_blk_kind ak, int fp32_acc)
{
    uint16_t *ha = random_bf16(m, k), *hb = random_bf16(n, k);
    operand a = make_operand(ha, m, k, ak), b = make_operand(hb, n, k, LOWP_BLK_1X128);
    bench_case c = {g, blas, m, n, k, fp32_acc, as_gemm(&a), as_gemm(&b), NULL, NULL, NULL, 1};
    c.a16 = upload(ha, (size_t)m * k * 2);
    c.b16 = upload(hb, (size_t)n * k * 2);
    c.out = dmalloc((size_t)m * n * 4);
    CK(__func__, cudaMemset(c.out, 0, (size_t)m * n * 4));
    moe_err e = {{0}};
    /* first, one run checked on 4096 sampled outputs: large shapes may get
     * other algorithms (split K, other tiles) than the small cases above */
    if (bench_once(&c, &e)) {
        result(0, "bench %s: %s", name, e.msg);
    } else {
        size_t es = fp32_acc ? 4 : 2, count = (size_t)m * n;
        void *h = xmalloc(count * es);
        CK(__func__, cudaMemcpy(h, c.out, count * es, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        int finite = 1;
        for (int s = 0; s < 4096; s++) {
            size_t i = test_rng_u64() % (size_t)n, j = test_rng_u64() % (size_t)m, t;
            double ref = 0;
            for (t = 0; t < (size_t)k; t++)
                ref += (double)b.deq[i * k + t] * a.deq[j * k + t];
            double v = fp32_acc ? ((float *)h)[i * m + j]
                                : lowp_bf16_to_f32(((uint16_t *)h)[i * m + j]);
            finite &= isfinite(v) != 0;
            num += (v - ref) * (v - ref);
            den += ref * ref;
        }
        double err = sqrt(num / (den > 0 ? den : 1)), tol = fp32_acc ? 1e-3 : 4e-3;
        result(finite && err <= tol, "gemm %s m=%d n=%d k=%d (4096 sampled outputs): rel %.2e (tol %.0e)",
               name, m, n, k, err, tol);
        free(h);
    }
    float f8 = bench_ms(&c, &e);
    c.fp8 = 0;
    float b16 = f8 >= 0 ? bench_ms(&c, &e) : -1;
    double flop = 2.0 * m * n * k;
    if (f8 < 0 || b16 < 0)
        result(0, "bench %s: %s", name, e.msg);
    else
        printf("  %-26s m=%5d n=%5d k=%5d  fp8 %7.3f ms %6.0f TFLOP/s   bf16 %7.3f ms %6.0f "
               "TFLOP/s   x%.2f\n",
               name, m, n, k, f8, flop / f8 / 1e9, b16, flop / b16 / 1e9, b16 / f8);
    cudaFree(c.a16);
    cudaFree(c.b16);
    cudaFree(c.out);
    free_operand(&a);
    free_operand(&b);
    free(ha);
    free(hb);
}

int main(int argc, char **argv)
{
    int bench = !(argc > 1 && strcmp(argv[1], "--no-bench") == 0);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("  FAIL no CUDA device\n");
        failed++;
        return summary();
    }
    struct cudaDeviceProp prop;
    CK(__func__, cudaGetDeviceProperties(&prop, 0));
    printf("device %s (compute capability %d.%d), cuBLASLt %zu\n", prop.name, prop.major,
           prop.minor, cublasLtGetVersion());
    test_rng_seed_fresh();
    lowp_fp8_gemm *g = NULL;
    moe_err e = {{0}};
    if (lowp_fp8_gemm_create(&g, 32u << 20, &e)) {
        result(0, "create: %s", e.msg);
        return summary();
    }
    const lowp_blk_kind W = LOWP_BLK_128X128, X = LOWP_BLK_1X128;
    /* fprop / dgrad shape family: weights 128x128 as A, activations 1x128 as B */
    case_gemm(g, 256, 384, 512, W, X, LOWP_OUT_BF16, 0, 0);
    case_gemm(g, 384, 300, 640, W, X, LOWP_OUT_BF16, 0, 0); /* n not a multiple of 128 */
    case_gemm(g, 208, 144, 384, W, X, LOWP_OUT_BF16, 0, 0); /* m neither (multiples of 16) */
    case_gemm(g, 200, 129, 384, W, X, LOWP_OUT_BF16, 0, 1); /* odd n: refused on cuBLAS 13.1 */
    case_gemm(g, 256, 64, 448, W, X, LOWP_OUT_BF16, 0, 0);  /* k = 3.5 blocks */
    case_gemm(g, 256, 300, 512, W, X, LOWP_OUT_F32, 1, 0);
    /* wgrad: 1x128 with 1x128, accumulated into fp32 gradients */
    case_gemm(g, 256, 384, 512, X, X, LOWP_OUT_F32, 0, 0);
    case_gemm(g, 136, 392, 640, X, X, LOWP_OUT_F32, 1, 0);
    case_gemm(g, 256, 256, 320, X, X, LOWP_OUT_F32, 1, 0); /* k = tokens, not a multiple of 128 */
    case_gemm(g, 256, 384, 512, X, X, LOWP_OUT_BF16, 0, 0);
    /* the other assignment of the scale modes */
    case_gemm(g, 256, 384, 512, X, W, LOWP_OUT_BF16, 0, 0);
    case_linear(g, 384, 512, 640);
    case_linear(g, 208, 256, 384); /* tokens a multiple of 16, not of 128 */
    case_refused(g);
    case_mx_gemm(g, prop.major, 256, 384, 512);
    case_mx_gemm(g, prop.major, 384, 200, 320); /* partial 128-row scale tiles, k = 10 blocks */
    result(lowp_fp8_gemm_plans(g) > 0, "plans cached: %d", lowp_fp8_gemm_plans(g));

    if (bench) {
        cublasHandle_t blas;
        if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
            result(0, "cublasCreate");
        } else {
            printf("timings (median of 9; bf16 = cublasGemmEx, same shapes):\n");
            bench_shape(g, blas, "square 8192^3", 8192, 8192, 8192, W, 0);
            bench_shape(g, blas, "w1/w3 fprop, w2 dgrad", 14336, 2048, 4096, W, 0);
            bench_shape(g, blas, "w2 fprop, w1/w3 dgrad", 4096, 2048, 14336, W, 0);
            bench_shape(g, blas, "w1/w3 wgrad (fp32 +=)", 4096, 14336, 2048, X, 1);
            bench_shape(g, blas, "w2 wgrad (fp32 +=)", 14336, 4096, 2048, X, 1);
            cublasDestroy(blas);
        }
    }
    lowp_fp8_gemm_destroy(g);
    return summary();
}

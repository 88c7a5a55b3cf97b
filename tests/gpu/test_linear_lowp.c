/* The attention projections in low precision (precision.layers=all: the
 * CUDA backend's matmul_fwd / matmul_bwd in the experts' recipe) against a
 * float64 reference that quantises every operand with the C reference
 * (trainer/lowp/fp8.h) exactly as the recipe does:
 *   fprop  y  = x w^T      x along in,   w 128x128 (fp8_block) / along in (MX)
 *   dgrad  dx (+)= dy w    dy along out, w 128x128 / down out
 *   wgrad  dw += dy^T x    dy and x down the rows
 * fp8_block and mxfp8 take the first rows & ~15 (& ~31) rows in FP8 and the
 * rest unquantised in bf16; mxfp8_emulated quantises all rows (a partial
 * 32-block at the end). Because the reference sees the same quantised values,
 * only the GEMMs' rounding is left: tolerances (relative Frobenius norm) 4e-3
 * for bf16 outputs (one bf16 rounding is 2^-9), 1e-3 for the fp32 weight
 * gradient, as in test_fp8_gemm; the same reference without quantisation
 * is checked to be > 1e-2 away, so a path that silently ran in bf16 fails.
 * Outputs are poisoned with NaN first. Inputs are fresh each run (the seed is
 * printed; MOE_TEST_SEED=<hex> replays one). Also: widths the recipe cannot
 * block are refused, and experts set back to bf16 turn the path off.
 * Last line: "linear_lowp: N passed, N failed". Run on a GPU machine:
 *   build/tests/gpu/test_linear_lowp */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "../../trainer/backend/backend.h"
#include "../../trainer/lowp/fp8.h"
#include "../test_rng.h"
#define GPU_CHECK_NAME "linear_lowp"
#include "gpu_check.h"

static moe_backend *gpu;

typedef enum { R_FP8_BLOCK, R_MXFP8, R_MXFP8_EMULATED } recipe;
static const moe_precision recipe_precision[] = {MOE_PREC_FP8_BLOCK, MOE_PREC_MXFP8,
                                                 MOE_PREC_MXFP8_EMULATED};

static const double TOL_BF16 = 4e-3, TOL_F32 = 1e-3, MIN_LOWP_EFFECT = 1e-2;

static float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

static uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16); /* x is bf16-exact */
}

static float from_bf16_bits(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* normal values in bf16, the magnitude varied by 2^-4..2^4 per row so the
 * block scales differ */
static float *rand_bf16(size_t rows, size_t cols, float scale)
{
    float *v = xmalloc(rows * cols * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        float m = scale * ldexpf(1.f, (int)(test_rng_u64() % 9) - 4);
        for (size_t c = 0; c < cols; c++)
            v[r * cols + c] = bf16_round(m * (float)test_rng_normal());
    }
    return v;
}

/* ---- the recipe's quantisation, on the host ---- */

/* x [rows, cols] with its first n rows replaced by the recipe's values:
 * blocked along the rows (down = 0) or down the columns (down = 1);
 * weight = 1 for a weight under fp8_block (128x128 blocks) */
static float *quantised(recipe r, const float *x, size_t rows, size_t cols, size_t n, int down,
                        int weight)
{
    float *out = xmalloc(rows * cols * sizeof(float));
    memcpy(out, x, rows * cols * sizeof(float));
    if (n == 0)
        return out;
    if (r != R_FP8_BLOCK) {
        uint16_t *b = xmalloc(n * cols * sizeof(uint16_t));
        for (size_t i = 0; i < n * cols; i++)
            b[i] = bf16_bits(x[i]);
        lowp_mxfp8_fake_bf16(b, n, cols, down, b);
        for (size_t i = 0; i < n * cols; i++)
            out[i] = from_bf16_bits(b[i]);
        free(b);
        return out;
    }
    uint8_t *codes = xmalloc(n * cols);
    if (weight) {
        float *s = xmalloc(lowp_fp8blk_128x128_scales(n, cols) * sizeof(float));
        lowp_fp8blk_128x128(x, LOWP_F32, n, cols, codes, s);
        lowp_fp8blk_dequant_128x128(codes, s, n, cols, out);
        free(s);
    } else if (!down) {
        float *s = xmalloc(lowp_fp8blk_1x128_scales(n, cols) * sizeof(float));
        lowp_fp8blk_1x128(x, LOWP_F32, n, cols, codes, s);
        lowp_fp8blk_dequant_1x128(codes, s, n, cols, out);
        free(s);
    } else {
        /* the operand x^T [cols, n], blocks along its rows, back to [n, cols] */
        float *s = xmalloc(lowp_fp8blk_1x128_scales(cols, n) * sizeof(float));
        float *t = xmalloc(n * cols * sizeof(float));
        lowp_fp8blk_1x128_t(x, LOWP_F32, n, cols, codes, s);
        lowp_fp8blk_dequant_1x128(codes, s, cols, n, t);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < cols; j++)
                out[i * cols + j] = t[j * n + i];
        free(s);
        free(t);
    }
    free(codes);
    return out;
}

/* ---- float64 references ---- */

/* y[t, o] = sum_i x[t, i] w[o, i], rows t < n from (xq, wq), the rest from (x, w) */
static void ref_fwd(double *y, const float *xq, const float *wq, const float *x, const float *w,
                    int N, int IC, int OC, int n)
{
    for (int t = 0; t < N; t++)
        for (int o = 0; o < OC; o++) {
            const float *a = t < n ? xq : x, *b = t < n ? wq : w;
            double s = 0;
            for (int i = 0; i < IC; i++)
                s += (double)a[(size_t)t * IC + i] * b[(size_t)o * IC + i];
            y[(size_t)t * OC + o] = s;
        }
}

/* dx[t, i] = base + sum_o dy[t, o] w[o, i], rows t < n from (dyq, wq) */
static void ref_dgrad(double *dx, const float *base, const float *dyq, const float *wq,
                      const float *dy, const float *w, int N, int IC, int OC, int n)
{
    for (int t = 0; t < N; t++)
        for (int i = 0; i < IC; i++) {
            const float *a = t < n ? dyq : dy, *b = t < n ? wq : w;
            double s = base ? base[(size_t)t * IC + i] : 0;
            for (int o = 0; o < OC; o++)
                s += (double)a[(size_t)t * OC + o] * b[(size_t)o * IC + i];
            dx[(size_t)t * IC + i] = s;
        }
}

/* dw[o, i] = base + sum_t dy[t, o] x[t, i] (the rows' own copies chosen by the caller) */
static void ref_wgrad(double *dw, const float *base, const float *dy, const float *x, int N, int IC,
                      int OC)
{
    for (size_t k = 0; k < (size_t)OC * IC; k++)
        dw[k] = base[k];
    for (int t = 0; t < N; t++)
        for (int o = 0; o < OC; o++) {
            double g = dy[(size_t)t * OC + o];
            for (int i = 0; i < IC; i++)
                dw[(size_t)o * IC + i] += g * x[(size_t)t * IC + i];
        }
}

static double rel(const float *got, const double *want, size_t n, int *finite)
{
    double num = 0, den = 0;
    *finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            *finite = 0;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static double rel_dd(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++)
        num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

/* ---- device buffers through the backend ---- */

static void must(int rc, const char *what, const moe_err *e)
{
    if (rc) {
        printf("  FAIL %s: %s\n", what, e->msg);
        failed++;
        exit(summary());
    }
}

static void *dev_act(const float *v, size_t n)
{
    moe_err e = {{0}};
    void *p = gpu->alloc(gpu, gpu->act_bytes(gpu, n), &e);
    must(!p, "alloc", &e);
    must(gpu->act_from_real(gpu, p, v, n, &e), "act_from_real", &e);
    return p;
}

static void *dev_f32(const float *v, size_t n)
{
    moe_err e = {{0}};
    void *p = gpu->alloc(gpu, n * sizeof(float), &e);
    must(!p, "alloc", &e);
    must(gpu->upload(gpu, p, v, n * sizeof(float), &e), "upload", &e);
    return p;
}

static float *nans(size_t n)
{
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = NAN;
    return v;
}

/* the op's result (synchronised, its error reported) */
static float *back(void *p, size_t n, int is_act, const char *op)
{
    moe_err e = {{0}};
    float *v = xmalloc(n * sizeof(float));
    must(gpu->sync(gpu, &e), op, &e);
    if (is_act)
        must(gpu->act_to_real(gpu, v, p, n, &e), "act_to_real", &e);
    else
        must(gpu->download(gpu, v, p, n * sizeof(float), &e), "download", &e);
    return v;
}

static void report(const char *what, const char *label, const float *got, const double *want,
                   const double *raw, size_t n, double tol, int lowp_rows)
{
    int finite;
    double r = rel(got, want, n, &finite);
    double effect = lowp_rows ? rel_dd(raw, want, n) : 0;
    int ok = finite && r <= tol && (!lowp_rows || effect > MIN_LOWP_EFFECT);
    result(ok, "%s %s: rel %.2e (tol %.0e), quantisation's own effect %.2e%s", label, what, r,
           tol, effect, finite ? "" : ", NON-FINITE/UNWRITTEN");
}

/* one shape under one recipe: fprop, dgrad (overwrite and accumulate),
 * wgrad (accumulated onto random values), and dgrad skipped (din NULL) */
static void linear_case(recipe rc, int N, int IC, int OC)
{
    char label[128];
    snprintf(label, sizeof label, "%s N=%d in=%d out=%d", precision_name(recipe_precision[rc]), N, IC, OC);
    moe_err e = {{0}};
    must(gpu->set_expert_precision(gpu, recipe_precision[rc], IC > OC ? IC : OC, 256, &e),
         "set_expert_precision", &e);
    const int widths[2] = {IC, OC};
    must(gpu->set_linear_lowp(gpu, 1, widths, 2, &e), "set_linear_lowp", &e);
    const int n = rc == R_FP8_BLOCK ? N & ~15 : rc == R_MXFP8 ? N & ~31 : N;
    const size_t nx = (size_t)N * IC, ny = (size_t)N * OC, nw = (size_t)OC * IC;
    float *x = rand_bf16(N, IC, 1.f), *w = rand_bf16(OC, IC, 0.1f), *dy = rand_bf16(N, OC, 1.f);
    float *dx0 = rand_bf16(N, IC, 1.f), *dw0 = rand_bf16(OC, IC, 1.f);

    float *xq = quantised(rc, x, N, IC, n, 0, 0), *wq = quantised(rc, w, OC, IC, OC, 0, 1);
    float *wqd = quantised(rc, w, OC, IC, OC, 1, 1); /* fp8_block: the same 128x128 blocks */
    float *dyq = quantised(rc, dy, N, OC, n, 0, 0);
    float *dyc = quantised(rc, dy, N, OC, n, 1, 0), *xc = quantised(rc, x, N, IC, n, 1, 0);

    void *gx = dev_act(x, nx), *gw = dev_act(w, nw), *gdy = dev_act(dy, ny);
    float *poison_y = nans(ny), *poison_x = nans(nx);
    void *gy = dev_act(poison_y, ny), *gdx = dev_act(poison_x, nx), *gdw = dev_f32(dw0, nw);
    const size_t most = nx > ny ? (nx > nw ? nx : nw) : (ny > nw ? ny : nw);
    double *want = xmalloc(most * sizeof(double)), *raw = xmalloc(most * sizeof(double));

    gpu->matmul_fwd(gpu, gy, gx, gw, N, IC, OC);
    float *y = back(gy, ny, 1, "matmul_fwd");
    ref_fwd(want, xq, wq, x, w, N, IC, OC, n);
    ref_fwd(raw, x, w, x, w, N, IC, OC, 0);
    report("fprop y", label, y, want, raw, ny, TOL_BF16, n > 0);

    /* dgrad overwriting dx, wgrad onto dw0 */
    gpu->matmul_bwd(gpu, gdx, gdw, gdy, gx, gw, N, IC, OC, 0);
    float *dx = back(gdx, nx, 1, "matmul_bwd");
    float *dw = back(gdw, nw, 0, "matmul_bwd");
    ref_dgrad(want, NULL, dyq, wqd, dy, w, N, IC, OC, n);
    ref_dgrad(raw, NULL, dy, w, dy, w, N, IC, OC, 0);
    report("dgrad dx", label, dx, want, raw, nx, TOL_BF16, n > 0);
    /* wgrad: the quantised rows' copies, then the bf16 rows unquantised */
    float *dyw = xmalloc(ny * sizeof(float)), *xw = xmalloc(nx * sizeof(float));
    memcpy(dyw, dyc, ny * sizeof(float));
    memcpy(xw, xc, nx * sizeof(float));
    ref_wgrad(want, dw0, dyw, xw, N, IC, OC);
    ref_wgrad(raw, dw0, dy, x, N, IC, OC);
    /* the quantisation's effect measured on the gradient alone (dw0 would dilute it) */
    double *g_want = xmalloc(nw * sizeof(double)), *g_raw = xmalloc(nw * sizeof(double));
    float *zero = calloc(nw, sizeof(float));
    ref_wgrad(g_want, zero, dyw, xw, N, IC, OC);
    ref_wgrad(g_raw, zero, dy, x, N, IC, OC);
    double effect = rel_dd(g_raw, g_want, nw);
    int finite;
    double r = rel(dw, want, nw, &finite);
    result(finite && r <= TOL_F32 && (n == 0 || effect > MIN_LOWP_EFFECT),
           "%s wgrad dw (+= onto random): rel %.2e (tol %.0e), quantisation's own effect %.2e%s",
           label, r, TOL_F32, effect, finite ? "" : ", NON-FINITE");

    /* dgrad accumulating onto dx0; dw gets a second += */
    moe_err e2 = {{0}};
    must(gpu->act_from_real(gpu, gdx, dx0, nx, &e2), "act_from_real", &e2);
    gpu->matmul_bwd(gpu, gdx, gdw, gdy, gx, gw, N, IC, OC, 1);
    free(dx);
    dx = back(gdx, nx, 1, "matmul_bwd (accumulate)");
    ref_dgrad(want, dx0, dyq, wqd, dy, w, N, IC, OC, n);
    ref_dgrad(raw, dx0, dy, w, dy, w, N, IC, OC, 0);
    report("dgrad dx (accumulate)", label, dx, want, raw, nx, TOL_BF16, 0);

    /* din NULL: only the weight gradient (a third +=) */
    gpu->matmul_bwd(gpu, NULL, gdw, gdy, gx, gw, N, IC, OC, 0);
    free(dw);
    dw = back(gdw, nw, 0, "matmul_bwd (no dx)");
    for (size_t k = 0; k < nw; k++)
        want[k] = dw0[k] + 3 * g_want[k];
    r = rel(dw, want, nw, &finite);
    result(finite && r <= TOL_F32, "%s wgrad only (dx NULL), third +=: rel %.2e (tol %.0e)", label,
           r, TOL_F32);

    void *bufs[] = {gx, gw, gdy, gy, gdx, gdw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
    float *hs[] = {x, w, dy, dx0, dw0, xq, wq, wqd, dyq, dyc, xc, poison_y, poison_x, y, dx, dw,
                   dyw, xw, zero};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        free(hs[i]);
    free(want);
    free(raw);
    free(g_want);
    free(g_raw);
}

/* The weights' FP8 copies kept for a step (runtime.fp8_weight_cache): a
 * second forward on the same weight gives the same bits (the kept copy); a
 * weight written by a conversion (act_from_real) or in bulk
 * (weights_from_master, as AdamW and the checkpoint's load do) is quantised
 * again, checked against the reference on the new weight (a stale copy would
 * be the old weight's result, far outside the tolerance); and the cache off
 * gives the same bits as on. */
static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static void weight_cache_case(recipe rc, int N, int IC, int OC)
{
    char label[128];
    snprintf(label, sizeof label, "%s weight copies N=%d in=%d out=%d",
             precision_name(recipe_precision[rc]), N, IC, OC);
    moe_err e = {{0}};
    moe_backend_opts opts = backend_opts_default();
    must(gpu->set_run_opts(gpu, &opts, &e), "runtime.fp8_weight_cache=true", &e);
    must(gpu->set_expert_precision(gpu, recipe_precision[rc], IC > OC ? IC : OC, 256, &e),
         "set_expert_precision", &e);
    const int widths[2] = {IC, OC};
    must(gpu->set_linear_lowp(gpu, 1, widths, 2, &e), "set_linear_lowp", &e);
    const int n = rc == R_FP8_BLOCK ? N & ~15 : N & ~31;
    const size_t nx = (size_t)N * IC, ny = (size_t)N * OC, nw = (size_t)OC * IC;
    float *x = rand_bf16(N, IC, 1.f), *w = rand_bf16(OC, IC, 0.1f);
    float *w2 = rand_bf16(OC, IC, 0.1f), *w3 = rand_bf16(OC, IC, 0.1f);
    float *xq = quantised(rc, x, N, IC, n, 0, 0);
    void *gx = dev_act(x, nx), *gw = dev_act(w, nw), *gm = dev_f32(w3, nw);
    float *poison = nans(ny);
    void *gy = dev_act(poison, ny);
    double *want = xmalloc(ny * sizeof(double)), *raw = xmalloc(ny * sizeof(double));

    gpu->matmul_fwd(gpu, gy, gx, gw, N, IC, OC);
    float *y1 = back(gy, ny, 1, "matmul_fwd (weight quantised)");
    must(gpu->act_from_real(gpu, gy, poison, ny, &e), "poison", &e);
    gpu->matmul_fwd(gpu, gy, gx, gw, N, IC, OC);
    float *y2 = back(gy, ny, 1, "matmul_fwd (the kept copy)");
    result(same_bits(y1, y2, ny), "%s: a second forward, the kept copy: the same bits", label);

    /* a conversion writes new weights into the buffer that has a copy */
    must(gpu->act_from_real(gpu, gw, w2, nw, &e), "act_from_real (new weights)", &e);
    gpu->matmul_fwd(gpu, gy, gx, gw, N, IC, OC);
    float *y3 = back(gy, ny, 1, "matmul_fwd (after act_from_real)");
    float *wq = quantised(rc, w2, OC, IC, OC, 0, 1);
    ref_fwd(want, xq, wq, x, w2, N, IC, OC, n);
    ref_fwd(raw, x, w2, x, w2, N, IC, OC, 0);
    report("fprop y after new weights (act_from_real)", label, y3, want, raw, ny, TOL_BF16, n > 0);
    free(wq);

    /* the weights made from fp32 masters in bulk, as after AdamW */
    gpu->weights_from_master(gpu, gw, (const float *)gm, nw);
    gpu->matmul_fwd(gpu, gy, gx, gw, N, IC, OC);
    float *y4 = back(gy, ny, 1, "matmul_fwd (after weights_from_master)");
    wq = quantised(rc, w3, OC, IC, OC, 0, 1);
    ref_fwd(want, xq, wq, x, w3, N, IC, OC, n);
    ref_fwd(raw, x, w3, x, w3, N, IC, OC, 0);
    report("fprop y after weights_from_master", label, y4, want, raw, ny, TOL_BF16, n > 0);

    /* off: quantised at every use, the same bits */
    opts.fp8_weight_cache = 0;
    must(gpu->set_run_opts(gpu, &opts, &e), "runtime.fp8_weight_cache=false", &e);
    gpu->matmul_fwd(gpu, gy, gx, gw, N, IC, OC);
    float *y5 = back(gy, ny, 1, "matmul_fwd (no kept copies)");
    result(same_bits(y4, y5, ny), "%s: the cache off gives the cache's bits", label);
    opts = backend_opts_default();
    must(gpu->set_run_opts(gpu, &opts, &e), "the default run options", &e);

    void *bufs[] = {gx, gw, gm, gy};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->free(gpu, bufs[i]);
    float *hs[] = {x, w, w2, w3, xq, wq, poison, y1, y2, y3, y4, y5};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        free(hs[i]);
    free(want);
    free(raw);
}

/* widths the recipe cannot block are refused by name; experts back in bf16
 * take the projections with them (bf16 within bf16's tolerance) */
static void refusals(void)
{
    moe_err e = {{0}};
    must(gpu->set_expert_precision(gpu, MOE_PREC_FP8_BLOCK, 256, 256, &e), "set_expert_precision", &e);
    const int bad[3] = {256, 200, 64};
    int rc = gpu->set_linear_lowp(gpu, 1, bad, 3, &e);
    result(rc == -1 && strstr(e.msg, "multiples of 16") && strstr(e.msg, "200"),
           "fp8_block refuses a width of 200: %s", rc ? e.msg : "(accepted)");
    must(gpu->set_expert_precision(gpu, MOE_PREC_BF16, 256, 256, &e), "set_expert_precision", &e);
    const int good[2] = {256, 256};
    rc = gpu->set_linear_lowp(gpu, 1, good, 2, &e);
    result(rc == -1 && strstr(e.msg, "bf16"), "bf16 experts: precision.layers=all refused: %s",
           rc ? e.msg : "(accepted)");

    /* fp8_block on, then the experts to bf16: the projections follow */
    must(gpu->set_expert_precision(gpu, MOE_PREC_FP8_BLOCK, 256, 256, &e), "set_expert_precision", &e);
    must(gpu->set_linear_lowp(gpu, 1, good, 2, &e), "set_linear_lowp", &e);
    must(gpu->set_expert_precision(gpu, MOE_PREC_BF16, 256, 256, &e), "set_expert_precision", &e);
    const int N = 64, IC = 256, OC = 256;
    float *x = rand_bf16(N, IC, 1.f), *w = rand_bf16(OC, IC, 0.1f), *p = nans((size_t)N * OC);
    void *gx = dev_act(x, (size_t)N * IC), *gw = dev_act(w, (size_t)OC * IC);
    void *gy = dev_act(p, (size_t)N * OC);
    double *want = xmalloc((size_t)N * OC * sizeof(double));
    gpu->matmul_fwd(gpu, gy, gx, gw, N, IC, OC);
    float *y = back(gy, (size_t)N * OC, 1, "matmul_fwd");
    ref_fwd(want, x, w, x, w, N, IC, OC, 0);
    int finite;
    double r = rel(y, want, (size_t)N * OC, &finite);
    result(finite && r <= TOL_BF16, "experts back in bf16: projections in bf16, rel %.2e", r);
    gpu->free(gpu, gx);
    gpu->free(gpu, gw);
    gpu->free(gpu, gy);
    free(x);
    free(w);
    free(p);
    free(y);
    free(want);
}

int main(void)
{
    test_rng_seed_fresh();
    moe_err e = {{0}};
    must(cuda_backend_create(&gpu, 0, &e), "cuda backend", &e);
    struct cudaDeviceProp prop;
    CK("device", cudaGetDeviceProperties(&prop, 0));
    if (prop.major == 9) {
        linear_case(R_FP8_BLOCK, 300, 192, 256); /* 288 rows FP8, 12 bf16; in ends in a part-block */
        linear_case(R_FP8_BLOCK, 10, 128, 64);   /* all rows bf16 */
        moe_backend_opts opts = backend_opts_default();
        opts.fp8_chunk_rows = 128; /* 1000 rows: 7 chunks of 128 and one of 96 */
        must(gpu->set_run_opts(gpu, &opts, &e), "runtime.fp8_chunk_rows=128", &e);
        linear_case(R_FP8_BLOCK, 1000, 128, 192);
        opts = backend_opts_default();
        must(gpu->set_run_opts(gpu, &opts, &e), "the default run options", &e);
        weight_cache_case(R_FP8_BLOCK, 300, 192, 256);
        refusals();
    } else if (prop.major == 10) {
        linear_case(R_MXFP8, 300, 192, 256);
        linear_case(R_MXFP8, 1000, 256, 128);
        weight_cache_case(R_MXFP8, 300, 192, 256);
    } else {
        printf("  fp8_block / mxfp8 skipped: compute capability %d.%d is neither Hopper nor "
               "Blackwell\n", prop.major, prop.minor);
    }
    linear_case(R_MXFP8_EMULATED, 300, 200, 256); /* in ends in a partial 32-block */
    linear_case(R_MXFP8_EMULATED, 40, 64, 96);
    gpu->destroy(gpu);
    return summary();
}

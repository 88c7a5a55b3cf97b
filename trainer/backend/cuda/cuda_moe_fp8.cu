/* moekit CUDA backend: the expert FFN in FP8 (precision fp8_block on Hopper,
 * mxfp8 on Blackwell; the two differ in the quantisers, see is_mx below).
 * For fp8_block: same loop over the local experts as the bf16 path
 * (cuda_moe.cu), with every expert GEMM an E4M3 GEMM through cuBLASLt
 * (trainer/lowp/fp8_gemm.h): weights in 128x128 blocks, activations and
 * gradients in 1x128 tiles along each GEMM's contraction, fp32 accumulation,
 * bf16 outputs, fp32 weight gradients accumulated in place.
 *
 * Operand by GEMM (w [out, in], x [rows, in], dy [rows, out]):
 *   fprop  y  = x w^T   a = w    (128x128)   b = x    (1x128 along in)
 *   dgrad  dx = dy w    a = w^T  (128x128)   b = dy   (1x128 along out)
 *   wgrad  dw += dy^T x a = x^T  (1x128 along rows) b = dy^T (1x128 along rows)
 * w^T's codes are w's transposed (a 128x128 block has the same scale either
 * way). Tokens enter the FP8 GEMMs in multiples of 16 (cuBLASLt's alignment
 * of the K-major transposed operands); an expert's last rows % 16 go through
 * the bf16 GEMMs, unquantised. The weights are quantised again at every use,
 * one expert at a time, so the extra memory is one expert's worth; an
 * expert's FP8 rows go through the GEMMs in chunks of fp8_chunk_rows, so the
 * activations' quantised copies are one chunk's worth however the router
 * spreads the tokens.
 *
 * fp8_block keeps the SwiGLU inputs h1, h3 for the backward as E4M3 codes
 * with 1x128 scales (half the bytes of bf16; set_fp8_saved_activations):
 * the forward's GEMMs write bf16 into the backward's dH1 / dH3 scratch,
 * SwiGLU reads that, and the quantiser writes what is kept; the backward's
 * SwiGLU kernels read the codes themselves (no bf16 copy is made). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lowp/fp8.h"
#include "../../lowp/fp8_gemm.h"
#include "../../lowp/lowp_cuda.h"
#include "../route_plan.h"
#include "cuda_internal.h"

#define B16(p) ((bf16 *)(p))
#define CB16(p) ((const bf16 *)(p))
#define U16(p) ((const uint16_t *)(p))

/* scratch slots of this file (cuda_internal.h: CUDA_SCRATCH_SLOTS) */
enum { S_W = 8, S_WS, S_WT, S_WTS, S_P, S_PS, S_PT, S_PTS, S_Q, S_QS, S_QT, S_QTS };

/* The two recipes differ only in how an operand is quantised:
 *   fp8_block (Hopper): fp32 scales, 1x128 for activations, 128x128 for
 *     weights; the transposed copies straight from the quantisers.
 *   mxfp8 (Blackwell): E8M0 scales per 32 along k, swizzled for cuBLASLt,
 *     weights and activations alike; the copy blocked down the columns is
 *     transposed afterwards, so every GEMM is K-major ("TN") as well. */
static int is_mx(moe_backend *be) { return CTX(be)->expert_lowp == CUDA_EXPERTS_MXFP8; }

/* rows a GEMM takes in FP8 (a multiple of the scale block along tokens) */
static int64_t fp8_rows(moe_backend *be, int64_t rows)
{
    return rows & ~(int64_t)(is_mx(be) ? 31 : 15);
}

static size_t row_scale_bytes(moe_backend *be, size_t outer, size_t k)
{
    return is_mx(be) ? lowp_mx_swizzled_bytes(outer, lowp_ceil_div(k, LOWP_MX_BLOCK))
                     : 4 * lowp_fp8blk_1x128_scales(outer, k);
}

/* A quantised matrix as the GEMMs take it: the operand itself [outer, k]
 * and/or the transposed one [k, outer]. */
typedef struct {
    uint8_t *codes, *codes_t;
    void *scales, *scales_t;
} q8;

/* scratch for the copies of an activation of at most `rows` rows and `cols`
 * columns (either copy may be skipped); slot .. slot + 3 */
static q8 act_scratch(moe_backend *be, int slot, size_t rows, size_t cols, int rowwise, int trans)
{
    q8 q = {NULL, NULL, NULL, NULL};
    if (rowwise) {
        q.codes = (uint8_t *)cuda_scratch(be, slot, rows * cols);
        q.scales = cuda_scratch(be, slot + 1, row_scale_bytes(be, rows, cols));
    }
    if (trans) {
        q.codes_t = (uint8_t *)cuda_scratch(be, slot + 2, rows * cols);
        q.scales_t = cuda_scratch(be, slot + 3, row_scale_bytes(be, cols, rows));
    }
    return q;
}

static int q8_ok(const q8 *q, int rowwise, int trans)
{
    return (!rowwise || (q->codes && q->scales)) && (!trans || (q->codes_t && q->scales_t));
}

/* MXFP8 copies of x [rows, cols] (either may be NULL in q): blocked along
 * the rows into q->codes, down the columns then transposed into
 * q->codes_t; `tmp` holds the untransposed column codes */
static int mx_quant(moe_backend *be, const char *op, const q8 *q, uint8_t *tmp, const bf16 *x,
                    size_t rows, size_t cols)
{
    moe_err e = {{0}};
    lowp_mx_out o = {q->codes, NULL, (uint8_t *)q->scales, q->codes_t ? tmp : NULL, NULL,
                     (uint8_t *)q->scales_t};
    if (lowp_cuda_mxfp8(U16(x), rows, cols, &o, CTX(be)->stream, &e) ||
        (q->codes_t && lowp_cuda_transpose_u8(tmp, rows, cols, q->codes_t, CTX(be)->stream, &e))) {
        cuda_note(be, op, e.msg);
        return -1;
    }
    return 0;
}

/* the copies in q of x [rows, cols] bf16 (skipped copies NULL) */
static int quant_act(moe_backend *be, const char *op, const q8 *q, const bf16 *x, size_t rows,
                     size_t cols)
{
    moe_err e = {{0}};
    if (is_mx(be)) {
        uint8_t *tmp = q->codes_t ? (uint8_t *)cuda_scratch(be, S_WT, rows * cols) : NULL;
        if (q->codes_t && !tmp)
            return -1;
        return mx_quant(be, op, q, tmp, x, rows, cols);
    }
    if (lowp_cuda_fp8blk_1x128(U16(x), rows, cols, q->codes, (float *)q->scales, q->codes_t,
                               (float *)q->scales_t, CTX(be)->stream, &e)) {
        cuda_note(be, op, e.msg);
        return -1;
    }
    return 0;
}

/* one expert's weight w [out, in] as the operand w (k = in) into slots dst,
 * dst + 1, or, transposed, w^T (k = out) into S_W, S_WS (mxfp8: S_WT holds
 * the untransposed codes on the way) */
static int quant_weight(moe_backend *be, const char *op, const bf16 *w, size_t out, size_t in,
                        int transposed, int dst, lowp_fp8_operand *o)
{
    cuda_ctx *c = CTX(be);
    moe_err e = {{0}};
    if (transposed)
        dst = S_W;
    if (is_mx(be)) {
        q8 q = {NULL, NULL, NULL, NULL};
        uint8_t *codes = (uint8_t *)cuda_scratch(be, dst, out * in);
        void *scales = cuda_scratch(be, dst + 1, transposed ? row_scale_bytes(be, in, out)
                                                         : row_scale_bytes(be, out, in));
        uint8_t *tmp = transposed ? (uint8_t *)cuda_scratch(be, S_WT, out * in) : NULL;
        if (!codes || !scales || (transposed && !tmp))
            return -1;
        if (transposed)
            q.codes_t = codes, q.scales_t = scales;
        else
            q.codes = codes, q.scales = scales;
        if (mx_quant(be, op, &q, tmp, w, out, in))
            return -1;
        o->codes = codes, o->scales = scales, o->kind = LOWP_MX_1X32;
        return 0;
    }
    /* fp8_block: w, or w^T's codes and scales straight from w in one pass */
    size_t n_scales = transposed ? lowp_fp8blk_128x128_scales(in, out)
                                 : lowp_fp8blk_128x128_scales(out, in);
    uint8_t *codes = (uint8_t *)cuda_scratch(be, dst, out * in);
    float *scales = (float *)cuda_scratch(be, dst + 1, 4 * n_scales);
    if (!codes || !scales)
        return -1;
    int rc = transposed ? lowp_cuda_fp8blk_128x128(U16(w), out, in, NULL, NULL, codes, scales,
                                                   c->stream, &e)
                        : lowp_cuda_fp8blk_128x128(U16(w), out, in, codes, scales, NULL, NULL,
                                                   c->stream, &e);
    if (rc) {
        cuda_note(be, op, e.msg);
        return -1;
    }
    o->codes = codes, o->scales = scales, o->kind = LOWP_BLK_128X128;
    return 0;
}

/* out = b . a^T with a quantised as ak, b an activation copy of this recipe */
static void gemm8(moe_backend *be, const char *op, int m, int n, int k, const uint8_t *ac,
                  const void *as, lowp_blk_kind ak, const uint8_t *bc, const void *bs, void *out,
                  int out_fp32, float beta)
{
    cuda_ctx *c = CTX(be);
    lowp_fp8_operand a = {ac, as, ak}, b = {bc, bs, is_mx(be) ? LOWP_MX_1X32 : LOWP_BLK_1X128};
    moe_err e = {{0}};
    if (lowp_fp8_gemm_run(c->fp8_gemm, c->stream, m, n, k, &a, &b, out,
                          out_fp32 ? LOWP_OUT_F32 : LOWP_OUT_BF16, 1.f, beta, &e))
        cuda_note(be, op, e.msg);
}

static int64_t chunk_len(moe_backend *be, int64_t n8, int64_t c0)
{
    int64_t ch = CTX(be)->fp8_chunk_rows;
    return n8 - c0 < ch ? n8 - c0 : ch;
}

/* ---- the saved SwiGLU inputs ---------------------------------------------------- */

int cuda_fp8_saved(moe_backend *be)
{
    return CTX(be)->expert_lowp == CUDA_EXPERTS_FP8_BLOCK && CTX(be)->fp8_saved_on;
}

void cuda_set_fp8_saved_activations(moe_backend *be, int on) { CTX(be)->fp8_saved_on = on != 0; }

static size_t saved_codes_bytes(size_t rows, int I) { return (rows * I + 255) & ~(size_t)255; }

size_t cuda_expert_saved_bytes(moe_backend *be, size_t rows, int I)
{
    if (!cuda_fp8_saved(be))
        return rows * I * sizeof(bf16);
    return saved_codes_bytes(rows, I) + 4 * lowp_fp8blk_1x128_scales(rows, I);
}

static float *saved_scales(const act *h, size_t rows, int I)
{
    return (float *)((uint8_t *)h + saved_codes_bytes(rows, I));
}

static int save_fp8(moe_backend *be, const char *op, act *h, const bf16 *x, size_t rows, int I)
{
    moe_err e = {{0}};
    if (lowp_cuda_fp8blk_1x128(U16(x), rows, I, (uint8_t *)h, saved_scales(h, rows, I), NULL, NULL,
                               CTX(be)->stream, &e)) {
        cuda_note(be, op, e.msg);
        return -1;
    }
    return 0;
}

/* the saved h as the SwiGLU kernels read it (bf16 when not kept in E4M3) */
static cuda_swiglu_in saved_in(moe_backend *be, const act *h, size_t rows, int I)
{
    cuda_swiglu_in v = {CB16(h), NULL, NULL, 0};
    if (cuda_fp8_saved(be)) {
        v.h = NULL, v.q = (const uint8_t *)h;
        v.s = saved_scales(h, rows, I), v.ld = lowp_fp8blk_1x128_ld(rows);
    }
    return v;
}

/* ---- forward -------------------------------------------------------------------- */

void cuda_experts_fwd_fp8(moe_backend *be, act *y_perm, act *h1, act *h3, act *a,
                          const act *x_perm, const real *p_perm, const act *w1, const act *w3,
                          const act *w2, const moe_route_plan *plan, int C, int I)
{
    const char *op = is_mx(be) ? "experts_fwd (mxfp8)" : "experts_fwd (fp8_block)";
    size_t rows_all = plan->n_rows;
    const int on = CTX(be)->fp8_gemms & FP8_FPROP, saved8 = cuda_fp8_saved(be);
    bf16 *H1 = B16(h1), *H3 = B16(h3);
    if (rows_all == 0)
        return;
    if (saved8) {
        H1 = (bf16 *)cuda_scratch(be, 5, rows_all * I * sizeof(bf16));
        H3 = (bf16 *)cuda_scratch(be, 6, rows_all * I * sizeof(bf16));
        if (!H1 || !H3)
            return;
    }
    q8 xq = act_scratch(be, S_P, CTX(be)->fp8_chunk_rows, C > I ? C : I, 1, 0);
    if (!q8_ok(&xq, 1, 0))
        return;
    for (int x = 0; x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        int64_t n8 = on ? fp8_rows(be, rows) : 0;
        if (rows == 0)
            continue;
        const bf16 *X = CB16(x_perm) + r0 * C;
        const bf16 *W1 = CB16(w1) + (size_t)x * I * C, *W3 = CB16(w3) + (size_t)x * I * C;
        if (n8) {
            lowp_fp8_operand q1, q3;
            if (quant_weight(be, op, W1, I, C, 0, S_W, &q1) ||
                quant_weight(be, op, W3, I, C, 0, S_WT, &q3))
                return;
            for (int64_t c0 = 0; c0 < n8; c0 += CTX(be)->fp8_chunk_rows) {
                int64_t cn = chunk_len(be, n8, c0);
                if (quant_act(be, op, &xq, X + c0 * C, cn, C))
                    return;
                gemm8(be, op, I, (int)cn, C, q1.codes, q1.scales, q1.kind, xq.codes, xq.scales,
                      H1 + (r0 + c0) * I, 0, 0.f);
                gemm8(be, op, I, (int)cn, C, q3.codes, q3.scales, q3.kind, xq.codes, xq.scales,
                      H3 + (r0 + c0) * I, 0, 0.f);
            }
        }
        if (rows > n8) {
            int r = (int)(rows - n8);
            cuda_gemm_xwT(be, H1 + (r0 + n8) * I, 0, X + n8 * C, W1, r, C, I, 0.f);
            cuda_gemm_xwT(be, H3 + (r0 + n8) * I, 0, X + n8 * C, W3, r, C, I, 0.f);
        }
    }
    cuda_swiglu_prob(be, B16(a), H1, H3, p_perm, rows_all, I);
    if (saved8 && (save_fp8(be, op, h1, H1, rows_all, I) || save_fp8(be, op, h3, H3, rows_all, I)))
        return;
    for (int x = 0; x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        int64_t n8 = on ? fp8_rows(be, rows) : 0;
        if (rows == 0)
            continue;
        const bf16 *A = CB16(a) + r0 * I, *W2 = CB16(w2) + (size_t)x * C * I;
        if (n8) {
            lowp_fp8_operand q2;
            if (quant_weight(be, op, W2, C, I, 0, S_W, &q2))
                return;
            for (int64_t c0 = 0; c0 < n8; c0 += CTX(be)->fp8_chunk_rows) {
                int64_t cn = chunk_len(be, n8, c0);
                if (quant_act(be, op, &xq, A + c0 * I, cn, I))
                    return;
                gemm8(be, op, C, (int)cn, I, q2.codes, q2.scales, q2.kind, xq.codes, xq.scales,
                      B16(y_perm) + (r0 + c0) * C, 0, 0.f);
            }
        }
        if (rows > n8)
            cuda_gemm_xwT(be, B16(y_perm) + (r0 + n8) * C, 0, A + n8 * I, W2, (int)(rows - n8), I,
                          C, 0.f);
    }
}

/* ---- backward ------------------------------------------------------------------- */

/* One projection's backward for one expert: dx (+)= dy w and dw (+)= dy^T x,
 * with dy [rows, out], x [rows, in], w [out, in]. nd / nw: the rows the
 * dgrad / wgrad GEMM takes in FP8 (0 or fp8_rows), chunk by chunk through
 * dyq (both copies of dy) and xq (x transposed); the rest in bf16.
 * x_ready: xq already holds x when its FP8 rows are one chunk (the w3 pass
 * after w1's, on the same x). */
static int proj_bwd(moe_backend *be, const char *op, bf16 *dx, float dx_beta, float *dw,
                    float dw_beta, const bf16 *dy, const bf16 *xin, const bf16 *w, const q8 *dyq,
                    const q8 *xq, int64_t rows, int64_t nd, int64_t nw, int in, int out,
                    int x_ready)
{
    const int64_t n8 = nd > nw ? nd : nw, ch = CTX(be)->fp8_chunk_rows;
    lowp_fp8_operand wt;
    if (nd && quant_weight(be, op, w, out, in, 1, S_W, &wt))
        return -1;
    for (int64_t c0 = 0; c0 < n8; c0 += ch) {
        int64_t cn = chunk_len(be, n8, c0);
        if (quant_act(be, op, dyq, dy + c0 * out, cn, out))
            return -1;
        if (nw && !(x_ready && n8 <= ch) && quant_act(be, op, xq, xin + c0 * in, cn, in))
            return -1;
        if (nd)
            gemm8(be, op, in, (int)cn, out, wt.codes, wt.scales, wt.kind, dyq->codes, dyq->scales,
                  dx + c0 * in, 0, dx_beta);
        if (nw)
            gemm8(be, op, in, out, (int)cn, xq->codes_t, xq->scales_t,
                  is_mx(be) ? LOWP_MX_1X32 : LOWP_BLK_1X128, dyq->codes_t, dyq->scales_t, dw, 1,
                  c0 ? 1.f : dw_beta);
    }
    if (rows > nd)
        cuda_gemm_dyw(be, dx + nd * in, dy + nd * out, w, (int)(rows - nd), in, out, dx_beta);
    if (rows > nw)
        cuda_gemm_dyTx(be, dw, dy + nw * out, xin + nw * in, (int)(rows - nw), in, out,
                       nw ? 1.f : dw_beta);
    return 0;
}

void cuda_experts_bwd_fp8(moe_backend *be, act *dx_perm, real *dp_perm, real *dw1, real *dw3,
                          real *dw2, const act *dy_perm, const act *x_perm, const act *h1,
                          const act *h3, const real *p_perm, const act *w1, const act *w3,
                          const act *w2, const moe_route_plan *plan, int C, int I,
                          int dw_overwrite)
{
    const char *op = is_mx(be) ? "experts_bwd (mxfp8)" : "experts_bwd (fp8_block)";
    const float wb = dw_overwrite ? 0.f : 1.f;
    size_t rows_all = plan->n_rows;
    const int don = CTX(be)->fp8_gemms & FP8_DGRAD, won = CTX(be)->fp8_gemms & FP8_WGRAD;
    size_t wide = C > I ? C : I;
    cuda_expert_bwd_bufs b;
    if (rows_all == 0)
        return;
    /* h1, h3 read straight from what the forward kept (E4M3 or bf16) */
    const cuda_swiglu_in H1 = saved_in(be, h1, rows_all, I), H3 = saved_in(be, h3, rows_all, I);
    if (cuda_expert_bwd_alloc(be, &b, rows_all, I))
        return;
    cuda_swiglu_prob_in(be, b.a, H1, H3, p_perm, rows_all, I);
    bf16 *A = b.a, *dA = b.da, *dH1 = b.dh1, *dH3 = b.dh3;
    size_t ch = (size_t)CTX(be)->fp8_chunk_rows;
    q8 gq = act_scratch(be, S_P, ch, wide, 1, 1); /* the gradient: both copies */
    q8 iq = act_scratch(be, S_Q, ch, wide, 0, 1); /* the GEMM input: transposed only */
    if (!q8_ok(&gq, 1, 1) || !q8_ok(&iq, 0, 1))
        return;
    for (int x = 0; x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x], n8 = fp8_rows(be, rows);
        if (rows == 0)
            continue;
        if (proj_bwd(be, op, dA + r0 * I, 0.f, dw2 + (size_t)x * C * I, wb, CB16(dy_perm) + r0 * C,
                     A + r0 * I, CB16(w2) + (size_t)x * C * I, &gq, &iq, rows, don ? n8 : 0,
                     won ? n8 : 0, I, C, 0))
            return;
    }
    cuda_swiglu_prob_bwd_in(be, dH1, dH3, dp_perm, dA, H1, H3, p_perm, rows_all, I);
    for (int x = 0; x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x], n8 = fp8_rows(be, rows);
        int64_t nd = don ? n8 : 0, nw = won ? n8 : 0;
        if (rows == 0)
            continue;
        const bf16 *X = CB16(x_perm) + r0 * C;
        bf16 *DX = B16(dx_perm) + r0 * C;
        if (proj_bwd(be, op, DX, 0.f, dw1 + (size_t)x * I * C, wb, dH1 + r0 * I, X,
                     CB16(w1) + (size_t)x * I * C, &gq, &iq, rows, nd, nw, C, I, 0) ||
            proj_bwd(be, op, DX, 1.f, dw3 + (size_t)x * I * C, wb, dH3 + r0 * I, X,
                     CB16(w3) + (size_t)x * I * C, &gq, &iq, rows, nd, nw, C, I, 1))
            return;
    }
}

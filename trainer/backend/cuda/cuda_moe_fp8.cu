/* moekit CUDA backend: the expert FFN in FP8 (precision fp8_block on Hopper,
 * mxfp8 on Blackwell; the two differ in the quantisers, cuda_fp8_ops.h).
 * For fp8_block: same loop over the local experts as the bf16 path
 * (cuda_moe.cu), with every expert GEMM an E4M3 GEMM through cuBLASLt
 * (lowp/fp8_gemm.h): weights in 128x128 blocks, activations and
 * gradients in 1x128 tiles along each GEMM's contraction (the operands by
 * GEMM: cuda_fp8_ops.h), fp32 accumulation, bf16 outputs, fp32 weight
 * gradients accumulated in place.
 *
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
 * the forward's GEMMs write one chunk of an expert's rows in bf16 into the
 * backward's dH1 / dH3 scratch, SwiGLU reads that and writes what is kept,
 * and the down projection follows, chunk by chunk (cuda_fp8_fwd_chunked);
 * where the width does not allow the SwiGLU kernel to write the codes, the
 * pass's bf16 h1, h3 are made first and the quantiser keeps them; the backward's
 * SwiGLU kernels read the codes themselves (no bf16 copy is made). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lowp/fp8.h"
#include "../../lowp/fp8_gemm.h"
#include "../../lowp/lowp_cuda.h"
#include "../route_plan.h"
#include "cuda_fp8_ops.h"

#define B16(p) ((bf16 *)(p))
#define CB16(p) ((const bf16 *)(p))
#define U16(p) ((const uint16_t *)(p))

/* ---- the saved SwiGLU inputs ---------------------------------------------------- */

int cuda_fp8_saved(moe_backend *be)
{
    return CTX(be)->expert_recipe->saves_e4m3_swiglu_in && CTX(be)->fp8_saved_on;
}

void cuda_set_fp8_saved_activations(moe_backend *be, int on) { CTX(be)->fp8_saved_on = on != 0; }

static size_t saved_codes_bytes(size_t rows, int I) { return lowp_fp8blk_saved_codes_bytes(rows, I); }

size_t cuda_expert_saved_bytes(moe_backend *be, size_t rows, int I)
{
    if (!cuda_fp8_saved(be))
        return rows * I * sizeof(bf16);
    return lowp_fp8blk_saved_bytes(rows, I);
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

/* rows r0.. of a saved h (the E4M3 scales are column-major at stride ld) */
static cuda_swiglu_in swiglu_rows(cuda_swiglu_in v, int64_t r0, int I)
{
    if (v.h)
        v.h += r0 * I;
    else
        v.q += r0 * I, v.s += r0;
    return v;
}

/* ---- forward -------------------------------------------------------------------- */

/* The chunked forward (cuda_fp8_fwd_chunked): per expert, its three weights
 * quantised once (w1 in S_W, w3 in S_WT, w2 in S_Q: the backward uses S_Q's
 * transposed slots only), then each chunk of expert_chunk_rows rows through
 * the up projections into one chunk of bf16 h1, h3, the SwiGLU x probability
 * (a chunk of a, the kept E4M3 h1, h3 at the chunk's rows) and the down
 * projection. The rows an FP8 GEMM cannot take (a chunk's last rows % 16)
 * go through the bf16 GEMMs, as in the unchunked path. */
static void experts_fwd_fp8_chunked(moe_backend *be, const char *op, act *y_perm, act *h1,
                                    act *h3, const act *x_perm, const real *p_perm,
                                    const act *w1, const act *w3, const act *w2,
                                    const moe_route_plan *plan, int C, int I)
{
    const size_t rows_all = plan->n_rows, most = cuda_expert_bwd_rows(be, plan);
    const int on = CTX(be)->fp8_gemms & MOE_FP8_FPROP;
    bf16 *H1 = (bf16 *)cuda_scratch(be, 5, cuda_fp8_h_bf16_bytes(most, I));
    bf16 *H3 = (bf16 *)cuda_scratch(be, 6, cuda_fp8_h_bf16_bytes(most, I));
    bf16 *A = cuda_expert_swiglu_scratch(be, plan, I);
    q8 xq = fp8_act_scratch(be, S_P, CTX(be)->fp8_chunk_rows, C > I ? C : I, 1, 0);
    if (!H1 || !H3 || !A || !fp8_q8_ok(&xq, 1, 0))
        return;
    const size_t ld = lowp_fp8blk_1x128_ld(rows_all);
    const int64_t ech = CTX(be)->expert_chunk_rows, fch = CTX(be)->fp8_chunk_rows;
    for (int x = 0; x < plan->n_experts; x++) {
        const int64_t count = plan->expert_count[x];
        if (count == 0)
            continue; /* an idle expert costs nothing */
        const bf16 *W1 = CB16(w1) + (size_t)x * I * C, *W3 = CB16(w3) + (size_t)x * I * C;
        const bf16 *W2 = CB16(w2) + (size_t)x * C * I;
        lowp_fp8_operand q1 = {0}, q3 = {0}, q2 = {0};
        if (on && fp8_rows(be, count) &&
            (fp8_quant_weight(be, op, W1, I, C, 0, S_W, &q1) ||
             fp8_quant_weight(be, op, W3, I, C, 0, S_WT, &q3) ||
             fp8_quant_weight(be, op, W2, C, I, 0, S_Q, &q2)))
            return;
        for (int64_t e0 = 0; e0 < count; e0 += ech) {
            const int64_t r0 = plan->expert_offset[x] + e0, rows = cuda_chunk_len(count, e0, ech);
            const int64_t n8 = on ? fp8_rows(be, rows) : 0;
            const bf16 *X = CB16(x_perm) + r0 * C;
            for (int64_t c0 = 0; c0 < n8; c0 += fch) {
                const int64_t cn = fp8_chunk_len(be, n8, c0);
                if (fp8_quant_act(be, op, &xq, X + c0 * C, cn, C))
                    return;
                fp8_gemm8(be, op, I, (int)cn, C, q1.codes, q1.scales, q1.kind, xq.codes, xq.scales,
                          H1 + c0 * I, 0, 0.f);
                fp8_gemm8(be, op, I, (int)cn, C, q3.codes, q3.scales, q3.kind, xq.codes, xq.scales,
                          H3 + c0 * I, 0, 0.f);
            }
            if (rows > n8) {
                const int r = (int)(rows - n8);
                cuda_gemm_xwT(be, H1 + n8 * I, 0, X + n8 * C, W1, r, C, I, 0.f);
                cuda_gemm_xwT(be, H3 + n8 * I, 0, X + n8 * C, W3, r, C, I, 0.f);
            }
            cuda_fp8_save s1 = {(uint8_t *)h1 + r0 * I, saved_scales(h1, rows_all, I) + r0, ld},
                          s3 = {(uint8_t *)h3 + r0 * I, saved_scales(h3, rows_all, I) + r0, ld};
            if (cuda_swiglu_prob_save8(be, A, H1, H3, p_perm + r0, (size_t)rows, I, s1, s3)) {
                cuda_note(be, op, "the SwiGLU kernel does not take this width or alignment "
                                  "(cuda_fp8_fwd_chunked said it would)");
                return;
            }
            for (int64_t c0 = 0; c0 < n8; c0 += fch) {
                const int64_t cn = fp8_chunk_len(be, n8, c0);
                if (fp8_quant_act(be, op, &xq, A + c0 * I, cn, I))
                    return;
                fp8_gemm8(be, op, C, (int)cn, I, q2.codes, q2.scales, q2.kind, xq.codes, xq.scales,
                          B16(y_perm) + (r0 + c0) * C, 0, 0.f);
            }
            if (rows > n8)
                cuda_gemm_xwT(be, B16(y_perm) + (r0 + n8) * C, 0, A + n8 * I, W2, (int)(rows - n8),
                              I, C, 0.f);
        }
    }
}

/* The whole-pass forward's state, shared by its steps below. */
typedef struct {
    moe_backend *be;
    const char *op;
    int C, I;
    size_t rows_all;
    int on;         /* fprop in FP8 (runtime.fp8_gemms) */
    int mx_fused;   /* SwiGLU x p writes the down projection's E4M3 copy (the row's
                       fused_swiglu_quant; mxfp8 keeps no E4M3 h, so never with saved8) */
    int fused_save; /* the SwiGLU kernel writes the kept E4M3 h1, h3 as it reads them */
    bf16 *H1, *H3;  /* h1, h3 in bf16: the model's, or scratch where they are kept in E4M3 */
    q8 xq;          /* one chunk of an activation's E4M3 copy */
} fwd8_pass;

/* Step 1: h1 = x w1^T and h3 = x w3^T for every expert, its FP8 rows
 * chunk by chunk, the rest in bf16. */
static int fwd8_gate_up(fwd8_pass *f, const act *x_perm, const act *w1, const act *w3,
                        const moe_route_plan *plan)
{
    moe_backend *be = f->be;
    const int C = f->C, I = f->I;
    for (int x = 0; x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        int64_t n8 = f->on ? fp8_rows(be, rows) : 0;
        if (rows == 0)
            continue;
        const bf16 *X = CB16(x_perm) + r0 * C;
        const bf16 *W1 = CB16(w1) + (size_t)x * I * C, *W3 = CB16(w3) + (size_t)x * I * C;
        if (n8) {
            lowp_fp8_operand q1, q3;
            if (fp8_quant_weight(be, f->op, W1, I, C, 0, S_W, &q1) ||
                fp8_quant_weight(be, f->op, W3, I, C, 0, S_WT, &q3))
                return -1;
            for (int64_t c0 = 0; c0 < n8; c0 += CTX(be)->fp8_chunk_rows) {
                int64_t cn = fp8_chunk_len(be, n8, c0);
                if (fp8_quant_act(be, f->op, &f->xq, X + c0 * C, cn, C))
                    return -1;
                fp8_gemm8(be, f->op, I, (int)cn, C, q1.codes, q1.scales, q1.kind, f->xq.codes,
                          f->xq.scales, f->H1 + (r0 + c0) * I, 0, 0.f);
                fp8_gemm8(be, f->op, I, (int)cn, C, q3.codes, q3.scales, q3.kind, f->xq.codes,
                          f->xq.scales, f->H3 + (r0 + c0) * I, 0, 0.f);
            }
        }
        if (rows > n8) {
            int r = (int)(rows - n8);
            cuda_gemm_xwT(be, f->H1 + (r0 + n8) * I, 0, X + n8 * C, W1, r, C, I, 0.f);
            cuda_gemm_xwT(be, f->H3 + (r0 + n8) * I, 0, X + n8 * C, W3, r, C, I, 0.f);
        }
    }
    return 0;
}

/* Step 2, where h1, h3 are kept in E4M3 and the SwiGLU kernel cannot
 * write them: the quantiser takes every row. */
static int fwd8_keep_all(fwd8_pass *f, act *h1, act *h3)
{
    return save_fp8(f->be, f->op, h1, f->H1, f->rows_all, f->I) ||
                   save_fp8(f->be, f->op, h3, f->H3, f->rows_all, f->I)
               ? -1
               : 0;
}

/* Step 3: A = p SwiGLU(h1, h3) for rows r0 .. r0 + rows, writing the kept
 * E4M3 h1, h3 on the way where the kernel can (else step 2 for every row,
 * once); with mx_fused step 4 does the SwiGLU itself. */
static int fwd8_swiglu(fwd8_pass *f, bf16 *A, act *h1, act *h3, const real *p_perm, int64_t r0,
                       int64_t rows)
{
    const int I = f->I;
    if (f->fused_save) {
        const size_t ld = lowp_fp8blk_1x128_ld(f->rows_all);
        cuda_fp8_save s1 = {(uint8_t *)h1 + r0 * I, saved_scales(h1, f->rows_all, I) + r0, ld},
                      s3 = {(uint8_t *)h3 + r0 * I, saved_scales(h3, f->rows_all, I) + r0, ld};
        if (cuda_swiglu_prob_save8(f->be, A, f->H1 + r0 * I, f->H3 + r0 * I, p_perm + r0,
                                   (size_t)rows, I, s1, s3)) {
            /* this shape is not the kernel's: the quantiser takes every row now */
            f->fused_save = 0;
            if (fwd8_keep_all(f, h1, h3))
                return -1;
        }
    }
    if (!f->fused_save && !f->mx_fused)
        cuda_swiglu_prob(f->be, A, f->H1 + r0 * I, f->H3 + r0 * I, p_perm + r0, (size_t)rows, I);
    return 0;
}

/* Step 4: y = A w2^T for rows r0 .. r0 + rows of one expert (w2's operand
 * q2), its FP8 rows chunk by chunk, the rest in bf16. */
static int fwd8_down(fwd8_pass *f, act *y_perm, bf16 *A, const bf16 *W2,
                     const lowp_fp8_operand *q2, const real *p_perm, int64_t r0, int64_t rows)
{
    moe_backend *be = f->be;
    const int C = f->C, I = f->I;
    const int64_t n8 = f->on ? fp8_rows(be, rows) : 0;
    for (int64_t c0 = 0; c0 < n8; c0 += CTX(be)->fp8_chunk_rows) {
        int64_t cn = fp8_chunk_len(be, n8, c0);
        const size_t o = (size_t)(r0 + c0) * I;
        if (f->mx_fused ? fp8_swiglu_mx(be, f->op, &f->xq, A + c0 * I, f->H1 + o,
                                        f->H3 + o, p_perm + r0 + c0, cn, I)
                        : fp8_quant_act(be, f->op, &f->xq, A + c0 * I, cn, I))
            return -1;
        fp8_gemm8(be, f->op, C, (int)cn, I, q2->codes, q2->scales, q2->kind, f->xq.codes,
                  f->xq.scales, B16(y_perm) + (r0 + c0) * C, 0, 0.f);
    }
    if (rows > n8) {
        const size_t o = (size_t)(r0 + n8) * I;
        if (f->mx_fused)
            cuda_swiglu_prob(be, A + n8 * I, f->H1 + o, f->H3 + o, p_perm + r0 + n8,
                             (size_t)(rows - n8), I);
        cuda_gemm_xwT(be, B16(y_perm) + (r0 + n8) * C, 0, A + n8 * I, W2, (int)(rows - n8), I, C,
                      0.f);
    }
    return 0;
}

void cuda_experts_fwd_fp8(moe_backend *be, act *y_perm, act *h1, act *h3, act *a,
                          const act *x_perm, const real *p_perm, const act *w1, const act *w3,
                          const act *w2, const moe_route_plan *plan, int C, int I)
{
    char name[48];
    fwd8_pass f;
    memset(&f, 0, sizeof f);
    f.be = be, f.op = fp8_op_name(be, name, sizeof name, "experts_fwd"), f.C = C, f.I = I;
    f.rows_all = plan->n_rows;
    const int saved8 = cuda_fp8_saved(be);
    f.on = CTX(be)->fp8_gemms & MOE_FP8_FPROP;
    f.mx_fused = CTX(be)->expert_recipe->fused_swiglu_quant && f.on;
    f.H1 = B16(h1), f.H3 = B16(h3);
    if (f.rows_all == 0)
        return;
    if (cuda_fp8_fwd_chunked(saved8, CTX(be)->fp8_fused_save, I)) {
        experts_fwd_fp8_chunked(be, f.op, y_perm, h1, h3, x_perm, p_perm, w1, w3, w2, plan, C, I);
        return;
    }
    if (saved8) {
        f.H1 = (bf16 *)cuda_scratch(be, 5, cuda_fp8_h_bf16_bytes(f.rows_all, I));
        f.H3 = (bf16 *)cuda_scratch(be, 6, cuda_fp8_h_bf16_bytes(f.rows_all, I));
        if (!f.H1 || !f.H3)
            return;
    }
    f.xq = fp8_act_scratch(be, S_P, CTX(be)->fp8_chunk_rows, C > I ? C : I, 1, 0);
    if (!fp8_q8_ok(&f.xq, 1, 0) || fwd8_gate_up(&f, x_perm, w1, w3, plan))
        return;
    /* a = p SwiGLU(h1, h3) an expert chunk at a time (into the backward's `a`
     * scratch: the model gives none, cuda_expert_swiglu_rows), each chunk
     * straight into the down projection. */
    bf16 *A = cuda_expert_swiglu_scratch(be, plan, I);
    if (!A)
        return;
    (void)a;
    f.fused_save = saved8 && CTX(be)->fp8_fused_save;
    if (saved8 && !f.fused_save && fwd8_keep_all(&f, h1, h3))
        return;
    const int64_t ech = CTX(be)->expert_chunk_rows;
    for (int x = 0; x < plan->n_experts; x++) {
        const bf16 *W2 = CB16(w2) + (size_t)x * C * I;
        lowp_fp8_operand q2;
        if (f.on && fp8_rows(be, plan->expert_count[x]) &&
            fp8_quant_weight(be, f.op, W2, C, I, 0, S_W, &q2))
            return;
        for (int64_t e0 = 0; e0 < plan->expert_count[x]; e0 += ech) {
            const int64_t r0 = plan->expert_offset[x] + e0;
            const int64_t rows = cuda_chunk_len(plan->expert_count[x], e0, ech);
            if (fwd8_swiglu(&f, A, h1, h3, p_perm, r0, rows) ||
                fwd8_down(&f, y_perm, A, W2, &q2, p_perm, r0, rows))
                return;
        }
    }
}

/* ---- backward ------------------------------------------------------------------- */

void cuda_experts_bwd_fp8(moe_backend *be, act *dx_perm, real *dp_perm, real *dw1, real *dw3,
                          real *dw2, const act *dy_perm, const act *x_perm, const act *h1,
                          const act *h3, const real *p_perm, const act *w1, const act *w3,
                          const act *w2, const moe_route_plan *plan, int C, int I,
                          int dw_overwrite)
{
    char name[48];
    const char *op = fp8_op_name(be, name, sizeof name, "experts_bwd");
    const float wb = dw_overwrite ? 0.f : 1.f;
    size_t rows_all = plan->n_rows;
    const int don = CTX(be)->fp8_gemms & MOE_FP8_DGRAD, won = CTX(be)->fp8_gemms & MOE_FP8_WGRAD;
    size_t wide = C > I ? C : I;
    cuda_expert_bwd_bufs b;
    if (rows_all == 0)
        return;
    /* h1, h3 read straight from what the forward kept (E4M3 or bf16) */
    const cuda_swiglu_in H1 = saved_in(be, h1, rows_all, I), H3 = saved_in(be, h3, rows_all, I);
    /* one expert at a time, its rows expert_chunk_rows at a time, as the bf16
     * path: a, da, dh1, dh3 for one chunk (a multiple of 128 rows, so a chunk
     * cuts none of the wgrad operands' 1x128 tiles along the tokens) */
    const int64_t ech = CTX(be)->expert_chunk_rows;
    size_t most = cuda_expert_bwd_rows(be, plan);
    if (most == 0 || cuda_expert_bwd_alloc(be, &b, most, I))
        return;
    size_t ch = (size_t)CTX(be)->fp8_chunk_rows;
    q8 gq = fp8_act_scratch(be, S_P, ch, wide, 1, 1); /* the gradient: both copies */
    q8 iq = fp8_act_scratch(be, S_Q, ch, wide, 0, 1); /* the GEMM input: transposed only */
    if (!fp8_q8_ok(&gq, 1, 1) || !fp8_q8_ok(&iq, 0, 1))
        return;
    for (int x = 0; x < plan->n_experts; x++)
        for (int64_t c0 = 0; c0 < plan->expert_count[x]; c0 += ech) {
            const int64_t r0 = plan->expert_offset[x] + c0;
            const int64_t rows = cuda_chunk_len(plan->expert_count[x], c0, ech);
            const int64_t n8 = fp8_rows(be, rows), nd = don ? n8 : 0, nw = won ? n8 : 0;
            const float wbc = c0 ? 1.f : wb;
            const cuda_swiglu_in h1x = swiglu_rows(H1, r0, I), h3x = swiglu_rows(H3, r0, I);
            cuda_swiglu_prob_in(be, b.a, h1x, h3x, p_perm + r0, (size_t)rows, I);
            if (fp8_proj_bwd(be, op, b.da, 0.f, dw2 + (size_t)x * C * I, wbc,
                             CB16(dy_perm) + r0 * C, b.a, CB16(w2) + (size_t)x * C * I, &gq, &iq,
                             rows, nd, nw, I, C, 0))
                return;
            cuda_swiglu_prob_bwd_in(be, b.dh1, b.dh3, dp_perm + r0, b.da, h1x, h3x, p_perm + r0,
                                    (size_t)rows, I);
            const bf16 *X = CB16(x_perm) + r0 * C;
            bf16 *DX = B16(dx_perm) + r0 * C;
            if (fp8_proj_bwd(be, op, DX, 0.f, dw1 + (size_t)x * I * C, wbc, b.dh1, X,
                             CB16(w1) + (size_t)x * I * C, &gq, &iq, rows, nd, nw, C, I, 0) ||
                fp8_proj_bwd(be, op, DX, 1.f, dw3 + (size_t)x * I * C, wbc, b.dh3, X,
                             CB16(w3) + (size_t)x * I * C, &gq, &iq, rows, nd, nw, C, I, 1))
                return;
        }
}

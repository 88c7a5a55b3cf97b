/* moekit CUDA backend: the attention projections (q, k, v, o: matmul_fwd /
 * matmul_bwd) in the experts' low precision, with precision.layers=all.
 * The router and the LM head stay in bf16: they feed a softmax over a
 * handful of experts and the loss, where FP8's 3-bit mantissa costs most and
 * the GEMMs are small (router) or better kept exact (the logits).
 *   fp8_block / mxfp8   the recipe's E4M3 GEMMs (cuda_fp8_ops.h) over the
 *                       token rows in chunks of fp8_chunk_rows; the last
 *                       rows % 16 (32) in bf16, as for an expert
 *   mxfp8_emulated      every operand through the MXFP8 quantiser and back
 *                       to bf16 along its GEMM's contraction, bf16 GEMMs
 * Weights are quantised at every use, like the experts': four weights a
 * layer, a few MB each, against activations of thousands of rows. */
#include <string.h>

#include "cuda_fp8_ops.h"

#define B16(p) ((bf16 *)(p))
#define CB16(p) ((const bf16 *)(p))

static int emulated(moe_backend *be)
{
    return CTX(be)->expert_recipe->gemms == MOE_GEMMS_E4M3_EMULATED;
}

static void fwd_emulated(moe_backend *be, bf16 *out, const bf16 *in, const bf16 *w, int N, int IC,
                         int OC)
{
    static const char op[] = "matmul_fwd (mxfp8_emulated)";
    const bf16 *Xq = cuda_mxemu_fake(be, op, MXEMU_S_ROW, in, N, IC, 0);
    const bf16 *Wq = Xq ? cuda_mxemu_fake(be, op, MXEMU_S_W, w, OC, IC, 0) : NULL;
    if (Wq)
        cuda_gemm_xwT(be, out, 0, Xq, Wq, N, IC, OC, 0.f);
}

void cuda_linear_fwd_lowp(moe_backend *be, act *out, const act *in, const act *w, int N, int IC,
                          int OC)
{
    if (N == 0)
        return;
    if (emulated(be)) {
        fwd_emulated(be, B16(out), CB16(in), CB16(w), N, IC, OC);
        return;
    }
    char name[48];
    const char *op = fp8_op_name(be, name, sizeof name, "matmul_fwd");
    const int64_t n8 = CTX(be)->fp8_gemms & MOE_FP8_FPROP ? fp8_rows(be, N) : 0;
    bf16 *Y = B16(out);
    const bf16 *X = CB16(in);
    if (n8) {
        lowp_fp8_operand qw;
        q8 xq = fp8_act_scratch(be, S_P, (size_t)fp8_chunk_len(be, n8, 0), IC, 1, 0);
        if (!fp8_q8_ok(&xq, 1, 0) || fp8_quant_weight(be, op, CB16(w), OC, IC, 0, S_W, &qw))
            return;
        for (int64_t c0 = 0; c0 < n8; c0 += CTX(be)->fp8_chunk_rows) {
            int64_t cn = fp8_chunk_len(be, n8, c0);
            if (fp8_quant_act(be, op, &xq, X + c0 * IC, cn, IC))
                return;
            fp8_gemm8(be, op, OC, (int)cn, IC, qw.codes, qw.scales, qw.kind, xq.codes, xq.scales,
                      Y + c0 * OC, 0, 0.f);
        }
    }
    if (N > n8)
        cuda_gemm_xwT(be, Y + n8 * OC, 0, X + n8 * IC, CB16(w), (int)(N - n8), IC, OC, 0.f);
}

void cuda_linear_bwd_lowp(moe_backend *be, act *din, real *dw, const act *dout, const act *in,
                          const act *w, int N, int IC, int OC, int accumulate)
{
    const float dx_beta = accumulate ? 1.f : 0.f;
    if (N == 0)
        return;
    if (emulated(be)) {
        static const char op[] = "matmul_bwd (mxfp8_emulated)";
        const bf16 *DYr = cuda_mxemu_fake(be, op, MXEMU_S_ROW, CB16(dout), N, OC, 0);
        const bf16 *Xc = DYr ? cuda_mxemu_fake(be, op, MXEMU_S_COL_B, CB16(in), N, IC, 1) : NULL;
        if (Xc)
            cuda_mxemu_proj_bwd(be, op, B16(din), dx_beta, dw, 1.f, DYr, CB16(dout), Xc, CB16(w),
                                N, IC, OC);
        return;
    }
    char name[48];
    const char *op = fp8_op_name(be, name, sizeof name, "matmul_bwd");
    const int mask = CTX(be)->fp8_gemms;
    const int64_t n8 = fp8_rows(be, N);
    const int64_t nd = din && (mask & MOE_FP8_DGRAD) ? n8 : 0, nw = mask & MOE_FP8_WGRAD ? n8 : 0;
    const size_t rows = (size_t)fp8_chunk_len(be, nd > nw ? nd : nw, 0),
                 wide = IC > OC ? IC : OC;
    q8 gq = {NULL, NULL, NULL, NULL}, iq = {NULL, NULL, NULL, NULL};
    if (nd || nw) {
        gq = fp8_act_scratch(be, S_P, rows, wide, 1, 1); /* the gradient: both copies */
        iq = fp8_act_scratch(be, S_Q, rows, wide, 0, 1); /* the input: transposed only */
        if (!fp8_q8_ok(&gq, 1, 1) || !fp8_q8_ok(&iq, 0, 1))
            return;
    }
    fp8_proj_bwd(be, op, B16(din), dx_beta, dw, 1.f, CB16(dout), CB16(in), CB16(w), &gq, &iq, N,
                 nd, nw, IC, OC, 0);
}

extern "C" int cuda_set_linear_lowp(moe_backend *be, int on, const int *widths, int n_widths,
                                    moe_err *e)
{
    cuda_ctx *c = CTX(be);
    c->linear_lowp = 0;
    if (!on)
        return 0;
    const moe_recipe *r = c->expert_recipe;
    const char *name = precision_name(r->precision);
    if (r->gemms == MOE_GEMMS_BF16)
        return moe_errf(e, "precision.layers=all: the experts run in bf16, so the attention "
                           "projections have no low precision to share");
    /* the E4M3 GEMMs' alignment along k and m (the emulation blocks any width) */
    const int align = r->align;
    for (int i = 0; i < n_widths; i++)
        if (widths[i] <= 0 || widths[i] % align)
            return moe_errf(e,
                            "precision.compute=%s with precision.layers=all needs the attention "
                            "projections' widths (hidden size, heads x head dim, kv heads x "
                            "head dim) to be multiples of %d; %d is not (set "
                            "precision.layers=experts)",
                            name, align, widths[i]);
    c->linear_lowp = 1;
    return 0;
}

/* moekit CUDA backend: the expert FFN in emulated MXFP8 (precision
 * mxfp8_emulated, any GPU). Every operand of every expert GEMM goes through
 * the MXFP8 quantiser and back to bf16 (lowp_cuda_mxfp8_fake_bf16, byte for
 * byte the C reference): exactly the values an MXFP8 GEMM multiplies on
 * Blackwell, in blocks of 32 along that GEMM's contraction, then the bf16
 * GEMMs of the bf16 path (fp32 accumulation). What MXFP8 training costs in
 * accuracy, measured on a GPU without MXFP8 tensor cores.
 *   fprop  y = x w^T     x rowwise (along in),  w rowwise (along in)
 *   dgrad  dx = dy w     dy rowwise (along out), w columnwise (down out)
 *   wgrad  dw += dy^T x  dy and x columnwise (down the expert's rows)
 * Columnwise copies of activations are made per expert, so no 32-row block
 * straddles two experts. Speed is not its purpose: each quantisation is one
 * extra pass over its tensor.
 * Reached through set_expert_precision(MOE_PREC_MXFP8_EMULATED) by the GPU tests
 * (test_cuda_ops); moe-train offers it once those have passed on a GPU. */
#include "../../lowp/lowp_cuda.h"
#include "../route_plan.h"
#include "cuda_internal.h"

#define B16(p) ((bf16 *)(p))
#define CB16(p) ((const bf16 *)(p))

enum { S_ROW = MXEMU_S_ROW, S_COL_A, S_COL_B, S_ROW_B, S_W = MXEMU_S_W };

const bf16 *cuda_mxemu_fake(moe_backend *be, const char *op, int slot, const bf16 *x, size_t rows,
                        size_t cols, int colwise)
{
    bf16 *y = (bf16 *)cuda_scratch(be, slot, rows * cols * sizeof(bf16));
    moe_err e = {{0}};
    if (!y)
        return NULL;
    if (lowp_cuda_mxfp8_fake_bf16((const uint16_t *)x, rows, cols, colwise, (uint16_t *)y,
                                  CTX(be)->stream, &e)) {
        cuda_note(be, op, e.msg);
        return NULL;
    }
    return y;
}

/* grow the slots once to the layer's largest need: no reallocation between experts */
static int reserve(moe_backend *be, size_t rows_all, int C, int I)
{
    size_t wide = (size_t)(C > I ? C : I) * sizeof(bf16);
    for (int s = S_ROW; s <= S_ROW_B; s++)
        if (!cuda_scratch(be, s, rows_all * wide))
            return -1;
    return cuda_scratch(be, S_W, (size_t)C * I * sizeof(bf16)) ? 0 : -1;
}

void cuda_experts_fwd_mxemu(moe_backend *be, act *y_perm, act *h1, act *h3, act *a,
                            const act *x_perm, const real *p_perm, const act *w1, const act *w3,
                            const act *w2, const moe_route_plan *plan, int C, int I)
{
    static const char op[] = "experts_fwd (mxfp8_emulated)";
    size_t rows_all = plan->n_rows;
    if (rows_all == 0 || reserve(be, rows_all, C, I))
        return;
    const bf16 *Xq = cuda_mxemu_fake(be, op, S_ROW, CB16(x_perm), rows_all, C, 0);
    for (int x = 0; Xq && x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        if (rows == 0)
            continue;
        const bf16 *W = cuda_mxemu_fake(be, op, S_W, CB16(w1) + (size_t)x * I * C, I, C, 0);
        if (!W)
            return;
        cuda_gemm_xwT(be, B16(h1) + r0 * I, 0, Xq + r0 * C, W, (int)rows, C, I, 0.f);
        if (!(W = cuda_mxemu_fake(be, op, S_W, CB16(w3) + (size_t)x * I * C, I, C, 0)))
            return;
        cuda_gemm_xwT(be, B16(h3) + r0 * I, 0, Xq + r0 * C, W, (int)rows, C, I, 0.f);
    }
    /* a: the model gives none (cuda_expert_swiglu_rows); S_ROW_B is free until the backward */
    bf16 *A = a ? B16(a) : (bf16 *)cuda_scratch(be, S_ROW_B, rows_all * I * sizeof(bf16));
    if (!A)
        return;
    cuda_swiglu_prob(be, A, CB16(h1), CB16(h3), p_perm, rows_all, I);
    const bf16 *Aq = cuda_mxemu_fake(be, op, S_ROW, A, rows_all, I, 0);
    for (int x = 0; Aq && x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        if (rows == 0)
            continue;
        const bf16 *W = cuda_mxemu_fake(be, op, S_W, CB16(w2) + (size_t)x * C * I, C, I, 0);
        if (!W)
            return;
        cuda_gemm_xwT(be, B16(y_perm) + r0 * C, 0, Aq + r0 * I, W, (int)rows, I, C, 0.f);
    }
}

int cuda_mxemu_proj_bwd(moe_backend *be, const char *op, bf16 *dx, float dx_beta, float *dw,
                    float dw_beta, const bf16 *dy_row, const bf16 *dy, const bf16 *x_col, const bf16 *w,
                    int64_t rows, int in, int out)
{
    if (dx) {
        const bf16 *Wc = cuda_mxemu_fake(be, op, S_W, w, out, in, 1);
        if (!Wc)
            return -1;
        cuda_gemm_dyw(be, dx, dy_row, Wc, (int)rows, in, out, dx_beta);
    }
    const bf16 *DYc = cuda_mxemu_fake(be, op, S_COL_A, dy, rows, out, 1);
    if (!DYc)
        return -1;
    cuda_gemm_dyTx(be, dw, DYc, x_col, (int)rows, in, out, dw_beta);
    return 0;
}

void cuda_experts_bwd_mxemu(moe_backend *be, act *dx_perm, real *dp_perm, real *dw1, real *dw3,
                            real *dw2, const act *dy_perm, const act *x_perm, const act *h1,
                            const act *h3, const real *p_perm, const act *w1, const act *w3,
                            const act *w2, const moe_route_plan *plan, int C, int I,
                            int dw_overwrite)
{
    static const char op[] = "experts_bwd (mxfp8_emulated)";
    const float wb = dw_overwrite ? 0.f : 1.f;
    size_t rows_all = plan->n_rows;
    if (rows_all == 0 || reserve(be, rows_all, C, I))
        return;
    cuda_expert_bwd_bufs b;
    if (cuda_expert_bwd_prepare(be, &b, h1, h3, p_perm, rows_all, I))
        return;
    bf16 *A = b.a, *dA = b.da, *dH1 = b.dh1, *dH3 = b.dh3;
    const bf16 *DYr = cuda_mxemu_fake(be, op, S_ROW, CB16(dy_perm), rows_all, C, 0);
    for (int x = 0; DYr && x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        if (rows == 0)
            continue;
        const bf16 *Ac = cuda_mxemu_fake(be, op, S_COL_B, A + r0 * I, rows, I, 1);
        if (!Ac || cuda_mxemu_proj_bwd(be, op, dA + r0 * I, 0.f, dw2 + (size_t)x * C * I, wb, DYr + r0 * C,
                            CB16(dy_perm) + r0 * C, Ac, CB16(w2) + (size_t)x * C * I, rows, I, C))
            return;
    }
    cuda_swiglu_prob_bwd(be, dH1, dH3, dp_perm, dA, CB16(h1), CB16(h3), p_perm, rows_all, I);
    const bf16 *G1 = cuda_mxemu_fake(be, op, S_ROW, dH1, rows_all, I, 0);
    const bf16 *G3 = cuda_mxemu_fake(be, op, S_ROW_B, dH3, rows_all, I, 0);
    for (int x = 0; G1 && G3 && x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        if (rows == 0)
            continue;
        const bf16 *Xc = cuda_mxemu_fake(be, op, S_COL_B, CB16(x_perm) + r0 * C, rows, C, 1);
        bf16 *DX = B16(dx_perm) + r0 * C;
        if (!Xc ||
            cuda_mxemu_proj_bwd(be, op, DX, 0.f, dw1 + (size_t)x * I * C, wb, G1 + r0 * I, dH1 + r0 * I, Xc,
                     CB16(w1) + (size_t)x * I * C, rows, C, I) ||
            cuda_mxemu_proj_bwd(be, op, DX, 1.f, dw3 + (size_t)x * I * C, wb, G3 + r0 * I, dH3 + r0 * I, Xc,
                     CB16(w3) + (size_t)x * I * C, rows, C, I))
            return;
    }
}

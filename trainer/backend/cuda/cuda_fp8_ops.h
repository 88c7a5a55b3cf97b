/* moekit CUDA backend: the building blocks shared by its FP8 GEMM paths
 * (the expert FFN, cuda_moe_fp8.cu; the attention projections,
 * cuda_linear_lowp.cu), in cuda_fp8_ops.cu.
 *
 * The two recipes differ only in how an operand is quantised:
 *   fp8_block (Hopper): fp32 scales, 1x128 for activations, 128x128 for
 *     weights; the transposed copies straight from the quantisers.
 *   mxfp8 (Blackwell): E8M0 scales per 32 along k, swizzled for cuBLASLt,
 *     weights and activations alike; the copy blocked down the columns is
 *     transposed afterwards, so every GEMM is K-major ("TN") as well.
 * Operand by GEMM of a linear layer (w [out, in], x [rows, in], dy [rows, out]):
 *   fprop  y  = x w^T   a = w    (128x128)   b = x    (1x128 along in)
 *   dgrad  dx = dy w    a = w^T  (128x128)   b = dy   (1x128 along out)
 *   wgrad  dw += dy^T x a = x^T  (1x128 along rows) b = dy^T (1x128 along rows)
 * Rows enter the FP8 GEMMs in multiples of 16 (32 for mxfp8: fp8_rows); the
 * caller sends the rest through the bf16 GEMMs. */
#ifndef MOE_CUDA_FP8_OPS_H
#define MOE_CUDA_FP8_OPS_H

#include "../../lowp/fp8_gemm.h"
#include "cuda_internal.h"

/* scratch slots of the FP8 paths (cuda_internal.h: CUDA_SCRATCH_SLOTS):
 * S_W.. the weight operand (S_WT also mxfp8's untransposed codes on the
 * way), S_P.. and S_Q.. two activations' copies */
enum { S_W = 8, S_WS, S_WT, S_WTS, S_P, S_PS, S_PT, S_PTS, S_Q, S_QS, S_QT, S_QTS };

/* A quantised matrix as the GEMMs take it: the operand itself [outer, k]
 * and/or the transposed one [k, outer]. */
typedef struct {
    uint8_t *codes, *codes_t;
    void *scales, *scales_t;
} q8;

/* "op (recipe)": an FP8 op's name in messages, in buf (n bytes) */
const char *fp8_op_name(moe_backend *be, char *buf, size_t n, const char *op);
/* rows a GEMM takes in FP8 (a multiple of the scale block along tokens) */
int64_t fp8_rows(moe_backend *be, int64_t rows);
/* rows of the chunk starting at c0 of n8 FP8 rows (fp8_chunk_rows at most) */
int64_t fp8_chunk_len(moe_backend *be, int64_t n8, int64_t c0);
/* scratch for the copies of an activation of at most `rows` rows and `cols`
 * columns (either copy may be skipped); slots slot .. slot + 3. Check with
 * fp8_q8_ok: a NULL member means the allocation failed (noted). */
q8 fp8_act_scratch(moe_backend *be, int slot, size_t rows, size_t cols, int rowwise, int trans);
int fp8_q8_ok(const q8 *q, int rowwise, int trans);
/* the copies in q of x [rows, cols] bf16 (skipped copies NULL) */
int fp8_quant_act(moe_backend *be, const char *op, const q8 *q, const bf16 *x, size_t rows,
                  size_t cols);
/* mxfp8: a = bf16(silu(h1) h3 p) for `rows` rows and its rowwise copy in
 * q (the operand of the down projection), in one pass */
int fp8_swiglu_mx(moe_backend *be, const char *op, const q8 *q, bf16 *a, const bf16 *h1,
                  const bf16 *h3, const float *p, size_t rows, int I);
/* a weight w [out, in] as the operand w (k = in) into slots dst, dst + 1,
 * or, transposed, w^T (k = out) into S_W, S_WS */
int fp8_quant_weight(moe_backend *be, const char *op, const bf16 *w, size_t out, size_t in,
                     int transposed, int dst, lowp_fp8_operand *o);
/* out = b . a^T with a quantised as ak, b an activation copy of this recipe;
 * out bf16, or fp32 (out_fp32) with beta */
void fp8_gemm8(moe_backend *be, const char *op, int m, int n, int k, const uint8_t *ac,
               const void *as, lowp_blk_kind ak, const uint8_t *bc, const void *bs, void *out,
               int out_fp32, float beta);
/* One linear layer's backward over `rows` rows: dx (+)= dy w (skipped when
 * dx is NULL) and dw (+)= dy^T x, with dy [rows, out], x [rows, in],
 * w [out, in]. nd / nw: the rows the dgrad / wgrad GEMM takes in FP8 (0 or
 * fp8_rows), chunk by chunk through dyq (both copies of dy) and xq (x
 * transposed); the rest in bf16. x_ready: xq already holds x when its FP8
 * rows are one chunk (a second weight on the same x). */
int fp8_proj_bwd(moe_backend *be, const char *op, bf16 *dx, float dx_beta, float *dw,
                 float dw_beta, const bf16 *dy, const bf16 *xin, const bf16 *w, const q8 *dyq,
                 const q8 *xq, int64_t rows, int64_t nd, int64_t nw, int in, int out,
                 int x_ready);

#endif

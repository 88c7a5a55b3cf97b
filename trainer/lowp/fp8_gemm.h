/* moekit low precision: FP8 block-scaled GEMMs through cuBLASLt (Hopper's
 * 1x128 / 128x128 scaling, CUDA >= 12.9; compute capability 9.x).
 *
 * Both operands are E4M3 codes, K-major (row-major [outer, k]) as
 * lowp_fp8blk_1x128 / _128x128 write them (fp8.h gives the scale layouts),
 * because Hopper's FP8 tensor cores take only that ("TN") form. In row-major
 * terms one call computes
 *     out[n, m] = alpha * sum_k deq(b)[n, k] * deq(a)[m, k] + beta * out[n, m]
 * i.e. out = b . a^T, which is cuBLAS's column-major D[m, n] = A^T B. For a
 * linear layer y = x w^T (x [T, K], w [N, K]):
 *   fprop  y[T, N]  = x . w^T : a = w (128x128), b = x (1x128), m=N n=T k=K
 *   dgrad  dx[T, K] = dy . w  : a = w^T (128x128), b = dy (1x128), m=K n=T k=N
 *   wgrad  dw[N, K] = dy^T x  : a = x^T (1x128), b = dy^T (1x128), m=K n=N k=T
 * out is bf16 or fp32 (beta != 0 accumulates, e.g. into fp32 gradients).
 *
 * MXFP8 (both operands LOWP_MX_1X32, k a multiple of 32) is the same call.
 *
 * A handle keeps the cuBLASLt context, one workspace and the chosen
 * algorithm per shape, so a step with recurring shapes asks cuBLASLt's
 * heuristic only once per shape. Not thread-safe: one handle per stream. */
#ifndef MOE_LOWP_FP8_GEMM_H
#define MOE_LOWP_FP8_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "../../common/err.h"
#include "../../common/precision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The scaling of an operand: Hopper's fp32 block scales (1x128 along k,
 * 128x128), or MXFP8's E8M0 scale per 32 values along k in cuBLASLt's
 * swizzled 128x4 tiles (lowp_mx_swizzle_index; compute capability 10.x):
 * the recipe table's scale layouts (common/precision.h), so a recipe row's
 * act_scales / weight_scales is an operand's kind as it stands. */
typedef moe_scale_layout lowp_blk_kind;
#define LOWP_BLK_1X128 MOE_SCALES_FP32_1X128
#define LOWP_BLK_128X128 MOE_SCALES_FP32_128X128
#define LOWP_MX_1X32 MOE_SCALES_E8M0_1X32

typedef struct {
    const uint8_t *codes; /* [outer, k] E4M3, 16-byte aligned, k % 16 == 0 */
    const void *scales;   /* fp8.h layout for `kind`: float, or E8M0 bytes for LOWP_MX_1X32 */
    lowp_blk_kind kind;
} lowp_fp8_operand;

typedef enum { LOWP_OUT_BF16 = 0, LOWP_OUT_F32 = 1 } lowp_out_type;

typedef struct lowp_fp8_gemm lowp_fp8_gemm;

/* workspace_bytes of device memory for cuBLASLt (32 MiB is plenty). */
int lowp_fp8_gemm_create(lowp_fp8_gemm **g, size_t workspace_bytes, moe_err *e);
void lowp_fp8_gemm_destroy(lowp_fp8_gemm *g);

/* out (row-major [n, m], ld m) = alpha * b . a^T + beta * out, on `stream`.
 * m, n >= 1; k a multiple of 16; m a multiple of 8 for bf16 out, 4 for fp32
 * (16-byte rows). Returns -1 with a message naming the shape, the scale
 * modes and cuBLASLt's status when the library refuses the problem (no
 * algorithm for that combination on this GPU is the usual one). */
int lowp_fp8_gemm_run(lowp_fp8_gemm *g, cudaStream_t stream, int m, int n, int k,
                      const lowp_fp8_operand *a, const lowp_fp8_operand *b, void *out,
                      lowp_out_type out_type, float alpha, float beta, moe_err *e);

/* Number of distinct shapes planned so far (for tests and logs). */
int lowp_fp8_gemm_plans(const lowp_fp8_gemm *g);

#ifdef __cplusplus
}
#endif

#endif

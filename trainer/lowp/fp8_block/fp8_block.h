/* moekit low precision, FP8 block scaling: the reference quantiser
 * (fp8_block.c); the kernels beside it (fp8_block_kernels.cu) match it byte for byte.
 *
 * FP8 block scaling for Hopper (DeepSeek-V3; cuBLASLt VEC128_32F for 1x128,
 * BLK128x128_32F for 128x128)
 *   scale = amax / 448 in fp32 (no power of two), q = e4m3(v / scale); zero
 *   block: scale 1, codes 0x00; NaN block: scale NaN, codes 0x7F; infinity
 *   counts as FLT_MAX; scales are kept >= FLT_MIN. Partial blocks at the
 *   right or bottom edge are padded with zeros. Layouts: see lowp_fp8blk_*.
 */
#ifndef MOE_LOWP_FP8_BLOCK_H
#define MOE_LOWP_FP8_BLOCK_H

#include "../lowp_ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- FP8 block scaling for Hopper (fp8_block.c) -------------------------------- */

#define LOWP_FP8BLK 128

/* 1x128 (activations, gradients; cuBLASLt CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F).
 * For a K-major operand [outer, K] the fp32 scales are stored "outer-major":
 * [ceil(K/128), ld] with ld = round_up(outer, 4), scale (i, kb) at kb * ld + i,
 * the outer index contiguous: the scales of one K block for 128 consecutive
 * rows are one contiguous load, as the GEMM consumes them (DeepGEMM's TMA
 * does the same). It is the layout Transformer Engine hands cuBLASLt (its
 * GEMM-ready 1D format, [ceil(K/128), round_up(M, 4)]) and the one PyTorch's
 * _scaled_mm asks for ("1x128 blocks need scales to be outer-dim-major");
 * the 4-row padding keeps each K block's column 16-byte aligned. Checked
 * against those two implementations, not run through cuBLASLt here.
 * Padding entries are 0.0f.
 * lowp_fp8blk_1x128: blocks along the rows of x [rows, cols] (the operand is
 * x itself, outer = rows, K = cols): codes [rows, cols]. */
size_t lowp_fp8blk_1x128_ld(size_t outer);
size_t lowp_fp8blk_1x128_scales(size_t outer, size_t k); /* floats */
/* fp8_block's saved SwiGLU input of rows x I for the backward: the E4M3
 * codes (rounded up to 256 bytes), then the 1x128 scales. */
size_t lowp_fp8blk_saved_codes_bytes(size_t rows, size_t I);
size_t lowp_fp8blk_saved_bytes(size_t rows, size_t I);
void lowp_fp8blk_1x128(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes,
                       float *scales);
/* Blocks of 128 down the columns of x, written transposed: the operand x^T
 * [cols, rows] (outer = cols, K = rows), codes_t [cols, rows], scales in the
 * 1x128 layout of that operand. Equals lowp_fp8blk_1x128 of x^T (the wgrad
 * operands on Hopper, where FP8 GEMMs take only K-major A and B). */
void lowp_fp8blk_1x128_t(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes_t,
                         float *scales);
void lowp_fp8blk_dequant_1x128(const uint8_t *codes, const float *scales, size_t outer, size_t k,
                               float *out);

/* 128x128 (weights; cuBLASLt CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F).
 * For a K-major operand [outer, K]: scales [ceil(outer/128), ld] row-major
 * with ld = round_up(ceil(K/128), 4), scale (ob, kb) at ob * ld + kb, the K
 * block index contiguous (Transformer Engine's GEMM-ready 2D layout,
 * [ceil(M/128), round_up(ceil(K/128), 4)]; DeepSeek-V3's weight_scale_inv is
 * the same matrix without the padding). Padding entries are 0.0f. */
size_t lowp_fp8blk_128x128_ld(size_t k);
size_t lowp_fp8blk_128x128_scales(size_t outer, size_t k); /* floats */
void lowp_fp8blk_128x128(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes,
                         float *scales);
void lowp_fp8blk_dequant_128x128(const uint8_t *codes, const float *scales, size_t outer, size_t k,
                                 float *out);

#ifdef __cplusplus
}
#endif

#endif

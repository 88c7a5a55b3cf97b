/* moekit low precision, MXFP8: the reference quantiser (mxfp8.c) and
 * cuBLASLt's scale layout (mx_swizzle.c); the kernels beside them
 * (mxfp8_kernels.cu, swiglu_mxfp8.cu) match them byte for byte.
 *
 *   Blocks of 32 consecutive values: along a row for the rowwise copy (1x32),
 *   down a column for the columnwise copy (32x1). Each copy is quantised from
 *   the high-precision input, never one from the other.
 *   scale = 2^(x-127), x the E8M0 byte: amax/448 rounded UP to a power of two,
 *   so amax/scale <= 448 always; q = e4m3(v * 2^(127-x)) (exact reciprocal),
 *   round to nearest even, saturating. Zero block: x = 0x00 and codes 0x00.
 *   A block holding a NaN: x = 0xFF (NaN) and codes 0x7F. Infinity: x = 0xFE
 *   (2^127, TE's satfinite float_to_e8m0), the infinities become +-448 and
 *   finite values below 2^117 become 0.
 *   A tiny block (amax <= 448 * 2^-127, about 2.6e-36) has x = 0 and is
 *   quantised exactly with the reciprocal 2^127; Transformer Engine's kernels
 *   multiply by 1 there instead (exp2f_rcp(0) == 1), i.e. flush such blocks
 *   to zero codes. Nothing in a bf16 training run comes near that.
 *   Shapes: codes keep the input's shape [rows, cols] for both copies (the
 *   columnwise copy is not transposed, as in TE). Rowwise scales are
 *   [rows, ceil(cols/32)], columnwise scales [ceil(rows/32), cols], both
 *   row-major and unpadded. When cols (rowwise) or rows (columnwise) is not
 *   a multiple of 32 the last block is padded with zeros: its amax is that of
 *   the values present, and no codes are stored for the padding.
 *
 * cuBLASLt's MXFP8 scale layout (CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0)
 *   see lowp_mx_swizzle_index below.
 */
#ifndef MOE_LOWP_MXFP8_H
#define MOE_LOWP_MXFP8_H

#include "../lowp_ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- MXFP8 (mxfp8.c) --------------------------------------------------------- */

#define LOWP_MX_BLOCK 32

/* Quantise one block of n <= 32 values x[0], x[stride], ...: writes n codes
 * at codes[0], codes[cstride], ... and returns the E8M0 scale. */
uint8_t lowp_mxfp8_block(const void *x, lowp_dtype t, size_t first, size_t stride, size_t n,
                         uint8_t *codes, size_t cstride);

/* Rowwise (1x32 blocks along each row): codes [rows, cols], scales
 * [rows, ceil(cols/32)]. */
void lowp_mxfp8_rowwise(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes,
                        uint8_t *scales);
/* Columnwise (32x1 blocks down each column): codes [rows, cols], scales
 * [ceil(rows/32), cols]. */
void lowp_mxfp8_colwise(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes,
                        uint8_t *scales);
void lowp_mxfp8_dequant_rowwise(const uint8_t *codes, const uint8_t *scales, size_t rows,
                                size_t cols, float *out);
void lowp_mxfp8_dequant_colwise(const uint8_t *codes, const uint8_t *scales, size_t rows,
                                size_t cols, float *out);

/* MXFP8 quantise-dequantise of bf16 x [rows, cols] into bf16 y (may be x):
 * blocks of 32 along the rows (colwise 0, the rowwise copy) or down the
 * columns (colwise 1). y holds exactly the values an MXFP8 GEMM multiplies
 * (E4M3 code times its E8M0 scale; exact in bf16 but for results below
 * bf16's normal range): the mxfp8_emulated precision. */
void lowp_mxfp8_fake_bf16(const uint16_t *x, size_t rows, size_t cols, int colwise, uint16_t *y);

/* ---- cuBLASLt VEC32_UE8M0 scale layout (mx_swizzle.c) ------------------------- */

/* For an operand whose data is K-major with `outer` rows (M for A, N for B)
 * and K/32 = `kblocks` scale columns, cuBLAS ("1D Block Scaling Factors
 * Layout", cuBLAS library documentation, cublasLtMatmul section) stores the
 * scale matrix [outer, kblocks] padded to whole 128 x 4 tiles: tiles of 128
 * rows by 4 scale columns, 512 bytes each, in row-major order of tiles (all
 * K tiles of rows 0..127 first), and inside a tile the scale of (r, c),
 * r < 128, c < 4, at (r % 32) * 16 + (r / 32) * 4 + c. So:
 *   index(i, j) = ((i / 128) * ceil(kblocks / 4) + j / 4) * 512
 *               + (i % 32) * 16 + ((i % 128) / 32) * 4 + j % 4.
 * This is CUTLASS's Sm1xxBlockScaledConfig SfAtom and PyTorch's to_blocked
 * (view(n_row_blocks, 128, n_col_blocks, 4).permute(0, 2, 1, 3)
 * .reshape(-1, 4, 32, 4).transpose(1, 2)), the same bytes.
 * The rowwise copy of a [rows, cols] matrix is the operand (outer = rows,
 * kblocks = ceil(cols/32)); the columnwise copy is the operand
 * (outer = cols, kblocks = ceil(rows/32)): its scale (row block b, column c)
 * goes to index(c, b). */
size_t lowp_mx_swizzle_index(size_t i, size_t j, size_t kblocks);
/* Bytes of the padded, swizzled scale buffer: round_up(outer, 128) *
 * round_up(kblocks, 4). */
size_t lowp_mx_swizzled_bytes(size_t outer, size_t kblocks);
/* Pack scale (i, j) = src[i * s_outer + j * s_k] for i < outer, j < kblocks
 * into dst (lowp_mx_swizzled_bytes long); the padding bytes are 0. */
void lowp_mx_swizzle(const uint8_t *src, size_t outer, size_t kblocks, size_t s_outer, size_t s_k,
                     uint8_t *dst);
/* The two copies' scales as lowp_mxfp8_rowwise / _colwise wrote them. */
void lowp_mx_swizzle_rowwise(const uint8_t *scales, size_t rows, size_t cols, uint8_t *dst);
void lowp_mx_swizzle_colwise(const uint8_t *scales, size_t rows, size_t cols, uint8_t *dst);

#ifdef __cplusplus
}
#endif

#endif

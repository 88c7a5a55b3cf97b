/* moekit low precision: MXFP8 quantisation and dequantisation, rowwise (1x32)
 * and columnwise (32x1), from fp32 or bf16. The reference the CUDA kernels
 * are checked against byte for byte. */
#include "mxfp8.h"

uint8_t lowp_mxfp8_block(const void *x, lowp_dtype t, size_t first, size_t stride, size_t n,
                         uint8_t *codes, size_t cstride)
{
    uint32_t amax = lowp_amax_bits(x, t, first, stride, n);
    uint8_t s = lowp_mx_scale_from_amax_bits(amax);
    for (size_t k = 0; k < n; k++)
        codes[k * cstride] = lowp_mx_quant(lowp_load(x, t, first + k * stride), s, amax);
    return s;
}

void lowp_mxfp8_rowwise(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes,
                        uint8_t *scales)
{
    size_t nb = lowp_ceil_div(cols, LOWP_MX_BLOCK);
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++) {
            size_t c0 = b * LOWP_MX_BLOCK;
            size_t n = cols - c0 < LOWP_MX_BLOCK ? cols - c0 : LOWP_MX_BLOCK;
            scales[r * nb + b] =
                lowp_mxfp8_block(x, t, r * cols + c0, 1, n, codes + r * cols + c0, 1);
        }
}

void lowp_mxfp8_colwise(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes,
                        uint8_t *scales)
{
    size_t nb = lowp_ceil_div(rows, LOWP_MX_BLOCK);
    for (size_t b = 0; b < nb; b++) {
        size_t r0 = b * LOWP_MX_BLOCK;
        size_t n = rows - r0 < LOWP_MX_BLOCK ? rows - r0 : LOWP_MX_BLOCK;
        for (size_t c = 0; c < cols; c++)
            scales[b * cols + c] =
                lowp_mxfp8_block(x, t, r0 * cols + c, cols, n, codes + r0 * cols + c, cols);
    }
}

void lowp_mxfp8_dequant_rowwise(const uint8_t *codes, const uint8_t *scales, size_t rows,
                                size_t cols, float *out)
{
    size_t nb = lowp_ceil_div(cols, LOWP_MX_BLOCK);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            out[r * cols + c] =
                lowp_mx_dequant(codes[r * cols + c], scales[r * nb + c / LOWP_MX_BLOCK]);
}

void lowp_mxfp8_dequant_colwise(const uint8_t *codes, const uint8_t *scales, size_t rows,
                                size_t cols, float *out)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            out[r * cols + c] =
                lowp_mx_dequant(codes[r * cols + c], scales[(r / LOWP_MX_BLOCK) * cols + c]);
}

void lowp_mxfp8_fake_bf16(const uint16_t *x, size_t rows, size_t cols, int colwise, uint16_t *y)
{
    if (!colwise) {
        for (size_t r = 0; r < rows; r++)
            for (size_t c0 = 0; c0 < cols; c0 += LOWP_MX_BLOCK) {
                size_t n = cols - c0 < LOWP_MX_BLOCK ? cols - c0 : LOWP_MX_BLOCK;
                lowp_mx_fake_block(x + r * cols + c0, 1, n, y + r * cols + c0);
            }
    } else {
        for (size_t r0 = 0; r0 < rows; r0 += LOWP_MX_BLOCK)
            for (size_t c = 0; c < cols; c++) {
                size_t n = rows - r0 < LOWP_MX_BLOCK ? rows - r0 : LOWP_MX_BLOCK;
                lowp_mx_fake_block(x + r0 * cols + c, cols, n, y + r0 * cols + c);
            }
    }
}

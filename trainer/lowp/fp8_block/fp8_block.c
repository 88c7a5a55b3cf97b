/* moekit low precision: FP8 block scaling for Hopper, 1x128 tiles
 * (activations and gradients) and 128x128 blocks (weights), fp32 scales in
 * the layouts cuBLASLt's VEC128_32F / BLK128x128_32F modes read (fp8.h). */
#include <string.h>

#include "fp8_block.h"

size_t lowp_fp8blk_1x128_ld(size_t outer) { return lowp_round_up(outer, 4); }

size_t lowp_fp8blk_1x128_scales(size_t outer, size_t k)
{
    return lowp_ceil_div(k, LOWP_FP8BLK) * lowp_fp8blk_1x128_ld(outer);
}

size_t lowp_fp8blk_saved_codes_bytes(size_t rows, size_t I) { return (rows * I + 255) & ~(size_t)255; }

size_t lowp_fp8blk_saved_bytes(size_t rows, size_t I)
{
    return lowp_fp8blk_saved_codes_bytes(rows, I) + 4 * lowp_fp8blk_1x128_scales(rows, I);
}

size_t lowp_fp8blk_128x128_ld(size_t k) { return lowp_round_up(lowp_ceil_div(k, LOWP_FP8BLK), 4); }

size_t lowp_fp8blk_128x128_scales(size_t outer, size_t k)
{
    return lowp_ceil_div(outer, LOWP_FP8BLK) * lowp_fp8blk_128x128_ld(k);
}

/* Quantise the n values x[first + m * stride] (m < n) with one scale; codes
 * at codes[m * cstride]. */
static float quant_run(const void *x, lowp_dtype t, size_t first, size_t stride, size_t n,
                       uint8_t *codes, size_t cstride)
{
    uint32_t amax = lowp_amax_bits(x, t, first, stride, n);
    float s = lowp_fp8blk_scale(amax);
    for (size_t m = 0; m < n; m++)
        codes[m * cstride] = lowp_fp8blk_quant(lowp_load(x, t, first + m * stride), s, amax);
    return s;
}

/* 1x128 blocks along k of the operand [outer, k] whose element (o, j) is
 * x[o * s_outer + j * s_k]: codes [outer, k], scales in the 1x128 layout. */
static void blk_1x128(const void *x, lowp_dtype t, size_t outer, size_t k, size_t s_outer,
                      size_t s_k, uint8_t *codes, float *scales)
{
    size_t ld = lowp_fp8blk_1x128_ld(outer), nkb = lowp_ceil_div(k, LOWP_FP8BLK);
    memset(scales, 0, sizeof(float) * nkb * ld);
    for (size_t o = 0; o < outer; o++)
        for (size_t kb = 0; kb < nkb; kb++) {
            size_t j0 = kb * LOWP_FP8BLK;
            size_t n = k - j0 < LOWP_FP8BLK ? k - j0 : LOWP_FP8BLK;
            scales[kb * ld + o] =
                quant_run(x, t, o * s_outer + j0 * s_k, s_k, n, codes + o * k + j0, 1);
        }
}

void lowp_fp8blk_1x128(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes,
                       float *scales)
{
    blk_1x128(x, t, rows, cols, cols, 1, codes, scales);
}

void lowp_fp8blk_1x128_t(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes_t,
                         float *scales)
{
    /* the operand is x^T [cols, rows]: outer = cols, K = rows */
    blk_1x128(x, t, cols, rows, 1, cols, codes_t, scales);
}

void lowp_fp8blk_dequant_1x128(const uint8_t *codes, const float *scales, size_t outer, size_t k,
                               float *out)
{
    size_t ld = lowp_fp8blk_1x128_ld(outer);
    for (size_t i = 0; i < outer; i++)
        for (size_t j = 0; j < k; j++)
            out[i * k + j] =
                lowp_fp8blk_dequant(codes[i * k + j], scales[(j / LOWP_FP8BLK) * ld + i]);
}

void lowp_fp8blk_128x128(const void *x, lowp_dtype t, size_t rows, size_t cols, uint8_t *codes,
                         float *scales)
{
    size_t ld = lowp_fp8blk_128x128_ld(cols);
    size_t nrb = lowp_ceil_div(rows, LOWP_FP8BLK), nkb = lowp_ceil_div(cols, LOWP_FP8BLK);
    memset(scales, 0, sizeof(float) * nrb * ld);
    for (size_t rb = 0; rb < nrb; rb++)
        for (size_t kb = 0; kb < nkb; kb++) {
            size_t r0 = rb * LOWP_FP8BLK, c0 = kb * LOWP_FP8BLK;
            size_t nr = rows - r0 < LOWP_FP8BLK ? rows - r0 : LOWP_FP8BLK;
            size_t nc = cols - c0 < LOWP_FP8BLK ? cols - c0 : LOWP_FP8BLK;
            uint32_t amax = 0;
            for (size_t r = r0; r < r0 + nr; r++)
                for (size_t c = c0; c < c0 + nc; c++) {
                    uint32_t a = lowp_f32_bits(lowp_load(x, t, r * cols + c)) & 0x7FFFFFFFu;
                    if (a > amax)
                        amax = a;
                }
            float s = lowp_fp8blk_scale(amax);
            for (size_t r = r0; r < r0 + nr; r++)
                for (size_t c = c0; c < c0 + nc; c++)
                    codes[r * cols + c] = lowp_fp8blk_quant(lowp_load(x, t, r * cols + c), s, amax);
            scales[rb * ld + kb] = s;
        }
}

void lowp_fp8blk_dequant_128x128(const uint8_t *codes, const float *scales, size_t outer, size_t k,
                                 float *out)
{
    size_t ld = lowp_fp8blk_128x128_ld(k);
    for (size_t i = 0; i < outer; i++)
        for (size_t j = 0; j < k; j++)
            out[i * k + j] = lowp_fp8blk_dequant(codes[i * k + j],
                                                 scales[(i / LOWP_FP8BLK) * ld + j / LOWP_FP8BLK]);
}

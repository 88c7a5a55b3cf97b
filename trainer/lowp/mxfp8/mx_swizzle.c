/* moekit low precision: the MXFP8 scale layout cuBLASLt reads for
 * CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 (128 x 4 tiles, see fp8.h). */
#include <string.h>

#include "mxfp8.h"

size_t lowp_mx_swizzle_index(size_t i, size_t j, size_t kblocks)
{
    return lowp_mx_swz(i, j, kblocks); /* fp8_scalar.h: shared with the kernels */
}

size_t lowp_mx_swizzled_bytes(size_t outer, size_t kblocks)
{
    return lowp_round_up(outer, 128) * lowp_round_up(kblocks, 4);
}

void lowp_mx_swizzle(const uint8_t *src, size_t outer, size_t kblocks, size_t s_outer, size_t s_k,
                     uint8_t *dst)
{
    memset(dst, 0, lowp_mx_swizzled_bytes(outer, kblocks));
    for (size_t i = 0; i < outer; i++)
        for (size_t j = 0; j < kblocks; j++)
            dst[lowp_mx_swizzle_index(i, j, kblocks)] = src[i * s_outer + j * s_k];
}

void lowp_mx_swizzle_rowwise(const uint8_t *scales, size_t rows, size_t cols, uint8_t *dst)
{
    size_t kb = lowp_ceil_div(cols, LOWP_MX_BLOCK);
    lowp_mx_swizzle(scales, rows, kb, kb, 1, dst);
}

void lowp_mx_swizzle_colwise(const uint8_t *scales, size_t rows, size_t cols, uint8_t *dst)
{
    lowp_mx_swizzle(scales, cols, lowp_ceil_div(rows, LOWP_MX_BLOCK), 1, cols, dst);
}

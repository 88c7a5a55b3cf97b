/* moekit low precision: what the reference quantisers of every format share
 * (ground truth for the CUDA kernels beside them, which must match them byte
 * for byte): fp32 / bf16 arrays, block amaxes, the SwiGLU x probability
 * reference. Each format has its folder (mxfp8/, fp8_block/) with its
 * reference, its kernels and its header; fp8.h includes them all.
 *
 * Matrices are row-major [rows, cols]; the high-precision input is fp32 or
 * bf16 (uint16 bit patterns). Scalar arithmetic (E4M3, E8M0): fp8_scalar.h.
 */
#ifndef MOE_LOWP_REF_H
#define MOE_LOWP_REF_H

#include <stddef.h>
#include <stdint.h>

#include "fp8_scalar.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LOWP_F32 = 0, LOWP_BF16 = 1 } lowp_dtype;

/* Element i of a fp32 or bf16 array, widened (exactly) to fp32. */
static inline float lowp_load(const void *x, lowp_dtype t, size_t i)
{
    return t == LOWP_BF16 ? lowp_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* The largest |x| of the n values x[first], x[first + stride], ... as an
 * fp32 bit pattern: integers order non-negative floats, and a NaN (any
 * sign) lands above infinity. Both block formats start from it. */
static inline uint32_t lowp_amax_bits(const void *x, lowp_dtype t, size_t first, size_t stride,
                                      size_t n)
{
    uint32_t amax = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t a = lowp_f32_bits(lowp_load(x, t, first + k * stride)) & 0x7FFFFFFFu;
        if (a > amax)
            amax = a;
    }
    return amax;
}

static inline size_t lowp_ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static inline size_t lowp_round_up(size_t a, size_t b) { return lowp_ceil_div(a, b) * b; }

/* ---- SwiGLU x router probability (swiglu.c) ------------------------------------ */

/* out[r, f] = bf16(silu(gate[r, f]) * up[r, f] * prob[r]) (lowp_swiglu_prob),
 * gate, up, out bf16 [rows, F]; the fused CUDA kernel quantises exactly these
 * bf16 values to MXFP8. */
void lowp_swiglu_prob_bf16(const uint16_t *gate, const uint16_t *up, const float *prob, size_t rows,
                           size_t f, uint16_t *out);

#ifdef __cplusplus
}
#endif

#endif

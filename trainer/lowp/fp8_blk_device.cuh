/* moekit low precision: the device side of the E4M3 conversion and of the
 * FP8 block quantiser's arithmetic, shared by the quantiser kernels
 * of this folder and the kernels that quantise what they produce (the
 * backend's SwiGLU writing fp8_block's saved h). Same bits as fp8_scalar.h's
 * lowp_fp8blk_quant: see lowp_kernels.cuh. Built with LOWP_CUDA_HW_CVT and
 * LOWP_CUDA_FAST_DIV as this folder's rules.mk sets them. */
#ifndef MOEKIT_LOWP_FP8_BLK_DEVICE_CUH
#define MOEKIT_LOWP_FP8_BLK_DEVICE_CUH

#include <stdint.h>

#include "fp8_scalar.h"

/* Two fp32 -> two E4M3 codes (lo in the low byte): lowp_e4m3_from_f32 on
 * each, in one cvt.rn.satfinite.e4m3x2.f32 when the hardware conversion is
 * on (fp8_scalar.h; the instruction converts its first source into the upper
 * byte). */
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi)
{
#if defined(LOWP_CUDA_HW_CVT) && __CUDA_ARCH__ >= 890
    unsigned short pair;
    asm("{cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;}\n" : "=h"(pair) : "f"(hi), "f"(lo));
    return pair;
#else
    return lowp_e4m3_from_f32(lo) | ((uint32_t)lowp_e4m3_from_f32(hi) << 8);
#endif
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

/* A block's scale as the FP8 block quantisers divide by it: s itself and,
 * for the fast division, its correctly rounded reciprocal. */
typedef struct {
    float s, r; /* scale (times k) and its reciprocal */
    float k;    /* 1, or 2^64 for a scale under 2^-60 */
    float s0;   /* the scale itself */
    uint32_t amax;
} blk_scale;

/* A tiny scale would leave the correction's remainder v - q s subnormal,
 * hence inexact: value and scale are then both taken times 2^64 (exact, and
 * the quotient is the same). */
__device__ __forceinline__ blk_scale blk_scale_of(uint32_t amax)
{
    blk_scale b;
    b.amax = amax, b.s0 = lowp_fp8blk_scale(amax);
    b.k = b.s0 < 0x1p-60f ? 0x1p64f : 1.0f;
    b.s = __fmul_rn(b.s0, b.k), b.r = __frcp_rn(b.s);
    return b;
}

/* v / s rounded as one IEEE division (lowp_fp8blk_quant's), in three
 * instructions instead of __fdiv_rn's subroutine: q = v r, then one
 * correction with the exact remainder v - q s (Markstein). Only for finite
 * blocks (an infinite v would make the remainder NaN); test_lowp_cuda checks
 * every (bf16 value, bf16 amax) pair against __fdiv_rn's E4M3 code
 * (lowp_cuda_fp8blk_div_check). LOWP_FAST_DIV=0 in rules.mk keeps
 * __fdiv_rn. */
__device__ __forceinline__ float blk_div(float v, const blk_scale b)
{
#ifdef LOWP_CUDA_FAST_DIV
    if (b.amax < LOWP_F32_INF_BITS) {
        /* on |v|, the sign put back: the correction's sums turn a -0 (or a
         * negative quotient that underflows) into +0 */
        const uint32_t sign = __float_as_uint(v) & 0x80000000u;
        const float a = __fmul_rn(fabsf(v), b.k), q = __fmul_rn(a, b.r);
        return __uint_as_float(__float_as_uint(__fmaf_rn(__fmaf_rn(-q, b.s, a), b.r, q)) | sign);
    }
#endif
    return LOWP_DIV(v, b.s0);
}

/* lowp_fp8blk_quant of the two bf16 in w: NaN block 0x7F, zero block 0x00,
 * else e4m3(v / s). */
__device__ __forceinline__ uint32_t blk_quant2(uint32_t w, const blk_scale b)
{
    if (b.amax > LOWP_F32_INF_BITS)
        return 0x7F7Fu;
    if (b.amax == 0)
        return 0;
    return e4m3x2(blk_div(bf16_lo(w), b), blk_div(bf16_hi(w), b));
}

__device__ __forceinline__ uint32_t blk_quant4(uint32_t w0, uint32_t w1, const blk_scale b)
{
    return blk_quant2(w0, b) | blk_quant2(w1, b) << 16;
}

#endif

/* moekit low precision: the scalar arithmetic of every quantiser, shared by
 * the C reference and the CUDA kernels so both compute the same bits.
 *
 * Everything here is integer/bit manipulation or a single IEEE fp32 operation
 * rounded to nearest even (on the GPU through the __f*_rn intrinsics, which
 * are never contracted into an FMA; the C side is compiled with
 * -ffp-contract=off), plus, in the kernels, the E4M3 conversion instruction
 * where it is proven equal to the integer encoder (lowp_e4m3_from_f32). No
 * libm call appears: powf/exp2f/log2f and expf are not bit-identical between
 * glibc and CUDA, so scales come from bit patterns and the exponential of
 * SwiGLU is our own (lowp_expf). NaN payloads are the one thing arithmetic
 * does not reproduce across the two (x86 passes an operand's on, CUDA makes
 * 0x7FFFFFFF): every NaN that reaches an output is a fixed code.
 *
 * Formats
 *   E4M3 (OCP FP8, CUDA's __nv_fp8_e4m3): sign, 4 exponent bits (bias 7),
 *     3 mantissa bits; no infinity; S.1111.111 is NaN; largest finite 448
 *     (0x7E), smallest normal 2^-6 (0x08), smallest subnormal 2^-9 (0x01).
 *   E8M0 (MX scale): one unsigned byte, value 2^(x-127); 0xFF is NaN.
 *   bf16: the top 16 bits of an fp32. */
#ifndef MOE_LOWP_FP8_SCALAR_H
#define MOE_LOWP_FP8_SCALAR_H

#include <stddef.h>
#include <stdint.h>
#ifndef __CUDACC__
#include <string.h>
#endif

#ifdef __CUDACC__
#define LOWP_HD static inline __host__ __device__
#else
#define LOWP_HD static inline
#endif

/* One rounding each, never fused. */
#ifdef __CUDA_ARCH__
#define LOWP_MUL(a, b) __fmul_rn((a), (b))
#define LOWP_ADD(a, b) __fadd_rn((a), (b))
#define LOWP_SUB(a, b) __fsub_rn((a), (b))
#define LOWP_DIV(a, b) __fdiv_rn((a), (b))
#else
#define LOWP_MUL(a, b) ((float)(a) * (float)(b))
#define LOWP_ADD(a, b) ((float)(a) + (float)(b))
#define LOWP_SUB(a, b) ((float)(a) - (float)(b))
#define LOWP_DIV(a, b) ((float)(a) / (float)(b))
#endif

#define LOWP_E4M3_MAX 448.0f
#define LOWP_E4M3_NAN 0x7Fu /* the canonical NaN code (0xFF decodes as NaN too) */
#define LOWP_E8M0_NAN 0xFFu
#define LOWP_F32_448_BITS 0x43E00000u /* 448.0f */
#define LOWP_F32_INF_BITS 0x7F800000u
#define LOWP_F32_MAX 3.40282347e+38f        /* FLT_MAX */
#define LOWP_F32_MIN_NORMAL 1.17549435e-38f /* FLT_MIN, 2^-126 */

LOWP_HD uint32_t lowp_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

LOWP_HD float lowp_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* ---- bf16 ------------------------------------------------------------------ */

LOWP_HD float lowp_bf16_to_f32(uint16_t h) { return lowp_bits_f32((uint32_t)h << 16); }

#define LOWP_BF16_NAN 0x7FC0u /* the canonical bf16 NaN (PyTorch's) */

/* Round to nearest even (PyTorch's .to(torch.bfloat16)); overflow gives
 * infinity; every NaN becomes the canonical 0x7FC0. Arithmetic hands NaNs
 * on differently on the two sides (x86 keeps an operand's payload and sign,
 * CUDA returns 0x7FFFFFFF), so only a canonical NaN keeps a computed bf16
 * (the SwiGLU output) the same bytes on the CPU and the GPU. */
LOWP_HD uint16_t lowp_f32_to_bf16(float f)
{
    uint32_t u = lowp_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > LOWP_F32_INF_BITS)
        return LOWP_BF16_NAN;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- E4M3 ------------------------------------------------------------------ */

/* fp32 -> E4M3, round to nearest even, saturating (CUDA's __NV_SATFINITE,
 * what Transformer Engine uses): everything above 448 in magnitude,
 * infinity included, becomes +-448; every NaN becomes the canonical NaN code
 * 0x7F (whatever its sign); a value that rounds to zero keeps its sign (0x80
 * for negatives). Bit for bit what cuda_fp8.hpp's __nv_cvt_float_to_fp8(x,
 * __NV_SATFINITE, __NV_E4M3) returns, on all 2^32 inputs
 * (tests/unit/test_lowp_cuda_fp8.cu; the GPU instruction itself is compared
 * by tests/gpu/test_lowp_cuda.c). */
LOWP_HD uint8_t lowp_e4m3_from_f32_int(float f)
{
    uint32_t u = lowp_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > LOWP_F32_INF_BITS)
        return LOWP_E4M3_NAN;
    if (a >= LOWP_F32_448_BITS)
        return (uint8_t)(sign | 0x7Eu);
    if (a >= 0x3C800000u) {
        /* normal: rebias the exponent (127 -> 7) and round the 23-bit mantissa
         * to 3 bits; a carry out of the mantissa bumps the exponent, which is
         * right, and cannot pass 448 because a < 448 */
        uint32_t v = a - (120u << 23);
        v += 0x7FFFFu + ((v >> 20) & 1u);
        return (uint8_t)(sign | (v >> 20));
    }
    /* below 2^-6: the E4M3 subnormals k * 2^-9, k = round(|f| * 2^9), in
     * integers: the significand shifted right by 141 - exponent with ties to
     * even. k = 8 is 2^-6, the smallest normal, whose code is also 8. */
    uint32_t e = a >> 23;
    if (e < 117u) /* |f| < 2^-10: zero (2^-10 itself is the tie, handled below) */
        return sign;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t s = 141u - e; /* 21..24 */
    uint32_t k = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    if (rem > half || (rem == half && (k & 1u)))
        k++;
    return (uint8_t)(sign | k);
}

/* What the quantisers call. In the kernels, on compute capability 8.9+ and
 * unless built with LOWP_HW_CVT=0 (trainer/lowp/rules.mk), this is the
 * conversion instruction cvt.rn.satfinite.e4m3x2.f32: one instruction instead
 * of the integer code above, and the same byte for every one of the 2^32
 * fp32 inputs (measured on an H200 by tests/gpu/test_lowp_cuda.c, which
 * repeats the comparison on every run). Everywhere else it is the integer
 * code. */
LOWP_HD uint8_t lowp_e4m3_from_f32(float f)
{
#if defined(LOWP_CUDA_HW_CVT) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short pair;
    asm("{cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;}\n" : "=h"(pair) : "f"(f), "f"(0.0f));
    return (uint8_t)(pair & 0xFFu);
#else
    return lowp_e4m3_from_f32_int(f);
#endif
}

/* E4M3 -> fp32, exact. NaN codes give a quiet NaN with the code's sign. */
LOWP_HD float lowp_e4m3_to_f32(uint8_t c)
{
    uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    uint32_t e = (c >> 3) & 0xFu;
    uint32_t m = c & 7u;
    if (e == 15u && m == 7u)
        return lowp_bits_f32(sign | 0x7FC00000u);
    if (e == 0u) /* m * 2^-9: an exact product */
        return lowp_bits_f32(lowp_f32_bits(LOWP_MUL((float)m, 0.001953125f)) | sign);
    return lowp_bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

/* ---- E8M0 ------------------------------------------------------------------ */

/* 2^(x-127), exact: 0 is 2^-127 (an fp32 subnormal), 254 is 2^127; 0xFF NaN. */
LOWP_HD float lowp_e8m0_to_f32(uint8_t x)
{
    if (x == LOWP_E8M0_NAN)
        return lowp_bits_f32(0x7FC00000u);
    if (x == 0)
        return lowp_bits_f32(0x00400000u);
    return lowp_bits_f32((uint32_t)x << 23);
}

/* The exact reciprocal 2^(127-x) of an E8M0 scale, x in 0..254: 2^127 for
 * x = 0 (finite in fp32), 2^-127 (subnormal) for x = 254. */
LOWP_HD float lowp_e8m0_rcp(uint8_t x)
{
    if (x == 254u)
        return lowp_bits_f32(0x00400000u);
    return lowp_bits_f32((uint32_t)(254u - x) << 23);
}

/* ---- MXFP8 ----------------------------------------------------------------- */

/* The E8M0 scale of an MX block from its amax, given as the fp32 bit pattern
 * of max |x| (the block's largest absolute bit pattern, which orders floats
 * and puts NaN above infinity): the smallest power of two 2^(x-127) with
 * amax / 2^(x-127) <= 448, i.e. amax/448 rounded UP to a power of two
 * (Transformer Engine's float_to_e8m0(amax * (1/448)), cvt.rp.satfinite.ue8m0).
 *   amax = m * 2^E, 1 <= m < 2:  amax/448 = (m/1.75) * 2^(E-8), and m/1.75 is
 *   in (0.57, 1] when m <= 1.75, in (1, 1.15) otherwise, so the rounded-up
 *   exponent is E - 8 + (m > 1.75); biased: exponent field - 8 + (mantissa
 *   field > 0x600000). Below 448 * 2^-127 the answer is 0 (the smallest
 *   scale; amax <= 448 * 2^-127 always holds there). No finite amax gets past
 *   x = 247; infinity gives 0xFE (2^127, saturating, as TE); NaN gives 0xFF;
 *   a zero block gives 0x00 (TE maps 0 to 0x00). */
LOWP_HD uint8_t lowp_mx_scale_from_amax_bits(uint32_t amax_bits)
{
    if (amax_bits > LOWP_F32_INF_BITS)
        return LOWP_E8M0_NAN;
    if (amax_bits == LOWP_F32_INF_BITS)
        return 0xFEu;
    int32_t x = (int32_t)(amax_bits >> 23) - 8 + ((amax_bits & 0x7FFFFFu) > 0x600000u ? 1 : 0);
    return (uint8_t)(x < 0 ? 0 : x);
}

/* One element of an MX block whose scale x and amax bits are known:
 * e4m3(v * 2^(127-x)), the multiplication exact wherever the result can be
 * non-zero in E4M3. A NaN block (x = 0xFF) is all NaN codes (0x7F); a zero
 * block (amax 0, x = 0) is all 0x00, -0.0 included. */
LOWP_HD uint8_t lowp_mx_quant(float v, uint8_t x, uint32_t amax_bits)
{
    if (x == LOWP_E8M0_NAN)
        return LOWP_E4M3_NAN;
    if (amax_bits == 0)
        return 0;
    return lowp_e4m3_from_f32(LOWP_MUL(v, lowp_e8m0_rcp(x)));
}

/* code * 2^(x-127): the product of two exact values, rounded once (exact
 * unless it falls into the fp32 subnormal range). */
LOWP_HD float lowp_mx_dequant(uint8_t code, uint8_t x)
{
    return LOWP_MUL(lowp_e4m3_to_f32(code), lowp_e8m0_to_f32(x));
}

/* One MX block of n <= 32 bf16 values x[0], x[stride], ... quantised and
 * dequantised back to bf16 in place of y (the values an MXFP8 GEMM would
 * see): the emulation of mxfp8 on GPUs without MXFP8 tensor cores. Shared by
 * the C reference and the kernel, so both give the same bytes. */
LOWP_HD void lowp_mx_fake_block(const uint16_t *x, size_t stride, size_t n, uint16_t *y)
{
    uint32_t amax = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t a = lowp_f32_bits(lowp_bf16_to_f32(x[k * stride])) & 0x7FFFFFFFu;
        amax = a > amax ? a : amax;
    }
    uint8_t s = lowp_mx_scale_from_amax_bits(amax);
    for (size_t k = 0; k < n; k++)
        y[k * stride] = lowp_f32_to_bf16(
            lowp_mx_dequant(lowp_mx_quant(lowp_bf16_to_f32(x[k * stride]), s, amax), s));
}

/* Position of scale (i, j) in cuBLASLt's VEC32_UE8M0 layout (128 x 4 tiles)
 * for an operand with `kblocks` scale columns; fp8.h explains it. */
LOWP_HD size_t lowp_mx_swz(size_t i, size_t j, size_t kblocks)
{
    size_t tile = (i / 128) * ((kblocks + 3) / 4) + j / 4;
    return tile * 512 + (i % 32) * 16 + ((i % 128) / 32) * 4 + j % 4;
}

/* ---- FP8 block scaling (1x128, 128x128; fp32 scales) ----------------------- */

/* scale = amax / 448 in fp32 (not a power of two), the dequantisation factor
 * cuBLASLt's VEC128_32F / BLK128x128_32F modes multiply by. A zero block has
 * scale 1; infinity counts as FLT_MAX (the scale stays finite and the
 * infinities saturate to +-448); a scale below FLT_MIN (amax under about
 * 5.3e-36) is raised to FLT_MIN so it stays a normal number; NaN gives a NaN
 * scale. */
LOWP_HD float lowp_fp8blk_scale(uint32_t amax_bits)
{
    if (amax_bits > LOWP_F32_INF_BITS)
        return lowp_bits_f32(0x7FC00000u);
    if (amax_bits == 0)
        return 1.0f;
    float a = amax_bits == LOWP_F32_INF_BITS ? LOWP_F32_MAX : lowp_bits_f32(amax_bits);
    float s = LOWP_DIV(a, LOWP_E4M3_MAX);
    return s < LOWP_F32_MIN_NORMAL ? LOWP_F32_MIN_NORMAL : s;
}

/* e4m3(v / scale), one IEEE division; NaN block -> 0x7F, zero block -> 0x00. */
LOWP_HD uint8_t lowp_fp8blk_quant(float v, float scale, uint32_t amax_bits)
{
    if (amax_bits > LOWP_F32_INF_BITS)
        return LOWP_E4M3_NAN;
    if (amax_bits == 0)
        return 0;
    return lowp_e4m3_from_f32(LOWP_DIV(v, scale));
}

LOWP_HD float lowp_fp8blk_dequant(uint8_t code, float scale)
{
    return LOWP_MUL(lowp_e4m3_to_f32(code), scale);
}

/* ---- SwiGLU x router probability ------------------------------------------- */

/* exp(x) in fp32 from basic operations only, so the CPU and the GPU agree to
 * the bit: x = k ln2 + r with k = rint(x log2 e) and a two-part ln2
 * (Cody-Waite; k * LN2_HI is exact for |k| < 512), exp(r) by the degree-7
 * Taylor polynomial (|r| <= 0.35: truncation below 2^-27 relative), then
 * times 2^k in two exact power-of-two steps. Within 1 ulp of exp (99.2%
 * correctly rounded, measured over every 97th fp32 in range; the unit test
 * checks it against libm). */
LOWP_HD float lowp_expf(float x)
{
    if (x != x)
        return x;
    if (x > 88.7228394f) /* above ln(FLT_MAX) */
        return lowp_bits_f32(LOWP_F32_INF_BITS);
    if (x < -103.972084f) /* below ln(2^-150): rounds to zero */
        return 0.0f;
    float t = LOWP_MUL(x, 1.44269502f);
    float kf = LOWP_SUB(LOWP_ADD(t, 12582912.0f), 12582912.0f); /* rint via 1.5 * 2^23 */
    float r = LOWP_SUB(x, LOWP_MUL(kf, 0.693145751953125f));    /* LN2_HI */
    r = LOWP_SUB(r, LOWP_MUL(kf, 1.42860677e-06f));             /* LN2_LO */
    float p = 1.98412701e-04f;                                  /* 1/5040 */
    p = LOWP_ADD(LOWP_MUL(p, r), 1.38888892e-03f);              /* 1/720 */
    p = LOWP_ADD(LOWP_MUL(p, r), 8.33333377e-03f);              /* 1/120 */
    p = LOWP_ADD(LOWP_MUL(p, r), 4.16666679e-02f);              /* 1/24 */
    p = LOWP_ADD(LOWP_MUL(p, r), 1.66666672e-01f);              /* 1/6 */
    p = LOWP_ADD(LOWP_MUL(p, r), 0.5f);
    p = LOWP_ADD(LOWP_MUL(p, r), 1.0f);
    p = LOWP_ADD(LOWP_MUL(p, r), 1.0f);
    int k = (int)kf; /* -150 .. 128 */
    int k1 = k / 2, k2 = k - k1;
    p = LOWP_MUL(p, lowp_bits_f32((uint32_t)(k1 + 127) << 23));
    return LOWP_MUL(p, lowp_bits_f32((uint32_t)(k2 + 127) << 23));
}

/* silu of a bf16 gate in fp32: e = lowp_expf(-g); s = g / (1 + e).
 * (silu(-inf) is NaN here: -inf / inf.) */
LOWP_HD float lowp_silu(uint16_t gate)
{
    float g = lowp_bf16_to_f32(gate);
    return LOWP_DIV(g, LOWP_ADD(1.0f, lowp_expf(-g)));
}

/* bf16(silu(g) * u * p), in this order of fp32 operations:
 *   s = lowp_silu(g); t = s * u; v = t * p; round v to bf16.
 * (any NaN comes out as 0x7FC0.) */
LOWP_HD uint16_t lowp_swiglu_prob(uint16_t gate, uint16_t up, float prob)
{
    float s = lowp_silu(gate);
    float t = LOWP_MUL(s, lowp_bf16_to_f32(up));
    return lowp_f32_to_bf16(LOWP_MUL(t, prob));
}

#endif

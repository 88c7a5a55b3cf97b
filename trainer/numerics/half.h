/* moekit numerics: bf16 / fp16 <-> fp32 conversions (tensor files, split masters).
 * Rounding is to nearest, ties to even, as PyTorch's .to() does, so a value
 * written here and read by PyTorch (or back here) is bit-identical. */
#ifndef MOE_NUMERICS_HALF_H
#define MOE_NUMERICS_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t half_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float half_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16 is the top half of an fp32: widening is exact. */
static inline float bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = half_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep the sign, force a quiet NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even; overflow gives inf */
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

#endif

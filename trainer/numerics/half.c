#include "half.h"

float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) /* inf / NaN: widen the payload */
        return half_bits_f32(sign | 0x7F800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return half_bits_f32(sign);
        /* Subnormal: shift the mantissa up until its leading 1 is implicit. */
        int e = -1;
        do {
            e++;
            mant <<= 1;
        } while (!(mant & 0x400u));
        mant &= 0x3FFu;
        return half_bits_f32(sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13));
    }
    return half_bits_f32(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

/* After F. Giesen's float_to_half_fast3_rtne: the subnormal range is rounded
 * by the FPU itself (adding a magic number aligns the bits), the normal range
 * by integer arithmetic with an explicit ties-to-even bias. */
uint16_t f32_to_f16(float f)
{
    const uint32_t f32_inf = 255u << 23;
    const uint32_t f16_overflow = (127u + 16u) << 23; /* 65536.0: rounds to inf */
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t x = half_f32_bits(f);
    uint32_t sign = x & 0x80000000u;
    x ^= sign;
    uint16_t o;
    if (x >= f16_overflow) {
        o = x > f32_inf ? 0x7E00u : 0x7C00u;
    } else if (x < (113u << 23)) { /* below 2^-14: f16 subnormal or zero */
        float v = half_bits_f32(x) + half_bits_f32(denorm_magic);
        o = (uint16_t)(half_f32_bits(v) - denorm_magic);
    } else {
        uint32_t mant_odd = (x >> 13) & 1u;
        x -= 112u << 23; /* rebias exponent 127 -> 15 */
        x += 0xFFFu + mant_odd;
        o = (uint16_t)(x >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

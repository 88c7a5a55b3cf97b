/* moekit: an fp32 master weight stored as two 16-bit halves.
 *
 * The high half is the bf16 compute copy itself, so a backend that computes
 * in bf16 stores only the low 16 bits of each master beside it: exact fp32
 * masters for 2 bytes a parameter instead of 4 (3.2B parameters: 6.3 GB).
 *
 * The compute copy is the master rounded to nearest with ties away from zero
 * (round-to-nearest-even differs only on exact ties, 1 value in 65536): with
 * that rule the rounding direction is a function of the low half alone (it
 * rounded away from zero iff lo >= 0x8000), so decoding needs no extra bit.
 * NaN masters become a quiet NaN (the payload is dropped); infinities and the
 * overflow of the largest finite values to infinity decode exactly. */
#ifndef MOE_SPLIT_MASTER_H
#define MOE_SPLIT_MASTER_H

#include <stdint.h>

#ifdef __CUDACC__
#define SPLIT_MASTER_FN static __host__ __device__ __forceinline__
#else
#define SPLIT_MASTER_FN static inline
#endif

SPLIT_MASTER_FN void split_master_encode(uint32_t bits, uint16_t *hi, uint16_t *lo)
{
    uint16_t h = (uint16_t)(bits >> 16), l = (uint16_t)bits;
    if ((bits & 0x7fffffffu) > 0x7f800000u) { /* NaN */
        *hi = (uint16_t)((h & 0x8000u) | 0x7fc0u);
        *lo = 0;
        return;
    }
    *hi = l >= 0x8000u ? (uint16_t)(h + 1) : h; /* a carry into the exponent is right */
    *lo = l;
}

SPLIT_MASTER_FN uint32_t split_master_decode(uint16_t hi, uint16_t lo)
{
    uint16_t h = lo >= 0x8000u ? (uint16_t)(hi - 1) : hi;
    return (uint32_t)h << 16 | lo;
}

#endif

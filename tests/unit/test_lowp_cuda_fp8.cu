/* trainer/lowp's E4M3 conversions against CUDA's own (cuda_fp8.h, whose host
 * path mirrors the device's cvt.rn.satfinite): every one of the 2^32 fp32
 * inputs encodes to the same byte as __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
 * __NV_E4M3), NaNs included, and every code decodes to the same float as
 * __nv_fp8_e4m3. Host code only (no GPU); built when CUDA=1. */
#include <cuda_fp8.h>
#include <stdint.h>
#include <stdio.h>

#include "../../trainer/lowp/fp8_scalar.h"
#include "../check.h"

static void test_encode_all_fp32(void)
{
    unsigned long long bad = 0, first = ~0ull;
#pragma omp parallel for reduction(+ : bad) reduction(min : first) schedule(static)
    for (long long i = 0; i < (1ll << 32); i++) {
        float f = lowp_bits_f32((uint32_t)i);
        if (lowp_e4m3_from_f32(f) != __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3)) {
            bad++;
            if ((unsigned long long)i < first)
                first = (unsigned long long)i;
        }
    }
    CHECK_MSG(bad == 0, "%llu inputs differ, the first %08llx", bad, first);
}

static void test_decode_all_codes(void)
{
    for (int c = 0; c < 256; c++) {
        __nv_fp8_e4m3 v;
        v.__x = (__nv_fp8_storage_t)c;
        float want = (float)v, got = lowp_e4m3_to_f32((uint8_t)c);
        CHECK_MSG(lowp_f32_bits(want) == lowp_f32_bits(got) || (want != want && got != got),
                  "code %02x: %g vs CUDA %g", c, got, want);
    }
}

int main(void)
{
    RUN(test_encode_all_fp32);
    RUN(test_decode_all_codes);
    return check_summary("test_lowp_cuda_fp8");
}

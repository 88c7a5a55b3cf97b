/* Split fp32 masters (trainer/backend/split_master.h): every fp32 pattern
 * rebuilds exactly from its two halves, and the high half is the master
 * rounded to nearest (ties away from zero). The GPU kernels share this code;
 * tests/gpu/test_cuda_ops checks them against it. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../trainer/backend/split_master.h"
#include "../check.h"

static int is_nan(uint32_t b) { return (b & 0x7fffffffu) > 0x7f800000u; }

/* The reference rounding, on values rather than bits: of the two bf16
 * neighbours of x (truncation and the next one out), the nearer, the one of
 * larger magnitude on a tie. */
static double f32_value(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint16_t round_half_away(uint32_t b)
{
    uint32_t toward = b & 0xffff0000u, away = toward + 0x10000u;
    double x = f32_value(b), t = f32_value(toward), a = f32_value(away);
    if (isinf(a) && !isinf(t)) /* past the largest finite bf16: the next step would be 2^128 */
        a = copysign(ldexp(1.0, 128), x);
    return (uint16_t)((fabs(x - a) <= fabs(x - t) ? away : toward) >> 16);
}

/* Every high half with the low halves where the rounding turns (and a few
 * in between): all exponents, both signs, both directions, the carry into
 * the exponent and into infinity. */
static void test_exhaustive_high_halves(void)
{
    static const uint16_t lows[] = {0x0000, 0x0001, 0x3fff, 0x7ffe, 0x7fff, 0x8000,
                                    0x8001, 0xbfff, 0xfffe, 0xffff, 0x1234, 0xedcb};
    size_t bad_trip = 0, bad_round = 0, bad_nan = 0;
    for (uint32_t h = 0; h <= 0xffffu; h++)
        for (size_t j = 0; j < sizeof lows / sizeof lows[0]; j++) {
            uint32_t b = h << 16 | lows[j];
            uint16_t hi, lo;
            split_master_encode(b, &hi, &lo);
            uint32_t back = split_master_decode(hi, lo);
            if (is_nan(b)) {
                bad_nan += !is_nan(back) || !is_nan((uint32_t)hi << 16);
                continue;
            }
            bad_trip += back != b;
            bad_round += hi != round_half_away(b);
        }
    CHECK_MSG(bad_trip == 0, "%zu patterns do not rebuild", bad_trip);
    CHECK_MSG(bad_round == 0, "%zu high halves are not the nearest bf16", bad_round);
    CHECK_MSG(bad_nan == 0, "%zu NaNs lost", bad_nan);
}

/* Random patterns over the whole 32-bit space. */
static void test_random_patterns(void)
{
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    size_t bad = 0;
    for (int i = 0; i < 4000000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        uint32_t b = (uint32_t)(s >> 16);
        if (is_nan(b))
            continue;
        uint16_t hi, lo;
        split_master_encode(b, &hi, &lo);
        bad += split_master_decode(hi, lo) != b;
    }
    CHECK_MSG(bad == 0, "%zu random patterns do not rebuild", bad);
}

/* Hand-worked cases: 1 + 2^-8 (a tie) rounds away, 1 + 2^-8 - 2^-23 down;
 * the largest finite float carries into infinity and still rebuilds. */
static void test_worked_cases(void)
{
    uint16_t hi, lo;
    split_master_encode(0x3f808000u, &hi, &lo); /* 1.00390625: halfway 1 and 1.0078125 */
    CHECK(hi == 0x3f81 && lo == 0x8000);
    split_master_encode(0x3f807fffu, &hi, &lo);
    CHECK(hi == 0x3f80 && lo == 0x7fff);
    split_master_encode(0xbf808000u, &hi, &lo); /* negative tie: away from zero */
    CHECK(hi == 0xbf81);
    split_master_encode(0x7f7fffffu, &hi, &lo);
    CHECK(hi == 0x7f80 && split_master_decode(hi, lo) == 0x7f7fffffu);
    split_master_encode(0x3fffffffu, &hi, &lo); /* 1.99999988 rounds to 2.0: exponent carry */
    CHECK(hi == 0x4000 && split_master_decode(hi, lo) == 0x3fffffffu);
    split_master_encode(0x7fc00001u, &hi, &lo);
    CHECK(hi == 0x7fc0 && lo == 0);
    float one = 1.0f;
    uint32_t b;
    memcpy(&b, &one, 4);
    split_master_encode(b, &hi, &lo);
    CHECK(hi == 0x3f80 && lo == 0 && split_master_decode(hi, lo) == b);
}

int main(void)
{
    RUN(test_exhaustive_high_halves);
    RUN(test_random_patterns);
    RUN(test_worked_cases);
    return check_summary("split_master");
}

/* The weights' initial values (trainer/numerics/init_normal.h): its log and
 * sincos against libm, the normals' distribution, and pinned values, so a
 * change to the stream (which would silently change every model's start)
 * fails here. The GPU's copy of the same code is checked bit for bit
 * against this one by tests/gpu/test_cuda_ops. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../trainer/numerics/init_normal.h"
#include "../check.h"

static uint64_t s = 0x1234567ull;
static uint64_t next_u64(void) { return init_mix(s++, 1); }

static void test_log(void)
{
    double worst = 0;
    for (int i = 0; i < 1000000; i++) {
        /* uniforms as the generator makes them, and the extremes of (0, 1) */
        double x = init_uniform(next_u64());
        if (i < 64)
            x = ldexp(1.0 + i / 64.0, -(i % 54)) * 0.5;
        double want = log(x), got = init_log(x);
        double err = fabs(got - want) / fmax(fabs(want), 1e-300);
        if (err > worst)
            worst = err;
    }
    fprintf(stderr, "  init_log: worst relative error %.2e\n", worst);
    CHECK(worst < 8e-16); /* a few ulps: libm's half ulp and the series' */
    CHECK(init_log(1.0) == 0.0);
    CHECK(init_log(0.5) == -0.69314718055994530942);
}

static void test_sincos(void)
{
    double worst = 0;
    for (int i = 0; i < 1000000; i++) {
        double v = init_uniform(next_u64());
        if (i < 9)
            v = i / 8.0; /* the quarter and octant boundaries */
        double sn, cs;
        init_sincos_turns(v, &sn, &cs);
        double a = 6.283185307179586476925 * v;
        double err = fmax(fabs(sn - sin(a)), fabs(cs - cos(a)));
        if (err > worst)
            worst = err;
    }
    fprintf(stderr, "  init_sincos_turns: worst absolute error %.2e\n", worst);
    CHECK(worst < 2e-15); /* the reference's own angle carries ~4e-16 */
    double sn, cs;
    init_sincos_turns(0.25, &sn, &cs);
    CHECK(sn == 1.0 && cs == 0.0);
}

/* a standard normal: mean, variance, tails, and the two halves of a pair
 * uncorrelated */
static void test_distribution(void)
{
    const uint64_t key = 0xfeedbeefull;
    const int n = 4000000;
    double sum = 0, sq = 0, pair = 0;
    long tail3 = 0;
    for (int j = 0; j < n; j += 2) {
        double a = init_normal(key, j), b = init_normal(key, j + 1);
        sum += a + b;
        sq += a * a + b * b;
        pair += a * b;
        tail3 += (fabs(a) > 3) + (fabs(b) > 3);
    }
    double mean = sum / n, var = sq / n - mean * mean, corr = pair / (n / 2);
    double p3 = (double)tail3 / n; /* 0.0026998 */
    fprintf(stderr, "  normal: mean %.4f var %.4f pair corr %.4f P(|z|>3) %.5f\n", mean, var, corr,
            p3);
    CHECK(fabs(mean) < 3e-3); /* 6 sigma of the sample mean */
    CHECK(fabs(var - 1) < 5e-3);
    CHECK(fabs(corr) < 5e-3);
    CHECK(fabs(p3 - 0.0026998) < 3.5e-4);
}

/* the stream is a function of (key, index) alone, and its first values are
 * what they were when the models of the notes and fixtures were trained */
static void test_pinned(void)
{
    const uint64_t key = 42;
    float v[4];
    for (int j = 0; j < 4; j++)
        v[j] = init_weight(key, j, 0.02);
    fprintf(stderr, "  init_weight(42, 0..3, 0.02) = %a %a %a %a\n", v[0], v[1], v[2], v[3]);
    static const float pinned[4] = {0x1.0fca6ep-7f, 0x1.abbdbep-7f, -0x1.2440d6p-6f,
                                      0x1.b2c6dep-6f};
    CHECK(memcmp(v, pinned, sizeof v) == 0);
    CHECK(init_normal(key, 7) != init_normal(key + 1, 7));
}

int main(void)
{
    RUN(test_log);
    RUN(test_sincos);
    RUN(test_distribution);
    RUN(test_pinned);
    return check_summary("init_normal");
}

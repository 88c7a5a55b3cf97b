/* moekit tests: one small pseudo-random generator for every C test
 * (xorshift64*, fast and good enough for test inputs). GPU tests seed it
 * from the clock and print the seed, so each run draws fresh inputs and a
 * failing one can be replayed with MOE_TEST_SEED=<hex>. */
#ifndef MOE_TEST_RNG_H
#define MOE_TEST_RNG_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t test_rng_state = 0x9E3779B97F4A7C15ull;

static inline uint64_t test_rng_u64(void)
{
    test_rng_state ^= test_rng_state >> 12;
    test_rng_state ^= test_rng_state << 25;
    test_rng_state ^= test_rng_state >> 27;
    return test_rng_state * 0x2545F4914F6CDD1Dull;
}

/* uniform in [0, 1) */
static inline double test_rng_unit(void) { return (double)(test_rng_u64() >> 11) * 0x1p-53; }

/* standard normal (Box-Muller) */
static inline double test_rng_normal(void)
{
    double u = test_rng_unit() + 1e-300, v = test_rng_unit();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* MOE_TEST_SEED (hex) if set, else mixed from the clock; prints the seed. */
static inline void test_rng_seed_fresh(void)
{
    const char *s = getenv("MOE_TEST_SEED");
    test_rng_state = s ? strtoull(s, NULL, 16) : test_rng_state ^ (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
    if (!test_rng_state)
        test_rng_state = 1; /* xorshift's one fixed point */
    printf("seed %016llx (MOE_TEST_SEED to replay)\n", (unsigned long long)test_rng_state);
}

#endif

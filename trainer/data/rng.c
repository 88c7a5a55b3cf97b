/* Random numbers for the data order. Everything derives from train.seed
 * through splitmix64, so a run is reproducible bit for bit on any machine
 * (rand() is neither portable nor seedable per stream). */
#include "data_internal.h"

uint64_t rng_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A hash of three words, each step a full splitmix64 round, so nearby keys
 * (window 7 and 8, epoch 0 and 1) give unrelated outputs. */
uint64_t rng_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    const uint64_t golden = 0x9e3779b97f4a7c15ull;
    uint64_t h = rng_mix64(a + golden);
    h = rng_mix64(h ^ (b + 2 * golden));
    return rng_mix64(h ^ (c + 3 * golden));
}

double rng_unit(uint64_t bits)
{
    return (double)(bits >> 11) * 0x1.0p-53;
}

void xoshiro_seed(moe_xoshiro *x, uint64_t seed)
{
    /* splitmix64 stream, as the xoshiro authors recommend: never all zero */
    for (int i = 0; i < 4; i++) {
        seed += 0x9e3779b97f4a7c15ull;
        x->s[i] = rng_mix64(seed);
    }
}

static inline uint64_t rotl(uint64_t v, int k)
{
    return (v << k) | (v >> (64 - k));
}

uint64_t xoshiro_next(moe_xoshiro *x)
{
    uint64_t *s = x->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t xoshiro_below(moe_xoshiro *x, uint64_t n)
{
    /* reject the top partial block of 2^64 so every residue is equally likely */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do
        v = xoshiro_next(x);
    while (v >= limit);
    return v % n;
}

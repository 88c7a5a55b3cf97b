/* moekit: small deterministic random numbers (splitmix64), identical on every
 * platform, for initialisation and sampling. */
#ifndef MOE_RNG_H
#define MOE_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s;
    int have_spare;
    double spare;
} moe_rng;

static inline void rng_seed(moe_rng *r, uint64_t seed)
{
    r->s = seed;
    r->have_spare = 0;
    r->spare = 0;
}

static inline uint64_t rng_next(moe_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* uniform in (0, 1) */
static inline double rng_uniform(moe_rng *r) { return ((rng_next(r) >> 11) + 0.5) * 0x1.0p-53; }

/* standard normal (Box-Muller) */
static inline double rng_normal(moe_rng *r)
{
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u = rng_uniform(r), v = rng_uniform(r);
    double rad = sqrt(-2.0 * log(u)), ang = 6.283185307179586476925 * v;
    r->spare = rad * sin(ang);
    r->have_spare = 1;
    return rad * cos(ang);
}

/* FNV-1a of a string, to key streams by name */
static inline uint64_t rng_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

#endif

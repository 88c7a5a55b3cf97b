/* moekit: the normal numbers that initialise the weights, the same bits on
 * the CPU and on the GPU.
 *
 * Value j of a named matrix is a function of (key, j) alone: splitmix64 at
 * counters 2p + 1 and 2p + 2 (p = j / 2) gives two uniforms, and Box-Muller
 * turns them into a pair, cos for even j, sin for odd. So a GPU thread can
 * make any value without the ones before it, and 3 billion weights take
 * milliseconds on the device instead of seconds of host libm.
 *
 * Bit-identity needs every step to be a correctly rounded IEEE operation
 * done in the same order: libm's log/sin/cos and CUDA's differ in the last
 * bits, so log and sincos here are series in + - * / only, and nothing may
 * be fused into an FMA (device: the __d*_rn intrinsics, which are never
 * contracted; host: C11 mode and FP_CONTRACT off). frexp and floor are exact.
 * Accuracy is ~1e-16 relative, far below the float the value is stored in. */
#ifndef MOE_INIT_NORMAL_H
#define MOE_INIT_NORMAL_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define INIT_FN static __host__ __device__ __forceinline__
#else
#define INIT_FN static inline
#ifdef __clang__ /* gcc does not contract in C11 mode, and warns at the pragma */
#pragma STDC FP_CONTRACT OFF
#endif
#endif

#if defined(__CUDA_ARCH__)
#define IN_ADD(a, b) __dadd_rn((a), (b))
#define IN_SUB(a, b) __dsub_rn((a), (b))
#define IN_MUL(a, b) __dmul_rn((a), (b))
#define IN_DIV(a, b) __ddiv_rn((a), (b))
#define IN_SQRT(a) __dsqrt_rn(a)
#else
#define IN_ADD(a, b) ((a) + (b))
#define IN_SUB(a, b) ((a) - (b))
#define IN_MUL(a, b) ((a) * (b))
#define IN_DIV(a, b) ((a) / (b))
#define IN_SQRT(a) sqrt(a)
#endif

#define INIT_GOLDEN 0x9E3779B97F4A7C15ULL

/* splitmix64's output at counter c (its state after c steps from key) */
INIT_FN uint64_t init_mix(uint64_t key, uint64_t c)
{
    uint64_t z = key + c * INIT_GOLDEN;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* uniform in (0, 1), never 0 */
INIT_FN double init_uniform(uint64_t z) { return ((double)(z >> 11) + 0.5) * 0x1.0p-53; }

/* natural log of x > 0: x = m 2^k with m in [sqrt(1/2), sqrt(2)),
 * log m = 2 atanh(f), f = (m - 1) / (m + 1), |f| < 0.172, by its series */
INIT_FN double init_log(double x)
{
    int k;
    double m = frexp(x, &k); /* m in [0.5, 1) */
    if (m < 0.70710678118654752440) {
        m = IN_MUL(m, 2.0);
        k -= 1;
    }
    double f = IN_DIV(IN_SUB(m, 1.0), IN_ADD(m, 1.0)), s = IN_MUL(f, f);
    /* sum of s^n / (2n + 1) for n = 0..12: the last term is < 1e-21 */
    double p = 1.0 / 25.0;
    p = IN_ADD(IN_MUL(p, s), 1.0 / 23.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 21.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 19.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 17.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 15.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 13.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 11.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 9.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 7.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 5.0);
    p = IN_ADD(IN_MUL(p, s), 1.0 / 3.0);
    p = IN_ADD(IN_MUL(p, s), 1.0);
    double log_m = IN_MUL(IN_MUL(2.0, f), p);
    return IN_ADD(IN_MUL((double)k, 0.69314718055994530942), log_m);
}

/* sin and cos of t in [0, pi/4] by their Taylor series (terms to t^21) */
INIT_FN void init_sincos_small(double t, double *s, double *c)
{
    double t2 = IN_MUL(t, t);
    double ps = 1.0 / 51090942171709440000.0; /* 1/21! */
    ps = IN_ADD(IN_MUL(ps, t2), -1.0 / 121645100408832000.0);
    ps = IN_ADD(IN_MUL(ps, t2), 1.0 / 355687428096000.0);
    ps = IN_ADD(IN_MUL(ps, t2), -1.0 / 1307674368000.0);
    ps = IN_ADD(IN_MUL(ps, t2), 1.0 / 6227020800.0);
    ps = IN_ADD(IN_MUL(ps, t2), -1.0 / 39916800.0);
    ps = IN_ADD(IN_MUL(ps, t2), 1.0 / 362880.0);
    ps = IN_ADD(IN_MUL(ps, t2), -1.0 / 5040.0);
    ps = IN_ADD(IN_MUL(ps, t2), 1.0 / 120.0);
    ps = IN_ADD(IN_MUL(ps, t2), -1.0 / 6.0);
    ps = IN_ADD(IN_MUL(ps, t2), 1.0);
    *s = IN_MUL(ps, t);
    double pc = 1.0 / 2432902008176640000.0; /* 1/20! */
    pc = IN_ADD(IN_MUL(pc, t2), -1.0 / 6402373705728000.0);
    pc = IN_ADD(IN_MUL(pc, t2), 1.0 / 20922789888000.0);
    pc = IN_ADD(IN_MUL(pc, t2), -1.0 / 87178291200.0);
    pc = IN_ADD(IN_MUL(pc, t2), 1.0 / 479001600.0);
    pc = IN_ADD(IN_MUL(pc, t2), -1.0 / 3628800.0);
    pc = IN_ADD(IN_MUL(pc, t2), 1.0 / 40320.0);
    pc = IN_ADD(IN_MUL(pc, t2), -1.0 / 720.0);
    pc = IN_ADD(IN_MUL(pc, t2), 1.0 / 24.0);
    pc = IN_ADD(IN_MUL(pc, t2), -1.0 / 2.0);
    pc = IN_ADD(IN_MUL(pc, t2), 1.0);
    *c = pc;
}

/* sin and cos of 2 pi v for v in [0, 1): quarter turns and the octant's
 * mirror are taken exactly on v, the series runs on [0, pi/4] */
INIT_FN void init_sincos_turns(double v, double *s, double *c)
{
    double w = IN_MUL(v, 4.0); /* exact */
    double q = floor(w);
    double r = IN_SUB(w, q); /* exact: [0, 1) of a quarter turn */
    int mirror = r > 0.5;
    if (mirror)
        r = IN_SUB(1.0, r); /* exact (Sterbenz) */
    double sr, cr;
    init_sincos_small(IN_MUL(r, 1.57079632679489661923), &sr, &cr);
    if (mirror) { /* sin(pi/2 - x) = cos x */
        double tmp = sr;
        sr = cr;
        cr = tmp;
    }
    switch ((int)q & 3) {
    case 0: *s = sr; *c = cr; break;
    case 1: *s = cr; *c = -sr; break;
    case 2: *s = -sr; *c = -cr; break;
    default: *s = -cr; *c = sr; break;
    }
}

/* values 2p and 2p + 1 of the stream `key`: two independent standard normals */
INIT_FN void init_normal_pair(uint64_t key, uint64_t p, double *even, double *odd)
{
    double u = init_uniform(init_mix(key, 2 * p + 1)), v = init_uniform(init_mix(key, 2 * p + 2));
    double rad = IN_SQRT(IN_MUL(-2.0, init_log(u)));
    double s, c;
    init_sincos_turns(v, &s, &c);
    *even = IN_MUL(rad, c);
    *odd = IN_MUL(rad, s);
}

/* value j of the stream `key`: a standard normal */
INIT_FN double init_normal(uint64_t key, uint64_t j)
{
    double even, odd;
    init_normal_pair(key, j >> 1, &even, &odd);
    return (j & 1) ? odd : even;
}

/* what a weight is initialised to: std times value j, rounded to float */
INIT_FN float init_weight(uint64_t key, uint64_t j, double std)
{
    return (float)IN_MUL(std, init_normal(key, j));
}

/* weights j0 .. j0 + n - 1 into out[0 .. n), each pair of normals made once */
INIT_FN void init_weights(float *out, uint64_t key, uint64_t j0, uint64_t n, double std)
{
    for (uint64_t i = 0; i < n;) {
        uint64_t j = j0 + i;
        double even, odd;
        init_normal_pair(key, j >> 1, &even, &odd);
        if (!(j & 1))
            out[i++] = (float)IN_MUL(std, even);
        if (i < n)
            out[i++] = (float)IN_MUL(std, odd);
    }
}

#endif

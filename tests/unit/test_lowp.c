/* Unit tests for trainer/lowp: E4M3 and E8M0, MXFP8 (rowwise, columnwise,
 * the cuBLASLt scale layout), FP8 1x128 / 128x128 block scaling, the
 * portable exp and the SwiGLU x probability reference.
 *
 * Expected values are either worked out by hand (written next to each case)
 * or computed independently in double precision (ldexp, brute-force nearest
 * search), never with the code under test. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/lowp/fp8.h"
#include "../check.h"
#include "../test_rng.h"

/* ---- helpers -------------------------------------------------------------- */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static float bits_f(uint32_t u) { return lowp_bits_f32(u); }
static uint32_t f_bits(float f) { return lowp_f32_bits(f); }

/* Independent E4M3 decode: sign, 4-bit exponent (bias 7), 3-bit mantissa. */
static double e4m3_ref_value(int c)
{
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7)
        return NAN;
    double v = e == 0 ? ldexp(m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

/* Nearest E4M3 code to x by brute force over the 127 non-negative finite
 * values, ties to the even code, saturating at 448. */
static uint8_t e4m3_ref_encode(double x)
{
    if (isnan(x))
        return 0x7F;
    int neg = signbit(x) != 0;
    double a = fabs(x);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c <= 0x7E; c++) {
        double d = fabs(e4m3_ref_value(c) - a);
        if (d < bd || (d == bd && (c & 1) == 0 && (best & 1))) {
            bd = d;
            best = c;
        }
    }
    if (a >= 448.0)
        best = 0x7E;
    return (uint8_t)(best | (neg ? 0x80 : 0));
}

/* Half an E4M3 ulp at magnitude y (y < 448): 2^-10 below 2^-6, else 2^(e-4). */
static double e4m3_half_ulp(double y)
{
    if (y < 0x1p-6)
        return 0x1p-10;
    int e;
    frexp(y, &e); /* y = f * 2^e, 0.5 <= f < 1: ulp is 2^(e-1-3) */
    return ldexp(1.0, e - 5);
}

/* Random test matrix: each 32x32 patch has its own magnitude 2^[-lo, hi], so
 * blocks see many scales. */
static void fill_random(float *x, size_t rows, size_t cols, int lo, int hi)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            uint64_t h = ((r / 32) * 1000003u + c / 32 + 17) * 0x9E3779B97F4A7C15ull;
            int e = (int)((h >> 40) % (uint64_t)(hi + lo + 1)) - lo;
            x[r * cols + c] = (float)ldexp(test_rng_normal(), e);
        }
}

static void to_bf16(const float *x, size_t n, uint16_t *h)
{
    for (size_t i = 0; i < n; i++)
        h[i] = lowp_f32_to_bf16(x[i]);
}

/* ---- E4M3 ------------------------------------------------------------------ */

static void test_e4m3_all_codes(void)
{
    for (int c = 0; c < 256; c++) {
        float v = lowp_e4m3_to_f32((uint8_t)c);
        double want = e4m3_ref_value(c);
        if (isnan(want)) {
            CHECK_MSG(isnan(v), "code %02x", c);
            /* NaN encodes to the canonical 0x7F (CUDA's conversion does the
             * same), so 0x7F round-trips and 0xFF comes back as 0x7F */
            CHECK_MSG(lowp_e4m3_from_f32(v) == 0x7F, "code %02x", c);
            continue;
        }
        CHECK_MSG((double)v == want, "code %02x: %g vs %g", c, v, want);
        CHECK_MSG((signbit(v) != 0) == ((c & 0x80) != 0), "code %02x sign", c);
        CHECK_MSG(lowp_e4m3_from_f32(v) == c, "code %02x re-encodes to %02x", c,
                  lowp_e4m3_from_f32(v));
    }
    /* the positive codes are increasing: 0x00 .. 0x7E */
    for (int c = 1; c <= 0x7E; c++)
        CHECK(lowp_e4m3_to_f32((uint8_t)c) > lowp_e4m3_to_f32((uint8_t)(c - 1)));
    CHECK(lowp_e4m3_to_f32(0x7E) == 448.0f);
    CHECK(lowp_e4m3_to_f32(0x08) == 0x1p-6f);
    CHECK(lowp_e4m3_to_f32(0x01) == 0x1p-9f);
    CHECK(lowp_e4m3_to_f32(0x38) == 1.0f);
}

static void test_e4m3_ties_and_neighbours(void)
{
    /* between codes k and k+1 (both finite, positive) the midpoint goes to
     * the even code, anything off it to the nearer one; midpoints of values
     * with 4 significant bits are exact in fp32 */
    for (int k = 0; k < 0x7E; k++) {
        float a = lowp_e4m3_to_f32((uint8_t)k), b = lowp_e4m3_to_f32((uint8_t)(k + 1));
        float mid = (a + b) / 2;
        int even = (k & 1) ? k + 1 : k;
        CHECK_MSG(lowp_e4m3_from_f32(mid) == even, "tie %02x/%02x -> %02x", k, k + 1,
                  lowp_e4m3_from_f32(mid));
        CHECK_MSG(lowp_e4m3_from_f32(-mid) == (even | 0x80), "negative tie %02x", k);
        CHECK(lowp_e4m3_from_f32(nextafterf(mid, 0)) == k);
        CHECK(lowp_e4m3_from_f32(nextafterf(mid, INFINITY)) == k + 1);
        CHECK(lowp_e4m3_from_f32(-nextafterf(mid, INFINITY)) == ((k + 1) | 0x80));
    }
    /* random magnitudes against the brute-force nearest */
    for (int i = 0; i < 20000; i++) {
        float x = (float)ldexp(test_rng_normal(), (int)(test_rng_u64() % 30) - 16);
        uint8_t want = e4m3_ref_encode(x);
        CHECK_MSG(lowp_e4m3_from_f32(x) == want, "%.9g -> %02x, want %02x", x,
                  lowp_e4m3_from_f32(x), want);
    }
    /* hand-worked: 1.0625 is the tie of 1 (0x38) and 1.125 (0x39): even 0x38;
     * 1.1875 is the tie of 1.125 (0x39) and 1.25 (0x3A): even 0x3A;
     * in [128, 256) the step is 16 and 240 = 1.875 * 2^7 is 0x77 */
    CHECK(lowp_e4m3_from_f32(1.0625f) == 0x38);
    CHECK(lowp_e4m3_from_f32(1.1875f) == 0x3A);
    CHECK(lowp_e4m3_from_f32(240.0f) == 0x77);
    CHECK(lowp_e4m3_from_f32(248.0f) == 0x78); /* tie of 240 (0x77) and 256 (0x78): even */
    CHECK(lowp_e4m3_from_f32(232.0f) == 0x76); /* tie of 224 (0x76) and 240 (0x77): even */
}

static void test_e4m3_saturation(void)
{
    CHECK(lowp_e4m3_from_f32(448.0f) == 0x7E);
    CHECK(lowp_e4m3_from_f32(nextafterf(448.0f, INFINITY)) == 0x7E);
    CHECK(lowp_e4m3_from_f32(449.0f) == 0x7E);
    CHECK(lowp_e4m3_from_f32(464.0f) == 0x7E); /* would be the tie with 480 */
    CHECK(lowp_e4m3_from_f32(465.0f) == 0x7E);
    CHECK(lowp_e4m3_from_f32(480.0f) == 0x7E); /* 480 would be S.1111.111 = NaN */
    CHECK(lowp_e4m3_from_f32(1e30f) == 0x7E);
    CHECK(lowp_e4m3_from_f32(FLT_MAX) == 0x7E);
    CHECK(lowp_e4m3_from_f32(INFINITY) == 0x7E);
    CHECK(lowp_e4m3_from_f32(-448.0f) == 0xFE);
    CHECK(lowp_e4m3_from_f32(-1e30f) == 0xFE);
    CHECK(lowp_e4m3_from_f32(-INFINITY) == 0xFE);
    CHECK(lowp_e4m3_from_f32(NAN) == 0x7F);
    CHECK(lowp_e4m3_from_f32(-NAN) == 0x7F);
    CHECK(lowp_e4m3_from_f32(bits_f(0x7F800001u)) == 0x7F); /* signalling NaN */
    CHECK(lowp_e4m3_from_f32(bits_f(0xFFFFFFFFu)) == 0x7F);
    CHECK(lowp_e4m3_from_f32(447.0f) == 0x7E); /* 416 / 448 neighbours: nearer 448 */
    CHECK(lowp_e4m3_from_f32(431.0f) == 0x7D); /* below the tie 432: 416 = 0x7D */
    CHECK(lowp_e4m3_from_f32(432.0f) == 0x7E); /* tie of 416 (0x7D) and 448 (0x7E): even */
}

static void test_e4m3_subnormals(void)
{
    CHECK(lowp_e4m3_from_f32(0x1p-9f) == 0x01);  /* smallest subnormal */
    CHECK(lowp_e4m3_from_f32(0x1p-10f) == 0x00); /* tie of 0 and 2^-9: even 0 */
    CHECK(lowp_e4m3_from_f32(nextafterf(0x1p-10f, 1)) == 0x01);
    CHECK(lowp_e4m3_from_f32(nextafterf(0x1p-10f, 0)) == 0x00);
    CHECK(lowp_e4m3_from_f32(3 * 0x1p-10f) == 0x02);   /* 1.5 * 2^-9: tie, even 2 */
    CHECK(lowp_e4m3_from_f32(5 * 0x1p-10f) == 0x02);   /* 2.5 * 2^-9: tie, even 2 */
    CHECK(lowp_e4m3_from_f32(7 * 0x1p-9f) == 0x07);    /* largest subnormal */
    CHECK(lowp_e4m3_from_f32(7.5f * 0x1p-9f) == 0x08); /* tie of 7 and 8: even 8 = 2^-6 */
    CHECK(lowp_e4m3_from_f32(nextafterf(7.5f * 0x1p-9f, 0)) == 0x07);
    CHECK(lowp_e4m3_from_f32(0x1p-6f) == 0x08); /* smallest normal */
    CHECK(lowp_e4m3_from_f32(nextafterf(0x1p-6f, 0)) == 0x08);
    CHECK(lowp_e4m3_from_f32(-0x1p-10f) == 0x80); /* rounds to -0 */
    CHECK(lowp_e4m3_from_f32(-3 * 0x1p-9f) == 0x83);
    CHECK(lowp_e4m3_from_f32(1e-30f) == 0x00);
    CHECK(lowp_e4m3_from_f32(-1e-30f) == 0x80);
    CHECK(lowp_e4m3_from_f32(bits_f(1)) == 0x00); /* fp32 subnormal */
    CHECK(lowp_e4m3_from_f32(0.0f) == 0x00);
    CHECK(lowp_e4m3_from_f32(-0.0f) == 0x80);
}

/* ---- E8M0 ------------------------------------------------------------------ */

static void test_e8m0(void)
{
    CHECK(lowp_e8m0_to_f32(127) == 1.0f);
    CHECK(lowp_e8m0_to_f32(128) == 2.0f);
    CHECK(lowp_e8m0_to_f32(119) == 0x1p-8f);
    CHECK(lowp_e8m0_to_f32(1) == 0x1p-126f);
    CHECK(lowp_e8m0_to_f32(0) == ldexpf(1.0f, -127)); /* fp32 subnormal */
    CHECK(lowp_e8m0_to_f32(254) == 0x1p127f);
    CHECK(isnan(lowp_e8m0_to_f32(255)));
    for (int x = 0; x < 255; x++) {
        CHECK_MSG((double)lowp_e8m0_to_f32((uint8_t)x) == ldexp(1.0, x - 127), "x %d", x);
        CHECK_MSG((double)lowp_e8m0_rcp((uint8_t)x) == ldexp(1.0, 127 - x), "rcp %d", x);
    }
}

/* ---- MXFP8 scale and blocks ------------------------------------------------- */

static uint8_t mx_scale_of(float amax)
{
    return lowp_mx_scale_from_amax_bits(f_bits(amax) & 0x7FFFFFFFu);
}

static void test_mx_scale_hand(void)
{
    CHECK(mx_scale_of(448.0f) == 127); /* 448/448 = 1 = 2^0 */
    CHECK(mx_scale_of(449.0f) == 128); /* just above: 2^1 */
    CHECK(mx_scale_of(nextafterf(448.0f, INFINITY)) == 128);
    CHECK(mx_scale_of(1.0f) == 119);   /* 1/448 = 0.00223 in (2^-9, 2^-8]: 2^-8 */
    CHECK(mx_scale_of(224.0f) == 126); /* 0.5 exactly */
    CHECK(mx_scale_of(nextafterf(224.0f, INFINITY)) == 127);
    CHECK(mx_scale_of(896.0f) == 128);
    CHECK(mx_scale_of(1.75f) == 119); /* 1.75/448 = 2^-8 exactly */
    CHECK(mx_scale_of(nextafterf(1.75f, INFINITY)) == 120);
    CHECK(mx_scale_of(0.0f) == 0); /* TE's float_to_e8m0(0) = 0x00 */
    CHECK(mx_scale_of(-0.0f) == 0);
    CHECK(mx_scale_of(3e38f) == 247); /* 3e38/448 = 6.7e35, just above 2^119 */
    CHECK(mx_scale_of(FLT_MAX) == 247);
    CHECK(mx_scale_of(INFINITY) == 254); /* satfinite 0xFE, as TE */
    CHECK(mx_scale_of(NAN) == 255);
    CHECK(mx_scale_of(448.0f * 0x1p-127f) == 0); /* 1.75 * 2^-119: exactly 448 * 2^-127 */
    CHECK(mx_scale_of(nextafterf(448.0f * 0x1p-127f, INFINITY)) == 1);
    CHECK(mx_scale_of(0x1p-122f) == 0);
    CHECK(mx_scale_of(1e-40f) == 0); /* fp32 subnormal */
    /* the definition, in exact double arithmetic: the smallest x with
     * amax <= 448 * 2^(x-127), over random bit patterns of every magnitude */
    for (int i = 0; i < 200000; i++) {
        uint32_t b = (uint32_t)(test_rng_u64() % 0x7F800000u);
        double amax = (double)bits_f(b);
        int x = lowp_mx_scale_from_amax_bits(b);
        CHECK_MSG(amax <= ldexp(448.0, x - 127), "bits %08x -> %d", b, x);
        CHECK_MSG(x == 0 || amax > ldexp(448.0, x - 128), "bits %08x -> %d not minimal", b, x);
    }
}

static void block_of(float *x, const float *vals, int n)
{
    for (int i = 0; i < 32; i++)
        x[i] = i < n ? vals[i] : 0.0f;
}

static void test_mx_block_hand(void)
{
    float x[32];
    uint8_t q[32];

    /* amax 448: scale 2^0 (127); 448 -> 0x7E, -448 -> 0xFE, 1 -> 0x38
     * (exponent 7, mantissa 0), 0.5 -> 0x30, 0 -> 0x00 */
    block_of(x, (float[]){448, -448, 1, 0.5f}, 4);
    CHECK(lowp_mxfp8_block(x, LOWP_F32, 0, 1, 32, q, 1) == 127);
    CHECK(q[0] == 0x7E && q[1] == 0xFE && q[2] == 0x38 && q[3] == 0x30 && q[4] == 0x00);

    /* amax 449: scale 2 (128); 449/2 = 224.5 -> 224 = 1.75 * 2^7 = 0x76;
     * 1/2 = 0.5 -> 0x30 */
    block_of(x, (float[]){449, 1}, 2);
    CHECK(lowp_mxfp8_block(x, LOWP_F32, 0, 1, 32, q, 1) == 128);
    CHECK(q[0] == 0x76 && q[1] == 0x30);

    /* amax 1: scale 2^-8 (119); 1 * 256 = 2^8 -> 0x78; -0.25 * 256 = -64 =
     * -2^6 -> 0xE8; 2^-12 * 256 = 2^-4 -> 0x18 */
    block_of(x, (float[]){1, -0.25f, 0x1p-12f}, 3);
    CHECK(lowp_mxfp8_block(x, LOWP_F32, 0, 1, 32, q, 1) == 119);
    CHECK(q[0] == 0x78 && q[1] == 0xE8 && q[2] == 0x18);

    /* a zero block (with a -0): scale 0x00, every code 0x00 */
    block_of(x, (float[]){0.0f, -0.0f}, 2);
    CHECK(lowp_mxfp8_block(x, LOWP_F32, 0, 1, 32, q, 1) == 0);
    for (int i = 0; i < 32; i++)
        CHECK(q[i] == 0);

    /* a NaN anywhere: scale 0xFF, codes 0x7F; dequantises to NaN */
    block_of(x, (float[]){1, 2, NAN, 3}, 4);
    CHECK(lowp_mxfp8_block(x, LOWP_F32, 0, 1, 32, q, 1) == 0xFF);
    for (int i = 0; i < 32; i++)
        CHECK(q[i] == 0x7F && isnan(lowp_mx_dequant(q[i], 0xFF)));

    /* infinity: scale 0xFE (2^127); +-inf -> +-448, 1 * 2^-127 and
     * 1e30 * 2^-127 (5.9e-9) -> 0 */
    block_of(x, (float[]){INFINITY, -INFINITY, 1, 1e30f}, 4);
    CHECK(lowp_mxfp8_block(x, LOWP_F32, 0, 1, 32, q, 1) == 0xFE);
    CHECK(q[0] == 0x7E && q[1] == 0xFE && q[2] == 0x00 && q[3] == 0x00);

    /* tiny: amax 2^-122 <= 448 * 2^-127, scale 0x00 (2^-127); 2^-122 * 2^127
     * = 32 = 2^5 -> 0x60 and dequantises exactly; an fp32 subnormal 2^-140
     * -> 2^-13 -> 0x00 */
    block_of(x, (float[]){0x1p-122f, ldexpf(1.0f, -140)}, 2);
    CHECK(lowp_mxfp8_block(x, LOWP_F32, 0, 1, 32, q, 1) == 0);
    CHECK(q[0] == 0x60 && q[1] == 0x00);
    CHECK(lowp_mx_dequant(q[0], 0) == 0x1p-122f);

    /* huge: amax 3e38 -> 2^120 (247); 3e38 * 2^-120 = 225.7 -> 224 (0x76) */
    block_of(x, (float[]){3e38f, 1e38f}, 2);
    CHECK(lowp_mxfp8_block(x, LOWP_F32, 0, 1, 32, q, 1) == 247);
    CHECK(q[0] == 0x76);

    /* bf16 input: 0x43E0 is 448.0, 0xC3E1 is -450.0 */
    uint16_t h[32] = {0x43E0, 0xC3E1};
    CHECK(lowp_mxfp8_block(h, LOWP_BF16, 0, 1, 32, q, 1) == 128);
    CHECK(q[0] == 0x76 && q[1] == 0xF6); /* 224 and -225 -> -224 */
}

/* Every element of a quantised matrix against its input: amax/scale <= 448,
 * the scale is the smallest power of two that allows it, and the error is at
 * most half an E4M3 ulp at |x|/scale, times the scale (relative 2^-4 for
 * normals). blocks: row-major [rows, cols] with scale(r, c). */
static void check_mx_bounds(const float *x, const uint8_t *codes, size_t rows, size_t cols,
                            const uint8_t *scales, int rowwise)
{
    size_t nbr = lowp_ceil_div(cols, 32);
    int bad = 0;
    for (size_t r = 0; r < rows && bad < 5; r++)
        for (size_t c = 0; c < cols && bad < 5; c++) {
            uint8_t s = rowwise ? scales[r * nbr + c / 32] : scales[(r / 32) * cols + c];
            double sc = ldexp(1.0, s - 127);
            double v = x[r * cols + c], y = fabs(v) / sc;
            double deq = e4m3_ref_value(codes[r * cols + c]) * sc;
            int ok = y <= 448.0 && fabs(deq - v) <= e4m3_half_ulp(y) * sc &&
                     (y < 0x1p-6 || fabs(deq - v) <= 0x1p-4 * fabs(v)) &&
                     (float)deq == lowp_mx_dequant(codes[r * cols + c], s);
            if (!ok) {
                bad++;
                CHECK_MSG(0, "(%zu,%zu) x %.9g code %02x scale %d deq %.9g", r, c, v,
                          codes[r * cols + c], s, deq);
            }
        }
    /* minimality: some element of each block is above 224 * scale */
    if (rowwise) {
        for (size_t r = 0; r < rows; r++)
            for (size_t b = 0; b < nbr; b++) {
                uint8_t s = scales[r * nbr + b];
                double m = 0;
                for (size_t c = b * 32; c < cols && c < b * 32 + 32; c++)
                    m = fmax(m, fabs(x[r * cols + c]));
                CHECK(s == 0 || m > ldexp(224.0, s - 127));
            }
    }
}

static void test_mx_properties(void)
{
    static const size_t shapes[][2] = {{64, 64}, {33, 70}, {100, 31}, {1, 1}, {37, 129}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        size_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
        float *x = xmalloc(sizeof(float) * n), *xb = xmalloc(sizeof(float) * n);
        uint16_t *h = xmalloc(sizeof(uint16_t) * n);
        uint8_t *q = xmalloc(n), *qs = xmalloc(rows * lowp_ceil_div(cols, 32));
        uint8_t *qc = xmalloc(n), *cs = xmalloc(lowp_ceil_div(rows, 32) * cols);
        fill_random(x, rows, cols, 40, 40);
        to_bf16(x, n, h);
        for (size_t i = 0; i < n; i++)
            xb[i] = lowp_bf16_to_f32(h[i]);
        lowp_mxfp8_rowwise(x, LOWP_F32, rows, cols, q, qs);
        check_mx_bounds(x, q, rows, cols, qs, 1);
        lowp_mxfp8_colwise(x, LOWP_F32, rows, cols, qc, cs);
        check_mx_bounds(x, qc, rows, cols, cs, 0);
        lowp_mxfp8_rowwise(h, LOWP_BF16, rows, cols, q, qs);
        check_mx_bounds(xb, q, rows, cols, qs, 1);
        lowp_mxfp8_colwise(h, LOWP_BF16, rows, cols, qc, cs);
        check_mx_bounds(xb, qc, rows, cols, cs, 0);
        free(x), free(xb), free(h), free(q), free(qs), free(qc), free(cs);
    }
}

/* bf16 input quantises exactly like its fp32 widening. */
static void test_mx_bf16_equals_f32(void)
{
    size_t rows = 45, cols = 77, n = rows * cols;
    float *x = xmalloc(sizeof(float) * n);
    uint16_t *h = xmalloc(sizeof(uint16_t) * n);
    uint8_t *q1 = xmalloc(n), *q2 = xmalloc(n), *s1 = xmalloc(n), *s2 = xmalloc(n);
    fill_random(x, rows, cols, 20, 20);
    to_bf16(x, n, h);
    for (size_t i = 0; i < n; i++)
        x[i] = lowp_bf16_to_f32(h[i]);
    lowp_mxfp8_rowwise(x, LOWP_F32, rows, cols, q1, s1);
    lowp_mxfp8_rowwise(h, LOWP_BF16, rows, cols, q2, s2);
    CHECK(memcmp(q1, q2, n) == 0 && memcmp(s1, s2, rows * lowp_ceil_div(cols, 32)) == 0);
    lowp_mxfp8_colwise(x, LOWP_F32, rows, cols, q1, s1);
    lowp_mxfp8_colwise(h, LOWP_BF16, rows, cols, q2, s2);
    CHECK(memcmp(q1, q2, n) == 0 && memcmp(s1, s2, lowp_ceil_div(rows, 32) * cols) == 0);
    free(x), free(h), free(q1), free(q2), free(s1), free(s2);
}

/* Quantising the dequantised values again gives back the same values; the
 * same codes and scale too, except when the block's largest value rounded
 * down to exactly 224 * scale, where the smaller scale (x - 1) is now the
 * minimal one and every code doubles. */
static void test_mx_idempotence(void)
{
    size_t rows = 64, cols = 96, n = rows * cols, nb = rows * (cols / 32);
    float *x = xmalloc(sizeof(float) * n), *d = xmalloc(sizeof(float) * n),
          *d2 = xmalloc(sizeof(float) * n);
    uint8_t *q = xmalloc(n), *s = xmalloc(nb), *q2 = xmalloc(n), *s2 = xmalloc(nb);
    fill_random(x, rows, cols, 30, 30);
    /* eight blocks with amax 226: scale 2^0, and 226 rounds down to 224 */
    for (size_t r = 0; r < 8; r++) {
        for (size_t c = 0; c < 32; c++)
            x[r * cols + c] = (float)fmax(-100.0, fmin(100.0, test_rng_normal() * 10));
        x[r * cols + 5] = 226.0f;
    }
    lowp_mxfp8_rowwise(x, LOWP_F32, rows, cols, q, s);
    lowp_mxfp8_dequant_rowwise(q, s, rows, cols, d);
    lowp_mxfp8_rowwise(d, LOWP_F32, rows, cols, q2, s2);
    lowp_mxfp8_dequant_rowwise(q2, s2, rows, cols, d2);
    CHECK(memcmp(d, d2, sizeof(float) * n) == 0);
    int shifted = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < cols / 32; b++) {
            size_t k = r * (cols / 32) + b;
            if (s2[k] == s[k]) {
                CHECK(memcmp(q + r * cols + b * 32, q2 + r * cols + b * 32, 32) == 0);
                continue;
            }
            shifted++;
            float m = 0;
            for (size_t c = b * 32; c < b * 32 + 32; c++)
                m = fmaxf(m, fabsf(d[r * cols + c]));
            CHECK(s2[k] == s[k] - 1 && m == 224.0f * lowp_e8m0_to_f32(s[k]));
        }
    CHECK(shifted >= 8); /* the planted blocks */
    /* and quantising once more changes nothing at all */
    uint8_t *q3 = xmalloc(n), *s3 = xmalloc(nb);
    lowp_mxfp8_rowwise(d2, LOWP_F32, rows, cols, q3, s3);
    CHECK(memcmp(q2, q3, n) == 0 && memcmp(s2, s3, nb) == 0);
    free(x), free(d), free(d2), free(q), free(s), free(q2), free(s2), free(q3), free(s3);
}

static void transpose_f(const float *x, size_t rows, size_t cols, float *t)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            t[c * rows + r] = x[r * cols + c];
}

/* rowwise(A) and columnwise(A^T) are the same blocks: codes and scales are
 * transposes of each other and their cuBLASLt layouts are identical. */
static void test_mx_row_equals_col_of_transpose(void)
{
    size_t rows = 70, cols = 45, n = rows * cols;
    float *a = xmalloc(sizeof(float) * n), *at = xmalloc(sizeof(float) * n);
    fill_random(a, rows, cols, 10, 10);
    a[3 * cols + 7] = NAN;             /* one NaN block */
    for (size_t c = 32; c < cols; c++) /* one zero block */
        a[10 * cols + c] = 0.0f;
    transpose_f(a, rows, cols, at);
    size_t kb = lowp_ceil_div(cols, 32);
    uint8_t *q = xmalloc(n), *s = xmalloc(rows * kb), *qt = xmalloc(n), *st = xmalloc(rows * kb);
    lowp_mxfp8_rowwise(a, LOWP_F32, rows, cols, q, s);
    lowp_mxfp8_colwise(at, LOWP_F32, cols, rows, qt, st); /* at is [cols, rows] */
    int same = 1;
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++)
            same &= q[r * cols + c] == qt[c * rows + r];
        for (size_t b = 0; b < kb; b++)
            same &= s[r * kb + b] == st[b * rows + r];
    }
    CHECK(same);
    CHECK(s[3 * kb] == 0xFF && s[10 * kb + 1] == 0);
    size_t zb = lowp_mx_swizzled_bytes(rows, kb);
    uint8_t *z1 = xmalloc(zb), *z2 = xmalloc(zb);
    lowp_mx_swizzle_rowwise(s, rows, cols, z1);
    lowp_mx_swizzle_colwise(st, cols, rows, z2);
    CHECK(memcmp(z1, z2, zb) == 0);
    free(a), free(at), free(q), free(s), free(qt), free(st), free(z1), free(z2);
}

/* A partial block is quantised as if padded with zeros. */
static void test_mx_padding(void)
{
    size_t rows = 40, cols = 40, pc = 64, pr = 64;
    float *x = xmalloc(sizeof(float) * rows * cols), *xp = xmalloc(sizeof(float) * pr * pc);
    fill_random(x, rows, cols, 8, 8);
    memset(xp, 0, sizeof(float) * pr * pc);
    for (size_t r = 0; r < rows; r++)
        memcpy(xp + r * pc, x + r * cols, sizeof(float) * cols);
    uint8_t *q = xmalloc(rows * cols), *s = xmalloc(64 * 2), *qp = xmalloc(pr * pc),
            *sp = xmalloc(pr * 2);
    lowp_mxfp8_rowwise(x, LOWP_F32, rows, cols, q, s);
    lowp_mxfp8_rowwise(xp, LOWP_F32, pr, pc, qp, sp);
    int same = 1;
    for (size_t r = 0; r < rows; r++) {
        same &= memcmp(q + r * cols, qp + r * pc, cols) == 0;
        same &= s[r * 2] == sp[r * 2] && s[r * 2 + 1] == sp[r * 2 + 1];
    }
    CHECK(same);
    lowp_mxfp8_colwise(x, LOWP_F32, rows, cols, q, s);
    lowp_mxfp8_colwise(xp, LOWP_F32, pr, pc, qp, sp);
    same = 1;
    for (size_t r = 0; r < rows; r++)
        same &= memcmp(q + r * cols, qp + r * pc, cols) == 0;
    for (size_t b = 0; b < 2; b++)
        same &= memcmp(s + b * cols, sp + b * pc, cols) == 0;
    CHECK(same);
    free(x), free(xp), free(q), free(s), free(qp), free(sp);
}

/* ---- the cuBLASLt VEC32_UE8M0 layout ---------------------------------------- */

/* PyTorch's to_blocked, step by step: the padded scale matrix viewed as
 * (n_row_blocks, 128, n_col_blocks, 4), permuted to (rb, cb, r, c),
 * flattened, viewed as (-1, 4, 32, 4), axes 1 and 2 swapped, flattened. */
static size_t to_blocked_position(size_t i, size_t j, size_t kblocks)
{
    size_t ncb = (kblocks + 3) / 4;
    size_t rb = i / 128, r = i % 128, cb = j / 4, c = j % 4;
    size_t L = ((rb * ncb + cb) * 128 + r) * 4 + c; /* position after the permute */
    size_t n = L / 512, a = (L / 128) % 4, b = (L / 4) % 32, d = L % 4; /* (-1, 4, 32, 4) */
    return ((n * 32 + b) * 4 + a) * 4 + d;                              /* transpose(1, 2) */
}

static void test_swizzle_layout(void)
{
    /* hand-worked, kblocks = 8 (two K tiles per 128-row band) */
    CHECK(lowp_mx_swizzle_index(0, 0, 8) == 0);
    CHECK(lowp_mx_swizzle_index(0, 1, 8) == 1);
    CHECK(lowp_mx_swizzle_index(0, 3, 8) == 3);
    CHECK(lowp_mx_swizzle_index(1, 0, 8) == 16);
    CHECK(lowp_mx_swizzle_index(31, 0, 8) == 496);
    CHECK(lowp_mx_swizzle_index(32, 0, 8) == 4);
    CHECK(lowp_mx_swizzle_index(96, 2, 8) == 14);
    CHECK(lowp_mx_swizzle_index(127, 3, 8) == 511);
    CHECK(lowp_mx_swizzle_index(0, 4, 8) == 512);    /* next K tile, same rows */
    CHECK(lowp_mx_swizzle_index(128, 0, 8) == 1024); /* next row band after 2 tiles */
    CHECK(lowp_mx_swizzle_index(128, 0, 3) == 512);  /* 3 scale columns pad to one tile */
    CHECK(lowp_mx_swizzled_bytes(1, 1) == 512);
    CHECK(lowp_mx_swizzled_bytes(129, 5) == 256 * 8);
    /* against to_blocked, and a bijection onto the padded buffer */
    static const size_t outers[] = {1, 31, 128, 129, 300};
    for (size_t oi = 0; oi < 5; oi++)
        for (size_t kblocks = 1; kblocks <= 9; kblocks++) {
            size_t outer = outers[oi];
            size_t pr = lowp_round_up(outer, 128), pk = lowp_round_up(kblocks, 4);
            size_t total = lowp_mx_swizzled_bytes(outer, kblocks);
            CHECK(total == pr * pk);
            unsigned char *seen = calloc(total, 1);
            int ok = 1;
            for (size_t i = 0; i < pr; i++)
                for (size_t j = 0; j < pk; j++) {
                    size_t p = lowp_mx_swizzle_index(i, j, kblocks);
                    ok &= p == to_blocked_position(i, j, kblocks) && p < total && !seen[p];
                    if (p < total)
                        seen[p] = 1;
                }
            CHECK_MSG(ok, "outer %zu kblocks %zu", outer, kblocks);
            free(seen);
        }
    /* the packer: values where the index says, zeros in the padding */
    size_t outer = 130, kblocks = 5;
    uint8_t *src = xmalloc(outer * kblocks), *dst = xmalloc(lowp_mx_swizzled_bytes(outer, kblocks));
    for (size_t i = 0; i < outer * kblocks; i++)
        src[i] = (uint8_t)(1 + i % 250);
    lowp_mx_swizzle(src, outer, kblocks, kblocks, 1, dst);
    size_t nonzero = 0;
    for (size_t p = 0; p < lowp_mx_swizzled_bytes(outer, kblocks); p++)
        nonzero += dst[p] != 0;
    CHECK(nonzero == outer * kblocks);
    int ok = 1;
    for (size_t i = 0; i < outer; i++)
        for (size_t j = 0; j < kblocks; j++)
            ok &= dst[lowp_mx_swizzle_index(i, j, kblocks)] == src[i * kblocks + j];
    CHECK(ok);
    free(src), free(dst);
}

/* ---- FP8 block scaling ------------------------------------------------------ */

static void test_fp8blk_hand(void)
{
    float x[128];
    uint8_t q[128];
    float s[4];

    /* amax 448 -> scale 448/448 = 1; 7 = 1.75 * 2^2 -> 0x4E; -448 -> 0xFE */
    memset(x, 0, sizeof x);
    x[0] = 7, x[1] = -448;
    lowp_fp8blk_1x128(x, LOWP_F32, 1, 128, q, s);
    CHECK(s[0] == 1.0f && q[0] == 0x4E && q[1] == 0xFE && q[2] == 0);
    CHECK(s[1] == 0 && s[2] == 0 && s[3] == 0); /* ld = 4: rows 1..3 are padding */

    /* amax 896 -> 2; 7/2 = 3.5 = 1.75 * 2 -> 0x46 */
    x[1] = 896;
    lowp_fp8blk_1x128(x, LOWP_F32, 1, 128, q, s);
    CHECK(s[0] == 2.0f && q[0] == 0x46 && q[1] == 0x7E);

    /* amax 1 -> 1/448 rounded to fp32 (not a power of two); 1/s rounds to
     * 448 or just below, both -> 0x7E */
    memset(x, 0, sizeof x);
    x[5] = -1;
    lowp_fp8blk_1x128(x, LOWP_F32, 1, 128, q, s);
    CHECK(s[0] == 1.0f / 448.0f && q[5] == 0xFE);

    /* zero block: scale 1, codes 0 */
    memset(x, 0, sizeof x);
    x[9] = -0.0f;
    lowp_fp8blk_1x128(x, LOWP_F32, 1, 128, q, s);
    CHECK(s[0] == 1.0f && q[9] == 0);

    /* NaN: scale NaN, codes 0x7F */
    x[3] = NAN;
    lowp_fp8blk_1x128(x, LOWP_F32, 1, 128, q, s);
    CHECK(isnan(s[0]) && q[0] == 0x7F && q[3] == 0x7F);

    /* infinity counts as FLT_MAX: the scale stays finite, inf -> 448 */
    memset(x, 0, sizeof x);
    x[0] = INFINITY, x[1] = 1e38f;
    lowp_fp8blk_1x128(x, LOWP_F32, 1, 128, q, s);
    CHECK(s[0] == FLT_MAX / 448.0f && q[0] == 0x7E && q[1] == lowp_e4m3_from_f32(1e38f / s[0]));

    /* tiny: the scale is kept at FLT_MIN; 2^-130 / 2^-126 = 2^-4 -> 0x18 */
    memset(x, 0, sizeof x);
    x[0] = ldexpf(1.0f, -130);
    lowp_fp8blk_1x128(x, LOWP_F32, 1, 128, q, s);
    CHECK(s[0] == FLT_MIN && q[0] == 0x18);

    /* layouts: 1x128 of [5, 300]: ld 8, 3 K blocks, scale (r, kb) at kb * 8 + r */
    CHECK(lowp_fp8blk_1x128_ld(5) == 8 && lowp_fp8blk_1x128_scales(5, 300) == 24);
    CHECK(lowp_fp8blk_1x128_ld(128) == 128 && lowp_fp8blk_1x128_scales(128, 256) == 256);
    /* 128x128 of [130, 300]: 2 row blocks, 3 K blocks padded to ld 4 */
    CHECK(lowp_fp8blk_128x128_ld(300) == 4 && lowp_fp8blk_128x128_scales(130, 300) == 8);
    CHECK(lowp_fp8blk_128x128_ld(1024) == 8);
    float *m = xmalloc(sizeof(float) * 130 * 300);
    uint8_t *mq = xmalloc(130 * 300);
    float ms[8];
    for (size_t r = 0; r < 130; r++)
        for (size_t c = 0; c < 300; c++)
            m[r * 300 + c] =
                (float)((r / 128) * 3 + c / 128 + 1); /* block (rb, kb) holds rb*3+kb+1 */
    lowp_fp8blk_128x128(m, LOWP_F32, 130, 300, mq, ms);
    for (int rb = 0; rb < 2; rb++) {
        for (int kb = 0; kb < 3; kb++)
            CHECK_MSG(ms[rb * 4 + kb] == (float)(rb * 3 + kb + 1) / 448.0f, "block %d,%d", rb, kb);
        CHECK(ms[rb * 4 + 3] == 0.0f);
    }
    CHECK(mq[0] == 0x7E && mq[129 * 300 + 299] == 0x7E);
    float *ds = xmalloc(sizeof(float) * 5 * 300);
    uint8_t *dq = xmalloc(5 * 300);
    float dsc[24];
    for (size_t r = 0; r < 5; r++)
        for (size_t c = 0; c < 300; c++)
            ds[r * 300 + c] = (float)(r * 10 + c / 128 + 1);
    lowp_fp8blk_1x128(ds, LOWP_F32, 5, 300, dq, dsc);
    int ok = 1;
    for (size_t kb = 0; kb < 3; kb++)
        for (size_t r = 0; r < 8; r++)
            ok &= dsc[kb * 8 + r] == (r < 5 ? (float)(r * 10 + kb + 1) / 448.0f : 0.0f);
    CHECK(ok);
    free(m), free(mq), free(ds), free(dq);
}

/* |dequant - x| within half an E4M3 ulp at |x|/s, times s, plus the two fp32
 * roundings (x / s and code * s); |x|/s <= 448 up to the rounding of s. */
static int fp8blk_close(double v, uint8_t code, float s)
{
    double y = fabs(v) / s;
    double deq = (double)lowp_fp8blk_dequant(code, s);
    double tol = (e4m3_half_ulp(fmin(y, 448.0)) + y * 0x1p-23) * s + fabs(deq) * 0x1p-23;
    return y <= 448.0 * (1 + 0x1p-22) && fabs(deq - v) <= tol;
}

static void test_fp8blk_properties(void)
{
    static const size_t shapes[][2] = {{128, 256}, {130, 300}, {7, 129}, {257, 64}};
    for (size_t si = 0; si < 4; si++) {
        size_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
        float *x = xmalloc(sizeof(float) * n), *xt = xmalloc(sizeof(float) * n);
        uint16_t *h = xmalloc(sizeof(uint16_t) * n);
        fill_random(x, rows, cols, 30, 30);
        to_bf16(x, n, h);
        for (size_t i = 0; i < n; i++)
            x[i] = lowp_bf16_to_f32(h[i]);
        transpose_f(x, rows, cols, xt);
        uint8_t *q = xmalloc(n), *qt = xmalloc(n), *q2 = xmalloc(n);
        size_t ns = lowp_fp8blk_1x128_scales(rows, cols),
               nst = lowp_fp8blk_1x128_scales(cols, rows);
        float *s = xmalloc(sizeof(float) * ns), *st = xmalloc(sizeof(float) * nst),
              *st2 = xmalloc(sizeof(float) * nst);
        /* 1x128 */
        lowp_fp8blk_1x128(h, LOWP_BF16, rows, cols, q, s);
        size_t ld = lowp_fp8blk_1x128_ld(rows);
        int ok = 1;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                ok &= fp8blk_close(x[r * cols + c], q[r * cols + c], s[(c / 128) * ld + r]);
        CHECK_MSG(ok, "1x128 %zux%zu", rows, cols);
        /* the transposed variant equals 1x128 of the transpose */
        lowp_fp8blk_1x128_t(h, LOWP_BF16, rows, cols, qt, st);
        lowp_fp8blk_1x128(xt, LOWP_F32, cols, rows, q2, st2);
        CHECK(memcmp(qt, q2, n) == 0 && memcmp(st, st2, sizeof(float) * nst) == 0);
        /* 128x128 */
        size_t nb = lowp_fp8blk_128x128_scales(rows, cols), ldb = lowp_fp8blk_128x128_ld(cols);
        float *sb = xmalloc(sizeof(float) * nb);
        lowp_fp8blk_128x128(x, LOWP_F32, rows, cols, q, sb);
        ok = 1;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                ok &= fp8blk_close(x[r * cols + c], q[r * cols + c], sb[(r / 128) * ldb + c / 128]);
        CHECK_MSG(ok, "128x128 %zux%zu", rows, cols);
        /* the dequantisers agree with the element formula */
        float *d = xmalloc(sizeof(float) * n);
        lowp_fp8blk_dequant_128x128(q, sb, rows, cols, d);
        ok = 1;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                ok &= d[r * cols + c] ==
                      lowp_e4m3_to_f32(q[r * cols + c]) * sb[(r / 128) * ldb + c / 128];
        CHECK(ok);
        free(x), free(xt), free(h), free(q), free(qt), free(q2), free(s), free(st), free(st2),
            free(sb), free(d);
    }
}

/* ---- exp and SwiGLU --------------------------------------------------------- */

static int64_t ulp_distance(float a, float b)
{
    int64_t ia = (int32_t)f_bits(a), ib = (int32_t)f_bits(b);
    if (ia < 0)
        ia = (int64_t)INT32_MIN - ia;
    if (ib < 0)
        ib = (int64_t)INT32_MIN - ib;
    return ia > ib ? ia - ib : ib - ia;
}

static void test_expf(void)
{
    CHECK(lowp_expf(0.0f) == 1.0f);
    CHECK(lowp_expf(INFINITY) == INFINITY && lowp_expf(-INFINITY) == 0.0f);
    CHECK(isnan(lowp_expf(NAN)));
    CHECK(lowp_expf(89.0f) == INFINITY && lowp_expf(-104.0f) == 0.0f);
    int64_t worst = 0;
    float worst_x = 0;
    for (int i = 0; i <= 400000; i++) {
        float x = -103.9f + (88.7f + 103.9f) * (float)i / 400000.0f;
        if (i % 2)
            x = (float)((test_rng_unit() - 0.5) * 40.0);
        float want = (float)exp((double)x); /* correctly rounded for practical purposes */
        int64_t d = ulp_distance(lowp_expf(x), want);
        if (d > worst)
            worst = d, worst_x = x;
    }
    CHECK_MSG(worst <= 1, "worst %lld ulp at %.9g", (long long)worst, worst_x);
}

static void test_swiglu(void)
{
    /* hand-worked: silu(0) = 0; gate 2^-126-ish irrelevant; silu(100) = 100
     * exactly in fp32 (exp(-100) is below half an ulp of 1) */
    CHECK(lowp_swiglu_prob(0x0000, 0x3F80, 1.0f) == 0x0000);
    CHECK(lowp_swiglu_prob(0x42C8, 0x3F80, 1.0f) == 0x42C8); /* 100 * 1 * 1 */
    CHECK(lowp_swiglu_prob(0x42C8, 0x4000, 0.5f) == 0x42C8); /* 100 * 2 * 0.5 */
    CHECK(lowp_swiglu_prob(0x7FC0, 0x3F80, 1.0f) == 0x7FC0); /* NaN gate */
    CHECK(lowp_swiglu_prob(0xFFC1, 0x3F80, 1.0f) == 0x7FC0); /* negative NaN, payload */
    CHECK(lowp_swiglu_prob(0xFF80, 0x3F80, 1.0f) == 0x7FC0); /* silu(-inf) = -inf / inf */
    CHECK(lowp_swiglu_prob(0x3F80, 0x7F80, 0.0f) == 0x7FC0); /* inf * 0 */
    /* against double precision: within one bf16 ulp (two roundings) */
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        float g = (float)(test_rng_normal() * 4), u = (float)test_rng_normal(), p = (float)test_rng_unit();
        uint16_t gb = lowp_f32_to_bf16(g), ub = lowp_f32_to_bf16(u);
        double gd = lowp_bf16_to_f32(gb), ud = lowp_bf16_to_f32(ub);
        double want = gd / (1 + exp(-gd)) * ud * p;
        float got = lowp_bf16_to_f32(lowp_swiglu_prob(gb, ub, p));
        double tol = fabs(want) * 0x1p-7 + 1e-30;
        if (fabs(got - want) > tol && bad++ < 5)
            CHECK_MSG(0, "g %g u %g p %g: %g vs %g", gd, ud, p, got, want);
    }
    CHECK(bad == 0);
    /* the array version is the scalar one element by element */
    uint16_t gate[6] = {0x3F80, 0xC000, 0x4100, 0x0000, 0xBF00, 0x4040};
    uint16_t up[6] = {0x3F80, 0x3F80, 0xBF80, 0x4000, 0x4000, 0x3E80};
    float prob[2] = {0.25f, 0.75f};
    uint16_t out[6];
    lowp_swiglu_prob_bf16(gate, up, prob, 2, 3, out);
    for (int i = 0; i < 6; i++)
        CHECK(out[i] == lowp_swiglu_prob(gate[i], up[i], prob[i / 3]));
}

static void test_bf16_rounding(void)
{
    CHECK(lowp_f32_to_bf16(1.0f) == 0x3F80);
    CHECK(lowp_f32_to_bf16(bits_f(0x3F808000u)) == 0x3F80); /* tie, even */
    CHECK(lowp_f32_to_bf16(bits_f(0x3F818000u)) == 0x3F82); /* tie, even */
    CHECK(lowp_f32_to_bf16(bits_f(0x3F808001u)) == 0x3F81);
    CHECK(lowp_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(lowp_f32_to_bf16(FLT_MAX) == 0x7F80); /* rounds up to infinity */
    /* every NaN, whatever its sign and payload, is the canonical 0x7FC0 */
    CHECK(lowp_f32_to_bf16(NAN) == 0x7FC0);
    CHECK(lowp_f32_to_bf16(-NAN) == 0x7FC0);
    CHECK(lowp_f32_to_bf16(bits_f(0x7FFFFFFFu)) == 0x7FC0); /* CUDA's arithmetic NaN */
    CHECK(lowp_f32_to_bf16(bits_f(0xFFC00000u)) == 0x7FC0); /* x86's default NaN */
    CHECK(lowp_f32_to_bf16(bits_f(0x7F800001u)) == 0x7FC0);
}

/* MXFP8 emulation: the quantise-dequantise of lowp_mxfp8_fake_bf16 equals
 * the two steps of the quantiser and its dequantiser (then bf16, exact),
 * works in place, and stays within E4M3's half-step (2^-4 relative) of
 * every value not in E4M3's subnormal range of its block. */
static void test_mx_fake(void)
{
    const size_t rows = 70, cols = 100; /* partial blocks both ways */
    uint16_t *x = xmalloc(2 * rows * cols), *y = xmalloc(2 * rows * cols);
    uint16_t *z = xmalloc(2 * rows * cols);
    float *xf = xmalloc(4 * rows * cols), *d = xmalloc(4 * rows * cols);
    uint8_t *q = xmalloc(rows * cols), *sc = xmalloc(rows * cols);
    for (size_t i = 0; i < rows * cols; i++) {
        x[i] = lowp_f32_to_bf16((float)ldexp(test_rng_normal(), (int)(i / 37 % 9) - 4));
        xf[i] = lowp_bf16_to_f32(x[i]);
    }
    for (int colwise = 0; colwise < 2; colwise++) {
        lowp_mxfp8_fake_bf16(x, rows, cols, colwise, y);
        if (colwise) {
            lowp_mxfp8_colwise(x, LOWP_BF16, rows, cols, q, sc);
            lowp_mxfp8_dequant_colwise(q, sc, rows, cols, d);
        } else {
            lowp_mxfp8_rowwise(x, LOWP_BF16, rows, cols, q, sc);
            lowp_mxfp8_dequant_rowwise(q, sc, rows, cols, d);
        }
        size_t same = 0, bounded = 0, checked = 0;
        for (size_t i = 0; i < rows * cols; i++) {
            same += y[i] == lowp_f32_to_bf16(d[i]);
            CHECK_MSG(lowp_bf16_to_f32(y[i]) == d[i], "not exact in bf16 at %zu", i);
            /* the E8M0 scale of i's block: amax/scale in (224, 448] */
            size_t r = i / cols, c = i % cols;
            float s = lowp_e8m0_to_f32(colwise ? sc[(r / 32) * cols + c] : sc[r * ((cols + 31) / 32) + c / 32]);
            if (fabsf(xf[i]) >= s * 0x1p-6f) { /* a normal E4M3 value */
                checked++;
                bounded += fabsf(lowp_bf16_to_f32(y[i]) - xf[i]) <= fabsf(xf[i]) * 0x1p-4f;
            }
        }
        CHECK(same == rows * cols);
        CHECK(checked > rows * cols / 2 && bounded == checked);
        memcpy(z, x, 2 * rows * cols);
        lowp_mxfp8_fake_bf16(z, rows, cols, colwise, z);
        CHECK(memcmp(z, y, 2 * rows * cols) == 0);
    }
    free(x), free(y), free(z), free(xf), free(d), free(q), free(sc);
}

int main(void)
{
    RUN(test_e4m3_all_codes);
    RUN(test_e4m3_ties_and_neighbours);
    RUN(test_e4m3_saturation);
    RUN(test_e4m3_subnormals);
    RUN(test_e8m0);
    RUN(test_mx_scale_hand);
    RUN(test_mx_block_hand);
    RUN(test_mx_properties);
    RUN(test_mx_bf16_equals_f32);
    RUN(test_mx_idempotence);
    RUN(test_mx_row_equals_col_of_transpose);
    RUN(test_mx_padding);
    RUN(test_swizzle_layout);
    RUN(test_fp8blk_hand);
    RUN(test_fp8blk_properties);
    RUN(test_expf);
    RUN(test_swiglu);
    RUN(test_bf16_rounding);
    RUN(test_mx_fake);
    return check_summary("test_lowp");
}

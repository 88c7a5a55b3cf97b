/* The GPU quantisers (trainer/lowp/, each format's folder) against the C reference
 * (trainer/lowp/fp8.h), byte for byte, then their speed.
 *
 * Every case draws fresh random bf16 inputs (magnitudes from 2^-20 to 2^20
 * by 32x32 patch) with planted special blocks (a NaN, a zero block, a tiny
 * block, a huge one, infinities), on aligned shapes, uneven ones and rows
 * that are not a multiple of 128, and also from misaligned pointers (the
 * scalar paths). Every output buffer is filled with 0xAA first and compared
 * whole: codes, scales, and the padded swizzled / fp8-block scale buffers
 * including their padding.
 *
 * Timings: each quantiser on a training-sized matrix, median of 5 after a
 * warm-up, in GB/s of bytes read + written, and against cudaMemcpy
 * device-to-device moving the same number of bytes.
 * Last line: "lowp_cuda: N passed, N failed". Run on a GPU machine:
 *   build/tests/gpu/test_lowp_cuda */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "../../trainer/lowp/fp8.h"
#include "../../trainer/lowp/lowp_cuda.h"
#include "../test_rng.h"
#define GPU_CHECK_NAME "lowp_cuda"
#include "gpu_check.h"


/* ---- random inputs ------------------------------------------------------------- */

/* roughly normal: the sum of four uniforms, centred */
static float rng_gauss(void)
{
    uint64_t u = test_rng_u64();
    float s = 0;
    for (int i = 0; i < 4; i++)
        s += (float)((u >> (16 * i)) & 0xFFFF) / 65536.0f;
    return (s - 2.0f) * 1.7320508f;
}

static float rng_unit(void) { return (float)(test_rng_u64() >> 40) / 16777216.0f; }

static uint16_t bf16(float f) { return lowp_f32_to_bf16(f); }

static void fill_bf16(uint16_t *h, size_t rows, size_t cols, float scale, int specials)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            uint64_t k = ((r / 32) * 1000003u + c / 32 + test_rng_state) * 0x9E3779B97F4A7C15ull;
            int e = (int)((k >> 40) % 41) - 20;
            h[r * cols + c] = bf16(rng_gauss() * scale * (float)ldexp(1.0, e));
        }
    if (!specials)
        return;
#define AT(r, c) h[(size_t)(r)*cols + (size_t)(c)]
    AT(rows > 5 ? 5 : rows - 1, cols > 40 ? 40 : cols - 1) = 0x7FC0; /* NaN */
    for (size_t r = 32; r < 64 && r < rows; r++)                     /* a zero 32x32 block */
        for (size_t c = 64; c < 96 && c < cols; c++)
            AT(r, c) = (r + c) % 3 ? 0x0000 : 0x8000;
    for (size_t r = 64; r < 96 && r < rows; r++) /* tiny (bf16 subnormals among them) */
        for (size_t c = 0; c < 32 && c < cols; c++)
            AT(r, c) = bf16(rng_gauss() * 1e-37f);
    for (size_t r = 96; r < 128 && r < rows; r++) /* huge */
        for (size_t c = 32; c < 64 && c < cols; c++)
            AT(r, c) = bf16((rng_unit() * 0.5f + 0.5f) * (c % 2 ? 3e38f : -3e38f));
    if (rows > 100 && cols > 130) {
        AT(100, 130) = 0x7F80;                         /* +inf */
        AT(101, 200 < cols ? 200 : cols - 1) = 0xFF80; /* -inf */
    }
#undef AT
}

/* ---- device buffers ------------------------------------------------------------ */

/* n bytes of device memory filled with 0xAA, at byte offset `skew` (to
 * exercise the unaligned paths); free with dfree. */
typedef struct {
    unsigned char *base, *p;
    size_t n;
} dbuf;

static dbuf dalloc(size_t n, size_t skew)
{
    dbuf b = {NULL, NULL, n};
    CK("allocating a test buffer", cudaMalloc((void **)&b.base, n + skew + 16));
    CK("poisoning a test buffer", cudaMemset(b.base, 0xAA, n + skew + 16));
    b.p = b.base + skew;
    return b;
}

static dbuf dupload(const void *h, size_t n, size_t skew)
{
    dbuf b = dalloc(n, skew);
    CK("uploading an input", cudaMemcpy(b.p, h, n, cudaMemcpyHostToDevice));
    return b;
}

static void dfree(dbuf *b)
{
    if (b->base)
        cudaFree(b->base);
    b->base = b->p = NULL;
}

/* Device bytes against the reference; names the first difference. */
static int same_bytes(const char *what, const dbuf *b, const void *ref, size_t n)
{
    unsigned char *h = xmalloc(n ? n : 1);
    CK(what, cudaMemcpy(h, b->p, n, cudaMemcpyDeviceToHost));
    const unsigned char *r = ref;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (h[i] != r[i] && bad++ == 0)
            first = i;
    if (bad)
        printf("  %s: %zu of %zu bytes differ, first at %zu: %02x vs reference %02x\n", what, bad,
               n, first, h[first], r[first]);
    free(h);
    return bad == 0;
}

/* Device bytes still the poison of dalloc: an output that was not asked for. */
static int untouched(const char *what, const dbuf *b, size_t n)
{
    unsigned char *h = xmalloc(n ? n : 1);
    CK(what, cudaMemcpy(h, b->p, n, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += h[i] != 0xAA;
    if (bad)
        printf("  %s: %zu of %zu bytes written though not asked for\n", what, bad, n);
    free(h);
    return bad == 0;
}

/* After a call: its kernel's execution errors show up here. */
static int sync_ok(const char *what)
{
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        printf("  FAIL %s: cudaDeviceSynchronize: %s\n", what, cudaGetErrorString(err));
        failed++;
        exit(summary());
    }
    return 1;
}

/* ---- MXFP8 ------------------------------------------------------------------------ */

typedef struct {
    size_t n, rs, cs, rz, cz; /* byte counts */
    uint8_t *rc, *rsc, *rzz, *cc, *csc, *czz;
} mx_ref;

static void mx_ref_alloc(mx_ref *m, size_t rows, size_t cols)
{
    m->n = rows * cols;
    m->rs = rows * lowp_ceil_div(cols, 32);
    m->cs = lowp_ceil_div(rows, 32) * cols;
    m->rz = lowp_mx_swizzled_bytes(rows, lowp_ceil_div(cols, 32));
    m->cz = lowp_mx_swizzled_bytes(cols, lowp_ceil_div(rows, 32));
    m->rc = xmalloc(m->n), m->cc = xmalloc(m->n);
    m->rsc = xmalloc(m->rs), m->csc = xmalloc(m->cs);
    m->rzz = xmalloc(m->rz), m->czz = xmalloc(m->cz);
}

static void mx_ref_compute(mx_ref *m, const uint16_t *x, size_t rows, size_t cols)
{
    lowp_mxfp8_rowwise(x, LOWP_BF16, rows, cols, m->rc, m->rsc);
    lowp_mxfp8_colwise(x, LOWP_BF16, rows, cols, m->cc, m->csc);
    lowp_mx_swizzle_rowwise(m->rsc, rows, cols, m->rzz);
    lowp_mx_swizzle_colwise(m->csc, rows, cols, m->czz);
}

static void mx_ref_free(mx_ref *m)
{
    free(m->rc), free(m->cc), free(m->rsc), free(m->csc), free(m->rzz), free(m->czz);
}

typedef struct {
    dbuf rc, rs, rz, cc, cs, cz;
} mx_dev;

static void mx_dev_alloc(mx_dev *d, const mx_ref *m, size_t skew)
{
    d->rc = dalloc(m->n, skew), d->rs = dalloc(m->rs, skew), d->rz = dalloc(m->rz, skew);
    d->cc = dalloc(m->n, skew), d->cs = dalloc(m->cs, skew), d->cz = dalloc(m->cz, skew);
}

static lowp_mx_out mx_dev_out(mx_dev *d)
{
    lowp_mx_out o = {d->rc.p, d->rs.p, d->rz.p, d->cc.p, d->cs.p, d->cz.p};
    return o;
}

static int mx_dev_check(const char *what, mx_dev *d, const mx_ref *m)
{
    char name[160];
    int ok = 1;
#define ONE(buf, ref, len, label)                                                                  \
    snprintf(name, sizeof name, "%s %s", what, label);                                             \
    ok &= same_bytes(name, &d->buf, m->ref, m->len);
    ONE(rc, rc, n, "row codes")
    ONE(rs, rsc, rs, "row scales")
    ONE(rz, rzz, rz, "row swizzled scales")
    ONE(cc, cc, n, "column codes")
    ONE(cs, csc, cs, "column scales")
    ONE(cz, czz, cz, "column swizzled scales")
#undef ONE
    return ok;
}

static void mx_dev_free(mx_dev *d)
{
    dfree(&d->rc), dfree(&d->rs), dfree(&d->rz), dfree(&d->cc), dfree(&d->cs), dfree(&d->cz);
}

static void test_mxfp8(size_t rows, size_t cols, size_t skew)
{
    uint16_t *x = xmalloc(sizeof(uint16_t) * rows * cols);
    fill_bf16(x, rows, cols, 1.0f, 1);
    mx_ref m;
    mx_ref_alloc(&m, rows, cols);
    mx_ref_compute(&m, x, rows, cols);
    dbuf dx = dupload(x, sizeof(uint16_t) * rows * cols, skew * 2);
    mx_dev d;
    mx_dev_alloc(&d, &m, skew);
    lowp_mx_out o = mx_dev_out(&d);
    moe_err e = {{0}};
    char what[96];
    snprintf(what, sizeof what, "lowp_cuda_mxfp8 (mxfp8_rowcol_kernel) %zux%zu%s", rows, cols,
             skew ? " (misaligned)" : "");
    int ok = lowp_cuda_mxfp8((const uint16_t *)dx.p, rows, cols, &o, 0, &e) == 0;
    if (!ok)
        printf("  %s\n", e.msg);
    ok = ok && sync_ok(what) && mx_dev_check(what, &d, &m);
    result(ok, "%s", what);
    mx_dev_free(&d);
    /* only the rowwise copy: the other buffers stay untouched */
    if (!skew) {
        mx_dev_alloc(&d, &m, 0);
        lowp_mx_out only = {d.rc.p, d.rs.p, NULL, NULL, NULL, d.cz.p};
        ok = lowp_cuda_mxfp8((const uint16_t *)dx.p, rows, cols, &only, 0, &e) == 0;
        unsigned char *poison = xmalloc(m.n);
        memset(poison, 0xAA, m.n);
        /* & rather than &&: every buffer is compared, so a failure shows them all */
        ok = ok && sync_ok(what) &&
             (same_bytes("row codes", &d.rc, m.rc, m.n) &
              same_bytes("row scales", &d.rs, m.rsc, m.rs) &
              same_bytes("column swizzled scales", &d.cz, m.czz, m.cz) &
              same_bytes("untouched column codes", &d.cc, poison, m.n));
        free(poison);
        result(ok, "%s, some outputs NULL", what);
        mx_dev_free(&d);
    }
    dfree(&dx);
    mx_ref_free(&m);
    free(x);
}

static const char *silu_how = ""; /* the label of a run with silu computed */

static void test_swiglu_mxfp8(size_t rows, size_t f, size_t skew)
{
    size_t n = rows * f;
    uint16_t *g = xmalloc(2 * n), *u = xmalloc(2 * n), *y = xmalloc(2 * n);
    float *p = xmalloc(sizeof(float) * rows);
    fill_bf16(g, rows, f, 2.0f, 0);
    fill_bf16(u, rows, f, 1.0f, 1);
    for (size_t r = 0; r < rows; r++)
        p[r] = r % 17 == 3 ? 0.0f : rng_unit(); /* some rows unrouted: zero blocks */
    if (n > 7)
        g[7] = 0x7FC0; /* a NaN gate */
    lowp_swiglu_prob_bf16(g, u, p, rows, f, y);
    mx_ref m;
    mx_ref_alloc(&m, rows, f);
    mx_ref_compute(&m, y, rows, f);
    dbuf dg = dupload(g, 2 * n, 2 * skew), du = dupload(u, 2 * n, 2 * skew);
    dbuf dp = dupload(p, sizeof(float) * rows, 0), dy = dalloc(2 * n, 2 * skew);
    mx_dev d;
    mx_dev_alloc(&d, &m, skew);
    lowp_mx_out o = mx_dev_out(&d);
    moe_err e = {{0}};
    char what[96];
    snprintf(what, sizeof what, "lowp_cuda_swiglu_mxfp8 (swiglu_mxfp8_kernel) %zux%zu%s%s", rows,
             f, skew ? " (misaligned)" : "", silu_how);
    int ok = lowp_cuda_swiglu_mxfp8((const uint16_t *)dg.p, (const uint16_t *)du.p,
                                    (const float *)dp.p, rows, f, (uint16_t *)dy.p, &o, 0, &e) == 0;
    if (!ok)
        printf("  %s\n", e.msg);
    ok = ok && sync_ok(what) &&
         (same_bytes("bf16 output", &dy, y, 2 * n) & mx_dev_check(what, &d, &m));
    result(ok, "%s", what);
    dfree(&dg), dfree(&du), dfree(&dp), dfree(&dy);
    mx_dev_free(&d);
    mx_ref_free(&m);
    free(g), free(u), free(y), free(p);
}

/* ---- FP8 blocks ---------------------------------------------------------------------- */

static void test_fp8blk(size_t rows, size_t cols, size_t skew)
{
    size_t n = rows * cols;
    uint16_t *x = xmalloc(2 * n);
    fill_bf16(x, rows, cols, 1.0f, 1);
    size_t ns = lowp_fp8blk_1x128_scales(rows, cols), nt = lowp_fp8blk_1x128_scales(cols, rows);
    size_t nb = lowp_fp8blk_128x128_scales(rows, cols);
    uint8_t *q = xmalloc(n), *qt = xmalloc(n), *qb = xmalloc(n);
    float *s = xmalloc(4 * ns), *st = xmalloc(4 * nt), *sb = xmalloc(4 * nb);
    lowp_fp8blk_1x128(x, LOWP_BF16, rows, cols, q, s);
    lowp_fp8blk_1x128_t(x, LOWP_BF16, rows, cols, qt, st);
    lowp_fp8blk_128x128(x, LOWP_BF16, rows, cols, qb, sb);
    dbuf dx = dupload(x, 2 * n, 2 * skew);
    dbuf dq = dalloc(n, skew), dqt = dalloc(n, skew), dqb = dalloc(n, skew);
    dbuf ds = dalloc(4 * ns, 4 * skew), dst = dalloc(4 * nt, 4 * skew),
         dsb = dalloc(4 * nb, 4 * skew);
    moe_err e = {{0}};
    char what[96];
    snprintf(what, sizeof what, "lowp_cuda_fp8blk_1x128 (fp8blk_1x128_kernel) %zux%zu%s", rows,
             cols, skew ? " (misaligned)" : "");
    int ok = lowp_cuda_fp8blk_1x128((const uint16_t *)dx.p, rows, cols, dq.p, (float *)ds.p, dqt.p,
                                    (float *)dst.p, 0, &e) == 0;
    if (!ok)
        printf("  %s\n", e.msg);
    ok = ok && sync_ok(what) &&
         (same_bytes("codes", &dq, q, n) & same_bytes("scales", &ds, s, 4 * ns) &
          same_bytes("transposed codes", &dqt, qt, n) &
          same_bytes("transposed scales", &dst, st, 4 * nt));
    result(ok, "%s (rowwise and transposed)", what);
    snprintf(what, sizeof what, "lowp_cuda_fp8blk_128x128 (fp8blk_128x128_kernel) %zux%zu%s", rows,
             cols, skew ? " (misaligned)" : "");
    ok = lowp_cuda_fp8blk_128x128((const uint16_t *)dx.p, rows, cols, dqb.p, (float *)dsb.p, NULL,
                                  NULL, 0, &e) == 0;
    if (!ok)
        printf("  %s\n", e.msg);
    ok = ok && sync_ok(what) &&
         (same_bytes("codes", &dqb, qb, n) & same_bytes("scales", &dsb, sb, 4 * nb));
    result(ok, "%s", what);

    /* the transposed 128x128 operand, alone and beside the plain one: must
     * equal quantising x^T itself */
    uint16_t *xt = xmalloc(2 * n);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            xt[c * rows + r] = x[r * cols + c];
    size_t nbt = lowp_fp8blk_128x128_scales(cols, rows);
    uint8_t *qbt = xmalloc(n);
    float *sbt = xmalloc(4 * nbt);
    lowp_fp8blk_128x128(xt, LOWP_BF16, cols, rows, qbt, sbt);
    for (int both = 0; both < 2; both++) {
        dbuf dqbt = dalloc(n, skew), dsbt = dalloc(4 * nbt, 4 * skew);
        dbuf dq2 = dalloc(n, skew), ds2 = dalloc(4 * nb, 4 * skew);
        snprintf(what, sizeof what, "lowp_cuda_fp8blk_128x128 %s %zux%zu%s",
                 both ? "plain + transposed" : "transposed only", rows, cols,
                 skew ? " (misaligned)" : "");
        ok = lowp_cuda_fp8blk_128x128((const uint16_t *)dx.p, rows, cols, both ? dq2.p : NULL,
                                      both ? (float *)ds2.p : NULL, dqbt.p, (float *)dsbt.p, 0,
                                      &e) == 0;
        if (!ok)
            printf("  %s\n", e.msg);
        ok = ok && sync_ok(what) &&
             (same_bytes("transposed codes", &dqbt, qbt, n) &
              same_bytes("transposed scales", &dsbt, sbt, 4 * nbt));
        if (both)
            ok = ok && (same_bytes("codes", &dq2, qb, n) & same_bytes("scales", &ds2, sb, 4 * nb));
        else
            ok = ok && untouched("codes", &dq2, n);
        result(ok, "%s", what);
        dfree(&dqbt), dfree(&dsbt), dfree(&dq2), dfree(&ds2);
    }
    free(xt), free(qbt), free(sbt);
    dfree(&dx), dfree(&dq), dfree(&dqt), dfree(&dqb), dfree(&ds), dfree(&dst), dfree(&dsb);
    free(x), free(q), free(qt), free(qb), free(s), free(st), free(sb);
}

/* MXFP8 quantise-dequantise (the mxfp8_emulated precision), both directions */
static void test_mx_fake(size_t rows, size_t cols)
{
    size_t n = rows * cols;
    uint16_t *x = xmalloc(2 * n), *y = xmalloc(2 * n);
    fill_bf16(x, rows, cols, 1.0f, 1);
    dbuf dx = dupload(x, 2 * n, 0);
    for (int colwise = 0; colwise < 2; colwise++) {
        lowp_mxfp8_fake_bf16(x, rows, cols, colwise, y);
        dbuf dy = dalloc(2 * n, 0);
        moe_err e = {{0}};
        char what[96];
        snprintf(what, sizeof what, "lowp_cuda_mxfp8_fake_bf16 (mxfp8_fake_kernel) %zux%zu %s", rows,
                 cols, colwise ? "columnwise" : "rowwise");
        int ok = lowp_cuda_mxfp8_fake_bf16((const uint16_t *)dx.p, rows, cols, colwise,
                                           (uint16_t *)dy.p, 0, &e) == 0;
        if (!ok)
            printf("  %s\n", e.msg);
        ok = ok && sync_ok(what) && same_bytes("values", &dy, y, 2 * n);
        result(ok, "%s", what);
        dfree(&dy);
    }
    dfree(&dx);
    free(x), free(y);
}

static void test_e4m3_hw(void)
{
    unsigned long long bad = 0, bad_nan = 0;
    uint32_t first = 0;
    moe_err e = {{0}};
    if (lowp_cuda_e4m3_hw_check(&bad, &bad_nan, &first, &e) != 0) {
        printf("  %s\n", e.msg);
        result(0, "e4m3 integer encoder vs cvt.rn.satfinite.e4m3x2.f32");
        return;
    }
    if (bad)
        printf("  %llu non-NaN inputs differ, first bit pattern %08x\n", bad, first);
    printf("  %llu NaN inputs convert differently (informational)\n", bad_nan);
    result(bad == 0, "e4m3 integer encoder vs cvt.rn.satfinite.e4m3x2.f32 on all 2^32 inputs");
}

static void test_silu_div(void)
{
    unsigned long long bad = 0;
    uint32_t first = 0;
    moe_err e = {{0}};
    if (lowp_cuda_silu_check(&bad, &first, &e) != 0) {
        printf("  %s\n", e.msg);
        result(0, "SwiGLU silu division: reciprocal + correction vs __fdiv_rn");
        return;
    }
    if (bad)
        printf("  %llu gates give another silu, first bf16 %04x\n", bad, first);
    result(bad == 0, "SwiGLU silu division: reciprocal + correction vs __fdiv_rn on all 65536 "
                     "bf16 gates");
}

/* the SwiGLU kernel's silu table against the C reference's lowp_silu on
 * every bf16 gate (NaN gates: NaN either way, payloads aside) */
static void test_silu_table(void)
{
    float *t = xmalloc(65536 * sizeof(float));
    for (int i = 0; i < 65536; i++)
        t[i] = 1234.5f; /* poison */
    moe_err e = {{0}};
    if (lowp_cuda_silu_table(t, 0, &e) != 0) {
        printf("  %s\n", e.msg);
        result(0, "silu table");
        free(t);
        return;
    }
    unsigned bad = 0, first = 0;
    for (uint32_t g = 0; g < 65536; g++) {
        float ref = lowp_silu((uint16_t)g);
        uint32_t a, b;
        memcpy(&a, &t[g], 4), memcpy(&b, &ref, 4);
        int same = ref != ref ? t[g] != t[g] : a == b;
        if (!same && bad++ == 0)
            first = g;
    }
    if (bad)
        printf("  %u gates differ, first bf16 %04x: table %a, lowp_silu %a\n", bad, first,
               t[first], lowp_silu((uint16_t)first));
    result(bad == 0, "silu table vs the C reference's lowp_silu on all 65536 bf16 gates");
    free(t);
}

static void test_fp8blk_div(void)
{
    unsigned long long bad = 0, bad_q = 0;
    uint32_t first = 0;
    moe_err e = {{0}};
    if (lowp_cuda_fp8blk_div_check(&bad, &bad_q, &first, &e) != 0) {
        printf("  %s\n", e.msg);
        result(0, "fp8_block division: reciprocal + correction vs __fdiv_rn");
        return;
    }
    if (bad)
        printf("  %llu pairs give other E4M3 codes, first amax %04x value %04x (bf16)\n", bad,
               first >> 16, first & 0xFFFFu);
    printf("  %llu pairs give other fp32 quotients (informational); the kernels use %s\n", bad_q,
           lowp_cuda_uses_fast_div() ? "the fast division" : "__fdiv_rn");
    result(bad == 0, "fp8_block division: reciprocal + correction vs __fdiv_rn, E4M3 codes of "
                     "every bf16 (amax, value) pair");
}

/* ---- timings ----------------------------------------------------------------------------- */

enum { OP_MX, OP_SWIGLU, OP_BLK1, OP_BLK2, OP_COPY };

typedef struct {
    int op;
    size_t rows, cols;
    const uint16_t *x, *g, *u;
    const float *p;
    lowp_mx_out mx;
    uint8_t *q, *qt;
    float *s, *st;
    void *dst;
    const void *src;
    size_t copy_bytes;
} bench;

static int run_op(const bench *b)
{
    moe_err e = {{0}};
    int rc = 0;
    switch (b->op) {
    case OP_MX:
        rc = lowp_cuda_mxfp8(b->x, b->rows, b->cols, &b->mx, 0, &e);
        break;
    case OP_SWIGLU:
        rc = lowp_cuda_swiglu_mxfp8(b->g, b->u, b->p, b->rows, b->cols, NULL, &b->mx, 0, &e);
        break;
    case OP_BLK1:
        rc = lowp_cuda_fp8blk_1x128(b->x, b->rows, b->cols, b->q, b->s, b->qt, b->st, 0, &e);
        break;
    case OP_BLK2:
        rc = lowp_cuda_fp8blk_128x128(b->x, b->rows, b->cols, b->q, b->s, b->qt, b->st, 0, &e);
        break;
    case OP_COPY:
        if (cudaMemcpyAsync(b->dst, b->src, b->copy_bytes, cudaMemcpyDeviceToDevice, 0) !=
            cudaSuccess)
            rc = moe_errf(&e, "cudaMemcpyAsync: %s", cudaGetErrorString(cudaGetLastError()));
        break;
    }
    if (rc)
        printf("  %s\n", e.msg);
    return rc;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* median milliseconds of 5 runs after 2 warm-up runs; < 0 on failure */
static float time_op(const char *name, const bench *b)
{
    cudaEvent_t t0, t1;
    CK(name, cudaEventCreate(&t0));
    CK(name, cudaEventCreate(&t1));
    float ms[5];
    for (int i = 0; i < 2; i++)
        if (run_op(b))
            return -1;
    CK(name, cudaDeviceSynchronize());
    for (int i = 0; i < 5; i++) {
        CK(name, cudaEventRecord(t0, 0));
        if (run_op(b))
            return -1;
        CK(name, cudaEventRecord(t1, 0));
        CK(name, cudaEventSynchronize(t1));
        CK(name, cudaEventElapsedTime(&ms[i], t0, t1));
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    qsort(ms, 5, sizeof ms[0], cmp_float);
    return ms[2];
}

/* Time b, then a device copy that reads and writes the same number of bytes. */
static void report(const char *name, bench *b, size_t traffic, void *cpy_a, void *cpy_b)
{
    float t = time_op(name, b);
    bench c = {0};
    c.op = OP_COPY, c.dst = cpy_b, c.src = cpy_a, c.copy_bytes = traffic / 2;
    float tc = time_op("cudaMemcpy device to device", &c);
    int ok = t > 0 && tc > 0;
    if (ok) {
        double gbs = traffic / (t * 1e-3) / 1e9, cgbs = traffic / (tc * 1e-3) / 1e9;
        printf("  time %s %zux%zu: %.3f ms, %.0f GB/s read+written (%.0f%% of a device copy of "
               "%.0f MB: %.3f ms, %.0f GB/s)\n",
               name, b->rows, b->cols, t, gbs, 100.0 * gbs / cgbs, traffic / 2 / 1e6, tc, cgbs);
    }
    result(ok, "timing %s", name);
}

static void timings(void)
{
    const size_t R = 16384, C = 4096, N = R * C;      /* activations: tokens x hidden */
    const size_t SR = 8192, SF = 14336, SN = SR * SF; /* expert hidden: tokens x ffn */
    uint16_t *h = xmalloc(2 * SN);
    fill_bf16(h, SR, SF, 1.0f, 0);
    dbuf x = dupload(h, 2 * N, 0), g = dupload(h, 2 * SN, 0), u = dupload(h, 2 * SN, 0);
    float *hp = xmalloc(sizeof(float) * SR);
    for (size_t r = 0; r < SR; r++)
        hp[r] = rng_unit();
    dbuf p = dupload(hp, sizeof(float) * SR, 0);
    free(h), free(hp);

    /* output buffers sized for the larger (SwiGLU) case */
    size_t kb = lowp_ceil_div(SF, 32), rb = lowp_ceil_div(SR, 32);
    dbuf rc = dalloc(SN, 0), cc = dalloc(SN, 0), rs = dalloc(SR * kb, 0), cs = dalloc(rb * SF, 0);
    dbuf rz = dalloc(lowp_mx_swizzled_bytes(SR, kb), 0),
         cz = dalloc(lowp_mx_swizzled_bytes(SF, rb), 0);
    dbuf s1 = dalloc(4 * lowp_fp8blk_1x128_scales(R, C), 0),
         s2 = dalloc(4 * lowp_fp8blk_1x128_scales(C, R), 0);
    size_t copy_cap = 4 * SN; /* half the largest traffic, rounded up */
    dbuf ca = dalloc(copy_cap, 0), cb = dalloc(copy_cap, 0);
    lowp_mx_out mx = {rc.p, rs.p, rz.p, cc.p, cs.p, cz.p};

    bench b = {0};
    b.op = OP_MX, b.rows = R, b.cols = C, b.x = (const uint16_t *)x.p, b.mx = mx;
    size_t mxs = 2 * R * lowp_ceil_div(C, 32) + lowp_mx_swizzled_bytes(R, lowp_ceil_div(C, 32)) +
                 lowp_mx_swizzled_bytes(C, lowp_ceil_div(R, 32));
    report("mxfp8_rowcol_kernel (rowwise+columnwise, swizzled scales)", &b, 2 * N + 2 * N + mxs,
           ca.p, cb.p);

    b.op = OP_SWIGLU, b.rows = SR, b.cols = SF, b.g = (const uint16_t *)g.p,
    b.u = (const uint16_t *)u.p;
    b.p = (const float *)p.p;
    size_t sws = 2 * SR * kb + lowp_mx_swizzled_bytes(SR, kb) + lowp_mx_swizzled_bytes(SF, rb);
    report("swiglu_mxfp8_kernel (silu(gate)*up*prob -> mxfp8 both copies)", &b,
           4 * SN + 4 * SR + 2 * SN + sws, ca.p, cb.p);
    lowp_cuda_set_silu_lookup(0);
    report("swiglu_mxfp8_kernel (silu computed, not looked up)", &b, 4 * SN + 4 * SR + 2 * SN + sws,
           ca.p, cb.p);
    lowp_cuda_set_silu_lookup(1);

    b.op = OP_BLK1, b.rows = R, b.cols = C, b.q = rc.p, b.qt = cc.p, b.s = (float *)s1.p,
    b.st = (float *)s2.p;
    size_t b1s = 4 * (lowp_fp8blk_1x128_scales(R, C) + lowp_fp8blk_1x128_scales(C, R));
    report("fp8blk_1x128_kernel (rowwise + transposed)", &b, 2 * N + 2 * N + b1s, ca.p, cb.p);
    /* the trainer's two other uses: an activation for fprop (rowwise), the
     * wgrad's x (transposed) */
    b.qt = NULL, b.st = NULL;
    report("fp8blk_1x128_kernel (rowwise only)", &b,
           2 * N + N + 4 * lowp_fp8blk_1x128_scales(R, C), ca.p, cb.p);
    b.q = NULL, b.s = NULL, b.qt = cc.p, b.st = (float *)s2.p;
    report("fp8blk_1x128_kernel (transposed only)", &b,
           2 * N + N + 4 * lowp_fp8blk_1x128_scales(C, R), ca.p, cb.p);
    b.q = rc.p, b.s = (float *)s1.p;

    b.op = OP_BLK2, b.qt = NULL, b.st = NULL;
    report("fp8blk_128x128_kernel", &b, 2 * N + N + 4 * lowp_fp8blk_128x128_scales(R, C), ca.p,
           cb.p);
    b.q = NULL, b.s = NULL, b.qt = cc.p, b.st = (float *)s2.p;
    report("fp8blk_128x128_kernel (transposed only: the dgrad weight)", &b,
           2 * N + N + 4 * lowp_fp8blk_128x128_scales(C, R), ca.p, cb.p);

    dfree(&x), dfree(&g), dfree(&u), dfree(&p), dfree(&rc), dfree(&cc), dfree(&rs), dfree(&cs);
    dfree(&rz), dfree(&cz), dfree(&s1), dfree(&s2), dfree(&ca), dfree(&cb);
}

int main(void)
{
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        printf("  FAIL no CUDA device: %s\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "none");
        failed++;
        return summary();
    }
    struct cudaDeviceProp prop;
    CK("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, compute capability %d.%d; E4M3 conversion in the kernels: %s\n", prop.name,
           prop.major, prop.minor,
           lowp_cuda_uses_hw_cvt() ? "cvt.rn.satfinite.e4m3x2.f32" : "integer encoder");
    test_rng_seed_fresh();

    static const size_t mx_shapes[][2] = {{256, 512}, {77, 200},  {300, 96},  {130, 1000},
                                          {1, 33},    {129, 260}, {64, 4096}, {1000, 1056}};
    for (size_t i = 0; i < sizeof mx_shapes / sizeof mx_shapes[0]; i++)
        test_mxfp8(mx_shapes[i][0], mx_shapes[i][1], 0);
    test_mxfp8(256, 512, 1);
    test_mxfp8(130, 1000, 1);

    static const size_t sw_shapes[][2] = {
        {256, 512}, {77, 200}, {300, 96}, {129, 260}, {513, 1408}};
    for (size_t i = 0; i < sizeof sw_shapes / sizeof sw_shapes[0]; i++)
        test_swiglu_mxfp8(sw_shapes[i][0], sw_shapes[i][1], 0);
    test_swiglu_mxfp8(256, 512, 1);
    lowp_cuda_set_silu_lookup(0); /* the computed silu the table replaces: the same bytes */
    silu_how = " (silu computed)";
    test_swiglu_mxfp8(513, 1408, 0);
    test_swiglu_mxfp8(77, 200, 0);
    lowp_cuda_set_silu_lookup(1);
    silu_how = "";

    static const size_t bk_shapes[][2] = {{256, 384},   {200, 300}, {130, 1024},
                                          {129, 260},   {1, 128},   {384, 4096},
                                          {1000, 1056}, {201, 299}, {77, 130},
                                          {64, 128},    {128, 64},  {96, 200}};
    for (size_t i = 0; i < sizeof bk_shapes / sizeof bk_shapes[0]; i++)
        test_fp8blk(bk_shapes[i][0], bk_shapes[i][1], 0);
    test_fp8blk(256, 384, 1);
    test_mx_fake(256, 384);
    test_mx_fake(77, 130);
    test_mx_fake(1000, 1056);

    test_e4m3_hw();
    test_fp8blk_div();
    test_silu_div();
    test_silu_table();
    timings();
    return summary();
}

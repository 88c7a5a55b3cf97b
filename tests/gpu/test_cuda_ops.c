/* Every CUDA backend op against the CPU reference, through the same backend
 * table: fresh random inputs (rounded to bf16 so both sides see the same
 * numbers), GPU outputs poisoned with NaN before each run, errors as
 * ||gpu - cpu|| / ||cpu|| with bf16 tolerances. MoE cases include uneven
 * counts, idle experts and one expert taking every token.
 * Run on a GPU machine: build/tests/gpu/test_cuda_ops [seed] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <time.h>

#include "../../trainer/backend/backend.h"
#include "../../trainer/numerics/init_normal.h"
#include "../../trainer/lowp/fp8.h"
#include <stdint.h>
#include "../check.h"

static moe_backend *cpu, *gpu;
/* the GPU backend's run options (runtime.* in a run), as a case sets them */
static moe_backend_opts run_opts;
static void apply_run_opts(void)
{
    moe_err e = {{0}};
    CHECK_MSG(gpu->set_run_opts(gpu, &run_opts, &e) == 0, "set_run_opts: %s", e.msg);
}
static unsigned long long rng_state = 1;
static double urand(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((rng_state >> 11) + 0.5) * 0x1.0p-53;
}
static float nrand(void) { return (float)(sqrt(-2 * log(urand())) * cos(6.283185307 * urand())); }
static float to_bf16(float x)
{
    unsigned u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

typedef struct {
    void *c, *g;
    size_t n;
    int is_act;
} pair;

static float *host_rand(size_t n, float scale)
{
    float *h = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        h[i] = to_bf16(scale * nrand());
    return h;
}

static pair mk(size_t n, int is_act, const float *init)
{
    moe_err e;
    pair p = {NULL, NULL, n, is_act};
    size_t cb = is_act ? cpu->act_bytes(cpu, n) : n * sizeof(float);
    size_t gb = is_act ? gpu->act_bytes(gpu, n) : n * sizeof(float);
    p.c = cpu->alloc(cpu, cb ? cb : 16, &e);
    p.g = gpu->alloc(gpu, gb ? gb : 16, &e);
    float *nanv = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        nanv[i] = NAN;
    const float *src = init ? init : nanv;
    if (is_act) {
        cpu->act_from_real(cpu, p.c, src, n, &e);
        gpu->act_from_real(gpu, p.g, src, n, &e);
    } else {
        cpu->upload(cpu, p.c, src, n * sizeof(float), &e);
        gpu->upload(gpu, p.g, src, n * sizeof(float), &e);
    }
    free(nanv);
    return p;
}
static pair mk_rand(size_t n, int is_act, float scale)
{
    float *h = host_rand(n, scale);
    pair p = mk(n, is_act, h);
    free(h);
    return p;
}
static pair mk_i32(size_t n, const int32_t *v)
{
    moe_err e;
    pair p = {cpu->alloc(cpu, n * 4 + 4, &e), gpu->alloc(gpu, n * 4 + 4, &e), n, 0};
    cpu->upload(cpu, p.c, v, n * 4, &e);
    gpu->upload(gpu, p.g, v, n * 4, &e);
    return p;
}
static void rm(pair *p)
{
    cpu->free(cpu, p->c);
    gpu->free(gpu, p->g);
}
static void poison(pair *p)
{
    pair q = mk(0, 0, NULL);
    (void)q;
    moe_err e;
    float *nanv = malloc(sizeof(float) * p->n);
    for (size_t i = 0; i < p->n; i++)
        nanv[i] = NAN;
    if (p->is_act)
        gpu->act_from_real(gpu, p->g, nanv, p->n, &e);
    else
        gpu->upload(gpu, p->g, nanv, p->n * sizeof(float), &e);
    free(nanv);
    rm(&q);
}

/* rel error of gpu vs cpu over n values; NaN anywhere fails */
static double cmp(const char *what, pair *p, double tol)
{
    moe_err e = {{0}};
    float *a = malloc(sizeof(float) * p->n), *b = malloc(sizeof(float) * p->n);
    int rc;
    if (p->is_act) {
        cpu->act_to_real(cpu, a, p->c, p->n, &e);
        rc = gpu->act_to_real(gpu, b, p->g, p->n, &e);
    } else {
        cpu->download(cpu, a, p->c, p->n * sizeof(float), &e);
        rc = gpu->download(gpu, b, p->g, p->n * sizeof(float), &e);
    }
    if (rc)
        fprintf(stderr, "  %s: %s\n", what, e.msg);
    double num = 0, den = 0;
    size_t nans = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (!isfinite(b[i])) {
            nans++;
            continue;
        }
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    int ok = rc == 0 && nans == 0 && rel <= tol;
    fprintf(stderr, "  %-34s rel %.2e (tol %.0e)%s%s\n", what, rel, tol,
            nans ? " NON-FINITE/UNWRITTEN" : "", ok ? "" : "  <-- FAIL");
    CHECK_MSG(ok, "%s", what);
    free(a);
    free(b);
    return rel;
}

#define BOTH(call_c, call_g)                                                                       \
    do {                                                                                           \
        call_c;                                                                                    \
        call_g;                                                                                    \
    } while (0)
#define C(p) ((p).c)
#define G(p) ((p).g)

static const double TB = 2e-2; /* bf16 storage, fp32 accumulation */

/* C a multiple of 8 takes the norms' and gathers' 16-byte path, other C the scalar one */
static void dense_case(int N, int C, int OC, int V)
{
    fprintf(stderr, "  dense N=%d C=%d OC=%d V=%d\n", N, C, OC, V);
    pair x = mk_rand((size_t)N * C, 1, 1), w = mk_rand((size_t)OC * C, 1, 0.1f);
    pair g1 = mk_rand(C, 1, 0.3f), y = mk((size_t)N * OC, 1, NULL);
    for (int i = 0; i < 1; i++) {
        float *h = host_rand(C, 0.2f);
        for (int c = 0; c < C; c++)
            h[c] = to_bf16(1 + h[c]);
        rm(&g1);
        g1 = mk(C, 1, h);
        free(h);
    }
    poison(&y);
    BOTH(cpu->matmul_fwd(cpu, C(y), C(x), C(w), N, C, OC), gpu->matmul_fwd(gpu, G(y), G(x), G(w), N, C, OC));
    cmp("matmul_fwd", &y, TB);
    pair dy = mk_rand((size_t)N * OC, 1, 1), dx = mk((size_t)N * C, 1, NULL), dw = mk((size_t)OC * C, 0, NULL);
    float *zero = calloc((size_t)OC * C, sizeof(float));
    rm(&dw);
    dw = mk((size_t)OC * C, 0, zero);
    poison(&dx);
    BOTH(cpu->matmul_bwd(cpu, C(dx), C(dw), C(dy), C(x), C(w), N, C, OC, 0),
         gpu->matmul_bwd(gpu, G(dx), G(dw), G(dy), G(x), G(w), N, C, OC, 0));
    cmp("matmul_bwd dx", &dx, TB);
    cmp("matmul_bwd dw", &dw, TB);
    BOTH(cpu->matmul_bwd(cpu, C(dx), C(dw), C(dy), C(x), C(w), N, C, OC, 1),
         gpu->matmul_bwd(gpu, G(dx), G(dw), G(dy), G(x), G(w), N, C, OC, 1));
    cmp("matmul_bwd dx (accumulate)", &dx, TB);
    cmp("matmul_bwd dw (accumulate)", &dw, TB);

    /* norms */
    pair out = mk((size_t)N * C, 1, NULL), rstd = mk(N, 0, NULL), delta = mk_rand((size_t)N * C, 1, 1);
    pair resid = mk((size_t)N * C, 1, NULL);
    poison(&out);
    poison(&rstd);
    BOTH(cpu->rmsnorm_fwd(cpu, C(out), C(rstd), C(x), C(g1), N, C, 1e-5f),
         gpu->rmsnorm_fwd(gpu, G(out), G(rstd), G(x), G(g1), N, C, 1e-5f));
    cmp("rmsnorm_fwd", &out, TB);
    cmp("rmsnorm_fwd rstd", &rstd, 1e-3);
    poison(&out);
    poison(&resid);
    BOTH(cpu->add_rmsnorm_fwd(cpu, C(resid), C(out), C(rstd), C(x), C(delta), C(g1), N, C, 1e-5f),
         gpu->add_rmsnorm_fwd(gpu, G(resid), G(out), G(rstd), G(x), G(delta), G(g1), N, C, 1e-5f));
    cmp("add_rmsnorm_fwd resid", &resid, TB);
    cmp("add_rmsnorm_fwd norm", &out, TB);
    pair dn = mk_rand((size_t)N * C, 1, 1), dgw = mk(C, 0, zero), din = mk_rand((size_t)N * C, 1, 1);
    poison(&din);
    BOTH(cpu->rmsnorm_bwd(cpu, C(din), C(dgw), C(dn), C(resid), C(g1), C(rstd), N, C, 0),
         gpu->rmsnorm_bwd(gpu, G(din), G(dgw), G(dn), G(resid), G(g1), G(rstd), N, C, 0));
    cmp("rmsnorm_bwd din", &din, TB);
    BOTH(cpu->rmsnorm_bwd(cpu, C(din), C(dgw), C(dn), C(resid), C(g1), C(rstd), N, C, 1),
         gpu->rmsnorm_bwd(gpu, G(din), G(dgw), G(dn), G(resid), G(g1), G(rstd), N, C, 1));
    cmp("rmsnorm_bwd din (accumulate)", &din, TB);
    cmp("rmsnorm_bwd dw", &dgw, TB);

    /* embedding */
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)(urand() * V) % V;
    tok[1] = tok[0]; /* repeats accumulate */
    pair tk = mk_i32(N, tok), wte = mk_rand((size_t)V * C, 1, 1), emb = mk((size_t)N * C, 1, NULL);
    float *zv = calloc((size_t)V * C, sizeof(float));
    pair dwte = mk((size_t)V * C, 0, zv);
    poison(&emb);
    BOTH(cpu->embedding_fwd(cpu, C(emb), C(tk), C(wte), N, C), gpu->embedding_fwd(gpu, G(emb), G(tk), G(wte), N, C));
    cmp("embedding_fwd", &emb, 1e-6);
    BOTH(cpu->embedding_bwd(cpu, C(dwte), C(dn), C(tk), N, C, V), gpu->embedding_bwd(gpu, G(dwte), G(dn), G(tk), N, C, V));
    cmp("embedding_bwd", &dwte, 1e-5);

    /* LM head + loss */
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++)
        tg[i] = i % 5 == 0 ? -1 : (int32_t)(urand() * V) % V;
    pair tgt = mk_i32(N, tg), wlm = mk_rand((size_t)V * C, 1, 0.2f), dxl = mk((size_t)N * C, 1, NULL);
    pair dwl = mk((size_t)V * C, 0, zv);
    double lc, lg;
    int64_t nc, ng;
    moe_err e = {{0}};
    poison(&dxl);
    CHECK(cpu->lm_head_loss(cpu, &lc, &nc, C(dxl), C(dwl), C(out), C(wlm), C(tgt), N, C, V, 1.f / 150, &e) == 0);
    int rc = gpu->lm_head_loss(gpu, &lg, &ng, G(dxl), G(dwl), G(out), G(wlm), G(tgt), N, C, V, 1.f / 150, &e);
    if (rc)
        fprintf(stderr, "  lm_head_loss: %s\n", e.msg);
    CHECK(rc == 0 && nc == ng);
    fprintf(stderr, "  %-34s rel %.2e (tol 1e-02)\n", "lm_head_loss sum", fabs(lc - lg) / fabs(lc));
    CHECK(fabs(lc - lg) <= 1e-2 * fabs(lc));
    cmp("lm_head_loss dx", &dxl, TB);
    cmp("lm_head_loss dw", &dwl, TB);
    pair lo = mk((size_t)N * V, 0, NULL);
    poison(&lo);
    BOTH(cpu->lm_head_logits(cpu, C(lo), C(out), C(wlm), N, C, V), gpu->lm_head_logits(gpu, G(lo), G(out), G(wlm), N, C, V));
    cmp("lm_head_logits", &lo, TB);

    /* optimizer */
    size_t P = 100000;
    float *mh = host_rand(P, 1), *gh = host_rand(P, 1);
    pair ma = mk(P, 0, mh), gr = mk(P, 0, gh), m1 = mk(P, 0, gh), v1 = mk(P, 0, mh), wc = mk(P, 1, NULL);
    for (size_t i = 0; i < P; i++)
        mh[i] = fabsf(mh[i]);
    rm(&v1);
    v1 = mk(P, 0, mh);
    /* offsets and lengths that are and are not multiples of 4: both kernel paths */
    moe_param_span spans[3] = {{0, 1000, 1}, {1000, 50001, 0}, {51001, P - 51001, 1}};
    moe_adamw_hyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .bias_corr1 = 0.19f, .bias_corr2 = 0.0975f, .grad_scale = 0.7f};
    poison(&wc);
    BOTH(cpu->adamw(cpu, C(ma), C(wc), C(gr), C(m1), C(v1), spans, 3, &h),
         gpu->adamw(gpu, G(ma), G(wc), G(gr), G(m1), G(v1), spans, 3, &h));
    cmp("adamw master", &ma, 1e-6);
    cmp("adamw exp_avg_sq", &v1, 1e-6);
    cmp("adamw compute copy", &wc, 5e-3);
    double sc = cpu->sum_squares(cpu, C(gr), P), sg = gpu->sum_squares(gpu, G(gr), P);
    fprintf(stderr, "  %-34s rel %.2e (tol 1e-09)\n", "sum_squares", fabs(sc - sg) / sc);
    CHECK(fabs(sc - sg) <= 1e-9 * sc);

    /* gradient ranges that count as zeros: NaN there on the GPU (a read
     * would spread it), zeros on the CPU; a part of one chunk, a whole
     * chunk, and a range over several */
    moe_range zr[3] = {{200, 300}, {17384, 16384}, {60000, 30000}};
    moe_range keep[4] = {{0, 200}, {500, 16884}, {33768, 26232}, {90000, P - 90000}};
    float *gz = malloc(sizeof(float) * P), *gn = malloc(sizeof(float) * P);
    memcpy(gz, gh, sizeof(float) * P);
    memcpy(gn, gh, sizeof(float) * P);
    for (int r = 0; r < 3; r++)
        for (size_t i = zr[r].offset; i < zr[r].offset + zr[r].n; i++)
            gz[i] = 0, gn[i] = NAN;
    pair grz = mk(P, 0, gz);
    CHECK(gpu->upload(gpu, grz.g, gn, sizeof(float) * P, &e) == 0);
    moe_adamw_hyper hz = h;
    hz.zero_grads = zr;
    hz.n_zero_grads = 3;
    poison(&wc);
    BOTH(cpu->adamw(cpu, C(ma), C(wc), C(grz), C(m1), C(v1), spans, 3, &h),
         gpu->adamw(gpu, G(ma), G(wc), G(grz), G(m1), G(v1), spans, 3, &hz));
    cmp("adamw master, zero ranges", &ma, 1e-6);
    cmp("adamw exp_avg, zero ranges", &m1, 1e-6);
    cmp("adamw compute copy, zero ranges", &wc, 5e-3);
    CHECK(gpu->sum_squares_ranges != NULL);
    double szc = cpu->sum_squares(cpu, C(grz), P);
    double szg = gpu->sum_squares_ranges ? gpu->sum_squares_ranges(gpu, G(grz), keep, 4) : NAN;
    fprintf(stderr, "  %-34s rel %.2e (tol 1e-09)\n", "sum_squares_ranges", fabs(szc - szg) / szc);
    CHECK(fabs(szc - szg) <= 1e-9 * szc);
    rm(&grz);
    free(gz);
    free(gn);
    free(mh);
    free(gh);
    free(zero);
    free(zv);
    free(tok);
    free(tg);
}

/* Split masters: upload / download rebuild every fp32 pattern exactly
 * (edge cases among random fp32 values), and AdamW on split masters gives
 * the CPU's fp32 AdamW result. */
static void test_split_masters(void)
{
    CHECK(gpu->masters_upload && gpu->masters_download && gpu->adamw_split);
    moe_err e = {{0}};
    size_t P = 70001;
    float *host = malloc(sizeof(float) * P), *back = malloc(sizeof(float) * P);
    for (size_t i = 0; i < P; i++)
        host[i] = 0.05f * nrand(); /* full fp32 mantissas, not bf16-rounded */
    const unsigned edge[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu,
                             0xff7fffffu, 0x7f7f8000u, 0x00000001u, 0x80008000u, 0x3f808000u,
                             0x3f818000u, 0x3f807fffu, 0x3f80ffffu, 0xbf80ffffu, 0x0000ffffu};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        memcpy(&host[1000 + 13 * i], &edge[i], 4);
    uint16_t *lo = gpu->alloc(gpu, sizeof(uint16_t) * P, &e);
    void *wc = gpu->alloc(gpu, gpu->act_bytes(gpu, P), &e);
    memset(back, 0xff, sizeof(float) * P); /* NaN: unwritten values fail */
    CHECK(gpu->masters_upload(gpu, lo, wc, host, P, &e) == 0);
    CHECK(gpu->masters_download(gpu, back, lo, wc, P, &e) == 0);
    size_t bad = 0;
    for (size_t i = 0; i < P; i++)
        bad += memcmp(&host[i], &back[i], 4) != 0;
    fprintf(stderr, "  %-34s %zu of %zu patterns differ\n", "split masters round trip", bad, P);
    CHECK(bad == 0);
    /* the compute copy is the master rounded to nearest */
    float *cc = malloc(sizeof(float) * P);
    CHECK(gpu->act_to_real(gpu, cc, wc, P, &e) == 0);
    size_t far = 0;
    for (size_t i = 0; i < P; i++)
        if (fabsf(host[i]) >= 0x1p-126f && fabsf(host[i]) < 1e38f) /* normal: a relative bound */
            far += fabs((double)cc[i] - host[i]) > fabs((double)host[i]) * 0x1p-8; /* half an ulp at most */
    CHECK_MSG(far == 0, "%zu compute-copy values farther than half a bf16 ulp", far);
    free(cc);

    /* AdamW, finite masters only */
    for (size_t i = 0; i < P; i++)
        host[i] = 0.05f * nrand();
    float *gh = malloc(sizeof(float) * P), *vh = malloc(sizeof(float) * P);
    for (size_t i = 0; i < P; i++) {
        gh[i] = nrand();
        vh[i] = fabsf(nrand());
    }
    pair ma = mk(P, 0, host), gr = mk(P, 0, gh), m1 = mk(P, 0, gh), v1 = mk(P, 0, vh), wcp = mk(P, 1, NULL);
    CHECK(gpu->masters_upload(gpu, lo, wc, host, P, &e) == 0);
    moe_param_span spans[3] = {{0, 20000, 1}, {20000, 30001, 0}, {50001, P - 50001, 1}};
    moe_adamw_hyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .bias_corr1 = 0.19f, .bias_corr2 = 0.0975f, .grad_scale = 0.7f};
    /* with a range that counts as zeros: NaN there on the GPU, zeros on the CPU */
    moe_range zr = {20000 + 16384, 16384}; /* one whole chunk of the second span */
    for (size_t i = zr.offset; i < zr.offset + zr.n; i++)
        gh[i] = 0;
    cpu->upload(cpu, C(gr), gh, sizeof(float) * P, &e);
    for (size_t i = zr.offset; i < zr.offset + zr.n; i++)
        gh[i] = NAN;
    gpu->upload(gpu, G(gr), gh, sizeof(float) * P, &e);
    moe_adamw_hyper hz = h;
    hz.zero_grads = &zr;
    hz.n_zero_grads = 1;
    cpu->adamw(cpu, C(ma), C(wcp), C(gr), C(m1), C(v1), spans, 3, &h);
    gpu->adamw_split(gpu, lo, wc, G(gr), G(m1), G(v1), spans, 3, &hz);
    memset(back, 0xff, sizeof(float) * P);
    CHECK(gpu->masters_download(gpu, back, lo, wc, P, &e) == 0);
    float *ref = malloc(sizeof(float) * P);
    cpu->download(cpu, ref, C(ma), sizeof(float) * P, &e);
    double num = 0, den = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < P; i++) {
        nonfinite += !isfinite(back[i]);
        num += ((double)back[i] - ref[i]) * ((double)back[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    double rel = sqrt(num / den);
    fprintf(stderr, "  %-34s rel %.2e (tol 1e-06)\n", "adamw_split master", rel);
    CHECK(nonfinite == 0 && rel <= 1e-6);
    cmp("adamw_split exp_avg", &m1, 1e-6);
    cmp("adamw_split exp_avg_sq", &v1, 1e-6);
    gpu->free(gpu, lo);
    gpu->free(gpu, wc);
    rm(&ma);
    rm(&gr);
    rm(&m1);
    rm(&v1);
    rm(&wcp);
    free(host);
    free(back);
    free(gh);
    free(vh);
    free(ref);
}

/* The device's weight initialisation against the host's, bit for bit: a
 * fresh key, a length that is not a multiple of anything, an interior
 * offset (the values depend on the index in the stream, not the address),
 * an odd place in the stream to start from (a shard's slice of a matrix),
 * the constant fill, and a poisoned buffer so an unwritten value fails. */
static void test_masters_init(void)
{
    CHECK(gpu->masters_init != NULL);
    moe_err e = {{0}};
    size_t P = (size_t)3 << 20 | 12345, off = 777, n = P - off - 5;
    uint64_t start = 2 * (uint64_t)(urand() * 1e6) + 1;
    uint64_t key = (uint64_t)(urand() * 0x1p53) * 2654435761ull;
    double std = 0.02 + urand();
    uint16_t *lo = gpu->alloc(gpu, sizeof(uint16_t) * P, &e);
    void *wc = gpu->alloc(gpu, gpu->act_bytes(gpu, P), &e);
    float *back = malloc(sizeof(float) * P);
    memset(back, 0xff, sizeof(float) * P);
    CHECK(gpu->masters_upload(gpu, lo, wc, back, P, &e) == 0); /* NaN everywhere */
    CHECK(gpu->masters_init(gpu, lo + off, (char *)wc + gpu->act_bytes(gpu, off), n, start, 1, key,
                            std, 0.f, &e) == 0);
    CHECK(gpu->masters_init(gpu, lo, wc, off, 0, 0, 0, 0, 1.0f, &e) == 0);
    CHECK(gpu->masters_download(gpu, back, lo, wc, P, &e) == 0);
    size_t bad = 0, nan_tail = 0;
    for (size_t i = 0; i < off; i++)
        bad += back[i] != 1.0f;
    for (size_t j = 0; j < n; j++) {
        float want = init_weight(key, start + j, std);
        bad += memcmp(&want, &back[off + j], 4) != 0;
    }
    for (size_t i = off + n; i < P; i++)
        nan_tail += isnan(back[i]);
    fprintf(stderr, "  %-34s %zu of %zu values differ from the host's\n", "masters_init", bad, off + n);
    CHECK(bad == 0);
    CHECK_MSG(nan_tail == 5, "masters_init wrote past its range (%zu of 5 tail values kept)", nan_tail);
    gpu->free(gpu, lo);
    gpu->free(gpu, wc);
    free(back);
}

/* qscale > 1 makes the softmax peaky (tests the running max and its rescaling) */
static void test_dense(void)
{
    dense_case(192, 96, 160, 300);
    dense_case(70, 100, 40, 50);
    dense_case(40, 4096, 64, 50); /* two 16-byte vectors a thread a row, Mixtral's hidden size */
    dense_case(24, 6144, 32, 40); /* three of four */
}

static void attention_case(int B, int T, int NH, int NKV, int HD, float qscale)
{
    fprintf(stderr, "  attention B=%d T=%d heads %d/%d dim %d q x%g (kernels: %s)\n", B, T, NH, NKV,
            HD, qscale, run_opts.attention == MOE_RT_ATTN_WMMA ? "wmma" : "default");
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    pair q = mk_rand(nq, 1, qscale), k = mk_rand(nk, 1, 1), v = mk_rand(nk, 1, 1);
    pair o = mk(nq, 1, NULL), lse = mk((size_t)B * NH * T, 0, NULL);
    BOTH(cpu->rope_fwd(cpu, C(q), C(k), B, T, NH, NKV, HD, 10000.f, NULL), gpu->rope_fwd(gpu, G(q), G(k), B, T, NH, NKV, HD, 10000.f, NULL));
    cmp("rope_fwd q", &q, TB);
    poison(&o);
    poison(&lse);
    BOTH(cpu->attention_fwd(cpu, C(o), C(lse), C(q), C(k), C(v), B, T, NH, NKV, HD, NULL),
         gpu->attention_fwd(gpu, G(o), G(lse), G(q), G(k), G(v), B, T, NH, NKV, HD, NULL));
    cmp("attention_fwd out", &o, TB);
    cmp("attention_fwd lse", &lse, 1e-3);
    pair d = mk_rand(nq, 1, 1), dq = mk(nq, 1, NULL), dk = mk(nk, 1, NULL), dv = mk(nk, 1, NULL);
    poison(&dq);
    poison(&dk);
    poison(&dv);
    BOTH(cpu->attention_bwd(cpu, C(dq), C(dk), C(dv), C(d), C(q), C(k), C(v), C(o), C(lse), B, T, NH, NKV, HD, NULL),
         gpu->attention_bwd(gpu, G(dq), G(dk), G(dv), G(d), G(q), G(k), G(v), G(o), G(lse), B, T, NH, NKV, HD, NULL));
    cmp("attention_bwd dq", &dq, TB);
    cmp("attention_bwd dk", &dk, TB);
    cmp("attention_bwd dv", &dv, TB);
    BOTH(cpu->rope_bwd(cpu, C(dq), C(dk), B, T, NH, NKV, HD, 10000.f, NULL), gpu->rope_bwd(gpu, G(dq), G(dk), B, T, NH, NKV, HD, 10000.f, NULL));
    cmp("rope_bwd dk", &dk, TB);
    rm(&q); rm(&k); rm(&v); rm(&o); rm(&lse); rm(&d); rm(&dq); rm(&dk); rm(&dv);
}

/* Attention at a long context on the GPU alone, its last R query rows and
 * last R keys against a float64 reference computed for those only: a query
 * row's output, lse and dq need every key before it; a key's dk and dv need
 * only the queries after it, all among the last R. Long enough that T * T
 * (4.3e9 at 65,536) and a head's scores pass 2^31, where a 32-bit index or
 * a count in a fused kernel would wrap; the full CPU reference would take
 * hours there. */
static void long_attention_case(int T, int NH, int NKV, int HD, int R)
{
    fprintf(stderr, "  long attention T=%d heads %d/%d dim %d, last %d rows (kernels: %s)\n", T, NH,
            NKV, HD, R, run_opts.attention == MOE_RT_ATTN_MMA ? "mma" : "default");
    moe_err e = {{0}};
    const size_t nq = (size_t)T * NH * HD, nk = (size_t)T * NKV * HD, nl = (size_t)NH * T;
    float *q = host_rand(nq, 1), *k = host_rand(nk, 1), *v = host_rand(nk, 1), *d = host_rand(nq, 1);
    void *gq = gpu->alloc(gpu, gpu->act_bytes(gpu, nq), &e), *gk = gpu->alloc(gpu, gpu->act_bytes(gpu, nk), &e);
    void *gv = gpu->alloc(gpu, gpu->act_bytes(gpu, nk), &e), *gd = gpu->alloc(gpu, gpu->act_bytes(gpu, nq), &e);
    void *go = gpu->alloc(gpu, gpu->act_bytes(gpu, nq), &e), *gl = gpu->alloc(gpu, nl * 4, &e);
    void *gdq = gpu->alloc(gpu, gpu->act_bytes(gpu, nq), &e), *gdk = gpu->alloc(gpu, gpu->act_bytes(gpu, nk), &e);
    void *gdv = gpu->alloc(gpu, gpu->act_bytes(gpu, nk), &e);
    CHECK_MSG(gq && gk && gv && gd && go && gl && gdq && gdk && gdv, "alloc: %s", e.msg);
    float *nanv = malloc(sizeof(float) * nq);
    for (size_t i = 0; i < nq; i++)
        nanv[i] = NAN;
    gpu->act_from_real(gpu, gq, q, nq, &e), gpu->act_from_real(gpu, gk, k, nk, &e);
    gpu->act_from_real(gpu, gv, v, nk, &e), gpu->act_from_real(gpu, gd, d, nq, &e);
    gpu->act_from_real(gpu, go, nanv, nq, &e), gpu->upload(gpu, gl, nanv, nl * 4, &e);
    gpu->act_from_real(gpu, gdq, nanv, nq, &e), gpu->act_from_real(gpu, gdk, nanv, nk, &e);
    gpu->act_from_real(gpu, gdv, nanv, nk, &e);
    gpu->attention_fwd(gpu, go, gl, gq, gk, gv, 1, T, NH, NKV, HD, NULL);
    gpu->attention_bwd(gpu, gdq, gdk, gdv, gd, gq, gk, gv, go, gl, 1, T, NH, NKV, HD, NULL);
    float *o = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * nl);
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk), *dv = malloc(sizeof(float) * nk);
    int rc = gpu->act_to_real(gpu, o, go, nq, &e) || gpu->download(gpu, lse, gl, nl * 4, &e) ||
             gpu->act_to_real(gpu, dq, gdq, nq, &e) || gpu->act_to_real(gpu, dk, gdk, nk, &e) ||
             gpu->act_to_real(gpu, dv, gdv, nk, &e);
    CHECK_MSG(rc == 0, "long attention: %s", e.msg);
    /* the reference, float64, for the last R rows; err[]: o, lse, dq, dk, dv as sums of
     * squared differences and of squared references */
    double num[5] = {0}, den[5] = {0};
    size_t bad = 0;
    const int group = NH / NKV, i0 = T - R;
    const double sc = 1 / sqrt((double)HD);
    double *p = malloc(sizeof(double) * T), *ds = malloc(sizeof(double) * T);
    double *rk = calloc((size_t)R * NKV * HD, sizeof(double)), *rv = calloc((size_t)R * NKV * HD, sizeof(double));
    double *ro = malloc(sizeof(double) * HD), *rq = malloc(sizeof(double) * HD);
#define AT(x, t, heads, h) ((x) + ((size_t)(t) * (heads) + (h)) * HD)
    for (int h = 0; h < NH; h++) {
        const int kh = h / group;
        for (int i = i0; i < T; i++) {
            const float *qi = AT(q, i, NH, h), *di = AT(d, i, NH, h);
            double m = -INFINITY, z = 0, dd = 0;
            for (int j = 0; j <= i; j++) {
                const float *kj = AT(k, j, NKV, kh);
                double s = 0;
                for (int c = 0; c < HD; c++)
                    s += (double)qi[c] * kj[c];
                p[j] = s * sc;
                m = p[j] > m ? p[j] : m;
            }
            for (int j = 0; j <= i; j++)
                z += p[j] = exp(p[j] - m);
            for (int c = 0; c < HD; c++)
                ro[c] = 0;
            for (int j = 0; j <= i; j++) {
                p[j] /= z;
                const float *vj = AT(v, j, NKV, kh);
                for (int c = 0; c < HD; c++)
                    ro[c] += p[j] * vj[c];
            }
            for (int c = 0; c < HD; c++)
                dd += (double)di[c] * ro[c];
            for (int c = 0; c < HD; c++)
                rq[c] = 0;
            for (int j = 0; j <= i; j++) {
                const float *vj = AT(v, j, NKV, kh), *kj = AT(k, j, NKV, kh);
                double dp = 0;
                for (int c = 0; c < HD; c++)
                    dp += (double)di[c] * vj[c];
                ds[j] = p[j] * (dp - dd);
                for (int c = 0; c < HD; c++)
                    rq[c] += ds[j] * sc * kj[c];
            }
            for (int j = i0; j <= i; j++)
                for (int c = 0; c < HD; c++) {
                    rk[((size_t)(j - i0) * NKV + kh) * HD + c] += ds[j] * sc * qi[c];
                    rv[((size_t)(j - i0) * NKV + kh) * HD + c] += p[j] * di[c];
                }
            const double got_lse = lse[(size_t)h * T + i], want_lse = m + log(z);
            bad += !isfinite(got_lse);
            num[1] += (got_lse - want_lse) * (got_lse - want_lse), den[1] += want_lse * want_lse;
            for (int c = 0; c < HD; c++) {
                const double go_ = AT(o, i, NH, h)[c], gq_ = AT(dq, i, NH, h)[c];
                bad += !isfinite(go_) + !isfinite(gq_);
                num[0] += (go_ - ro[c]) * (go_ - ro[c]), den[0] += ro[c] * ro[c];
                num[2] += (gq_ - rq[c]) * (gq_ - rq[c]), den[2] += rq[c] * rq[c];
            }
        }
    }
    for (int j = i0; j < T; j++)
        for (int kh = 0; kh < NKV; kh++)
            for (int c = 0; c < HD; c++) {
                const double gk_ = AT(dk, j, NKV, kh)[c], gv_ = AT(dv, j, NKV, kh)[c];
                const double wk = rk[((size_t)(j - i0) * NKV + kh) * HD + c];
                const double wv = rv[((size_t)(j - i0) * NKV + kh) * HD + c];
                bad += !isfinite(gk_) + !isfinite(gv_);
                num[3] += (gk_ - wk) * (gk_ - wk), den[3] += wk * wk;
                num[4] += (gv_ - wv) * (gv_ - wv), den[4] += wv * wv;
            }
#undef AT
    const char *what[5] = {"out", "lse", "dq", "dk", "dv"};
    const double tol[5] = {TB, 1e-3, TB, TB, TB};
    for (int w = 0; w < 5; w++) {
        const double rel = sqrt(num[w] / (den[w] > 0 ? den[w] : 1));
        const int ok = bad == 0 && rel <= tol[w];
        fprintf(stderr, "  long attention %-19s rel %.2e (tol %.0e)%s%s\n", what[w], rel, tol[w],
                bad ? " NON-FINITE/UNWRITTEN" : "", ok ? "" : "  <-- FAIL");
        CHECK_MSG(ok, "long attention T=%d %s", T, what[w]);
    }
    void *bufs[] = {gq, gk, gv, gd, go, gl, gdq, gdk, gdv};
    for (int b = 0; b < 9; b++)
        gpu->free(gpu, bufs[b]);
    free(q), free(k), free(v), free(d), free(nanv), free(o), free(lse), free(dq), free(dk), free(dv);
    free(p), free(ds), free(rk), free(rv), free(ro), free(rq);
}

/* the long contexts of the genomic configs (64k), cuDNN and moekit's kernels */
static void test_long_attention(void)
{
    const moe_rt_attention families[] = {MOE_RT_ATTN_CUDNN, MOE_RT_ATTN_MMA};
    for (int f = 0; f < 2; f++) {
        run_opts.attention = families[f];
        apply_run_opts();
        long_attention_case(65536, 4, 1, 128, 24);
    }
    run_opts.attention = MOE_RT_ATTN_CUDNN;
    apply_run_opts();
}

/* Packed rows (data.pack): RoPE at the positions of each sequence, which
 * restart inside a row, against the CPU reference, forward and backward
 * (the cuda backend's attention does not take segments yet; this is its
 * RoPE half). */
static void rope_positions_case(int B, int T, int NH, int NKV, int HD)
{
    fprintf(stderr, "  rope at packed positions B=%d T=%d heads %d/%d dim %d\n", B, T, NH, NKV,
            HD);
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)B * T);
    for (int b = 0; b < B; b++) /* sequences of 1, 7, 13, ... tokens, the last cut at T */
        for (int t = 0, start = 0, len = 1; t < T; t++) {
            if (t - start == len)
                start = t, len += 6;
            pos[b * T + t] = t - start;
        }
    pair q = mk_rand(nq, 1, 1), k = mk_rand(nk, 1, 1), ps = mk_i32((size_t)B * T, pos);
    BOTH(cpu->rope_fwd(cpu, C(q), C(k), B, T, NH, NKV, HD, 10000.f, C(ps)),
         gpu->rope_fwd(gpu, G(q), G(k), B, T, NH, NKV, HD, 10000.f, G(ps)));
    cmp("rope_fwd q (packed positions)", &q, TB);
    cmp("rope_fwd k (packed positions)", &k, TB);
    BOTH(cpu->rope_bwd(cpu, C(q), C(k), B, T, NH, NKV, HD, 10000.f, C(ps)),
         gpu->rope_bwd(gpu, G(q), G(k), B, T, NH, NKV, HD, 10000.f, G(ps)));
    cmp("rope_bwd q (packed positions)", &q, TB);
    rm(&q); rm(&k); rm(&ps);
    free(pos);
}

static void test_rope_positions(void)
{
    rope_positions_case(2, 100, 4, 2, 32);
    rope_positions_case(1, 300, 8, 2, 128); /* Mixtral's head dim: the two-frequency path */
    rope_positions_case(1, 64, 4, 4, 12);   /* the scalar path */
}

/* Packed rows through the cuda attention (its SIMT kernels) against the CPU
 * reference: sequences of seq_len0, seq_len0 + step, ... tokens, the last
 * cut at the row's end; forward out and lse, backward dq, dk, dv. */
static void segment_attention_case(int B, int T, int NH, int NKV, int HD, int len0, int step)
{
    fprintf(stderr, "  attention over packed sequences B=%d T=%d heads %d/%d dim %d (%d, +%d)\n",
            B, T, NH, NKV, HD, len0, step);
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)B * T);
    int32_t *cu = malloc(sizeof(int32_t) * ((size_t)B * T + 1));
    int n_seg = 0, max_len = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0, start = 0, len = len0; t < T; t++) {
            if (t == 0 || t - start == len) {
                if (t)
                    len += step;
                start = t;
                cu[n_seg++] = b * T + t;
            }
            pos[b * T + t] = t - start;
            max_len = pos[b * T + t] + 1 > max_len ? pos[b * T + t] + 1 : max_len;
        }
    cu[n_seg] = B * T;
    pair ps = mk_i32((size_t)B * T, pos), cs = mk_i32((size_t)n_seg + 1, cu);
    moe_segments sc = {C(ps), C(cs), n_seg, max_len}, sg = {G(ps), G(cs), n_seg, max_len};
    pair q = mk_rand(nq, 1, 1), k = mk_rand(nk, 1, 1), v = mk_rand(nk, 1, 1);
    pair o = mk(nq, 1, NULL), lse = mk((size_t)B * NH * T, 0, NULL);
    poison(&o);
    poison(&lse);
    BOTH(cpu->attention_fwd(cpu, C(o), C(lse), C(q), C(k), C(v), B, T, NH, NKV, HD, &sc),
         gpu->attention_fwd(gpu, G(o), G(lse), G(q), G(k), G(v), B, T, NH, NKV, HD, &sg));
    cmp("attention_fwd out (packed)", &o, TB);
    cmp("attention_fwd lse (packed)", &lse, 1e-3);
    pair d = mk_rand(nq, 1, 1), dq = mk(nq, 1, NULL), dk = mk(nk, 1, NULL), dv = mk(nk, 1, NULL);
    poison(&dq);
    poison(&dk);
    poison(&dv);
    BOTH(cpu->attention_bwd(cpu, C(dq), C(dk), C(dv), C(d), C(q), C(k), C(v), C(o), C(lse), B, T,
                            NH, NKV, HD, &sc),
         gpu->attention_bwd(gpu, G(dq), G(dk), G(dv), G(d), G(q), G(k), G(v), G(o), G(lse), B, T,
                            NH, NKV, HD, &sg));
    cmp("attention_bwd dq (packed)", &dq, TB);
    cmp("attention_bwd dk (packed)", &dk, TB);
    cmp("attention_bwd dv (packed)", &dv, TB);
    rm(&q); rm(&k); rm(&v); rm(&o); rm(&lse); rm(&d); rm(&dq); rm(&dk); rm(&dv);
    rm(&ps); rm(&cs);
    free(pos);
    free(cu);
}

/* cuDNN with the score bias (where it takes the graph; it says so on stderr
 * when not, and the SIMT kernels run), then the SIMT kernels themselves */
static void test_segment_attention(void)
{
    const moe_rt_attention families[] = {MOE_RT_ATTN_CUDNN, MOE_RT_ATTN_SIMT};
    for (int f = 0; f < 2; f++) {
        run_opts.attention = families[f];
        apply_run_opts();
        fprintf(stderr, "  packed sequences, kernels: %s\n", f ? "simt" : "cudnn (bias)");
        segment_attention_case(2, 100, 4, 2, 32, 1, 6);    /* one-token sequences, GQA 2:1 */
        segment_attention_case(1, 300, 8, 2, 128, 40, 13); /* sequences across key tiles */
        segment_attention_case(2, 64, 4, 4, 16, 64, 0);    /* one sequence a row: plain causal */
    }
    run_opts.attention = MOE_RT_ATTN_CUDNN;
    apply_run_opts();
}

static void test_attention(void)
{
    /* the default (cuDNN where it loads and takes the shape, else moekit's kernels) */
    attention_case(2, 100, 4, 2, 32, 1);  /* T not a multiple of the tiles, GQA 2:1 */
    attention_case(2, 37, 2, 2, 16, 1);   /* L0-like small heads */
    attention_case(1, 128, 4, 2, 16, 1);  /* L0_sanity's heads */
    attention_case(2, 96, 8, 2, 64, 2);   /* the accuracy configs' head dim */
    attention_case(1, 1100, 8, 2, 128, 2); /* many key blocks, a ragged last one */
    /* Mixtral's head dim, GQA 4:1: the default (cuDNN), then moekit's mma.sync and WMMA
     * kernels (its fallbacks); several key tiles, a ragged last tile, and peaky scores */
    const moe_rt_attention families[] = {MOE_RT_ATTN_CUDNN, MOE_RT_ATTN_MMA, MOE_RT_ATTN_WMMA};
    for (int f = 0; f < 3; f++) {
        run_opts.attention = families[f];
        apply_run_opts();
        attention_case(1, 64, 8, 2, 128, 1);
        attention_case(2, 300, 8, 2, 128, 1);
        attention_case(1, 257, 4, 4, 128, 6);
        attention_case(1, 200, 4, 1, 64, 3);
    }
    run_opts.attention = MOE_RT_ATTN_CUDNN;
    apply_run_opts();
}

/* routing: 0 = random, 1 = only experts 0..3 of 8 (idle experts), 2 = all tokens to 0 and 1 */
/* E4M3 keeps 3 mantissa bits (relative spacing 2^-3): a GEMM of two
 * quantised operands lands ~3-4% from the exact one (tests/gpu/test_fp8_gemm.c
 * measures it), two chained ones (h1 -> a -> y) a little more; the same for
 * MXFP8's power-of-two scales, whose blocks of 32 follow the values closer */
static const double TF8 = 8e-2;
/* The router-probability gradient is a row sum of dA silu(h1) h3 with dA from
 * one FP8 GEMM and h1, h3 from two others: its terms cancel, so its relative
 * error spreads wider over seeds (6.8e-2 to 8.6e-2 measured; the router's
 * gradients inherit it, up to 1.2e-1). A wrong kernel lands at O(1). */
static const double TF8_ROWSUM = 1.5e-1;

/* The GPU's saved h1 / h3 as E4M3 codes + 1x128 scales (fp8_block,
 * expert_saved_bytes), dequantised on the host into v[rows * I]; 0 when every
 * value is finite (unwritten bytes stay NaN: the buffer is poisoned 0xFF) */
static int saved_fp8_values(const void *g, size_t bytes, size_t rows, int I, float *v)
{
    moe_err e = {{0}};
    uint8_t *raw = malloc(bytes);
    size_t codes = (rows * I + 255) & ~(size_t)255;
    int rc = gpu->download(gpu, raw, g, bytes, &e);
    if (rc)
        fprintf(stderr, "  download saved h: %s\n", e.msg);
    else
        lowp_fp8blk_dequant_1x128(raw, (const float *)(raw + codes), rows, I, v);
    free(raw);
    for (size_t i = 0; i < rows * I && !rc; i++)
        if (!isfinite(v[i]))
            rc = -1;
    return rc;
}

/* Two GPU copies of a saved h (E4M3 codes + 1x128 scales) hold the same
 * codes and the same scales of real rows (padding scales aside). */
static int saved_fp8_same(const void *g1, const void *g2, size_t bytes, size_t rows, int I)
{
    moe_err e = {{0}};
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    int same = gpu->download(gpu, a, g1, bytes, &e) == 0 && gpu->download(gpu, b, g2, bytes, &e) == 0;
    size_t codes = (rows * I + 255) & ~(size_t)255, ld = lowp_fp8blk_1x128_ld(rows), diff = 0;
    for (size_t i = 0; same && i < rows * I; i++)
        diff += a[i] != b[i];
    const float *sa = (const float *)(a + codes), *sb = (const float *)(b + codes);
    for (size_t kb = 0; same && kb < (size_t)(I + 127) / 128; kb++)
        for (size_t r = 0; r < rows; r++)
            diff += memcmp(&sa[kb * ld + r], &sb[kb * ld + r], 4) != 0;
    if (diff)
        fprintf(stderr, "  %zu saved codes / scales differ\n", diff);
    free(a);
    free(b);
    return same && diff == 0;
}

/* the saved h against the CPU's, then the CPU's replaced by what the GPU
 * kept, so both backwards start from the same h1, h3 */
static void cmp_saved_fp8(const char *what, pair *h, size_t bytes, size_t rows, int I, double tol)
{
    moe_err e = {{0}};
    size_t n = rows * I;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    cpu->act_to_real(cpu, a, h->c, n, &e);
    int bad = saved_fp8_values(h->g, bytes, rows, I, b);
    double num = 0, den = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    int ok = !bad && rel <= tol;
    fprintf(stderr, "  %-34s rel %.2e (tol %.0e)%s%s\n", what, rel, tol,
            bad ? " NON-FINITE/UNWRITTEN" : "", ok ? "" : "  <-- FAIL");
    CHECK_MSG(ok, "%s", what);
    if (!bad)
        cpu->act_from_real(cpu, h->c, b, n, &e);
    free(a);
    free(b);
}

/* prec: the experts' recipe (bf16, fp8_block, mxfp8 or mxfp8_emulated) */
static void moe_case(int routing, int N, int C, int I, moe_precision prec)
{
    int fp8 = prec != MOE_PREC_BF16;
    int E = 8, K = 2;
    const char *names[] = {"uneven counts", "idle experts", "one expert takes all"};
    fprintf(stderr, "  moe: %s, %d tokens, hidden %d, ffn %d, experts in %s\n", names[routing], N,
            C, I, precision_name(prec));
    moe_err e = {{0}};
    const double TX = fp8 ? TF8 : TB; /* what the expert GEMMs feed */
    const double TXS = fp8 ? TF8_ROWSUM : TB; /* the probability gradient and what it feeds */
    if (fp8 && gpu->set_expert_precision(gpu, prec, C, I, &e)) {
        fprintf(stderr, "  FAIL set_expert_precision: %s\n", e.msg);
        CHECK(0);
        return;
    }
    pair x = mk_rand((size_t)N * C, 1, 1), wg = mk_rand((size_t)E * C, 1, 0.3f);
    pair probs = mk((size_t)N * E, 0, NULL), ti = mk((size_t)N * K, 0, NULL), tw = mk((size_t)N * K, 0, NULL), ps = mk(E, 0, NULL);
    poison(&probs);
    BOTH(cpu->router_fwd(cpu, C(probs), C(ti), C(tw), C(ps), C(x), C(wg), N, C, E, K),
         gpu->router_fwd(gpu, G(probs), G(ti), G(tw), G(ps), G(x), G(wg), N, C, E, K));
    cmp("router_fwd probs", &probs, 1e-2);
    cmp("router_fwd prob_sum", &ps, 1e-2);
    /* the same routing on both sides from here, so plans are identical */
    int32_t *idx = malloc(sizeof(int32_t) * N * K);
    float *w = malloc(sizeof(float) * N * K);
    cpu->download(cpu, idx, ti.c, sizeof(int32_t) * N * K, &e);
    cpu->download(cpu, w, tw.c, sizeof(float) * N * K, &e);
    for (int n = 0; n < N; n++) {
        if (routing == 1) {
            idx[n * K] = n % 4;
            idx[n * K + 1] = (n / 4 + 1) % 4 == n % 4 ? (n % 4 + 1) % 4 : (n / 4 + 1) % 4;
        } else if (routing == 2) {
            idx[n * K] = 0;
            idx[n * K + 1] = 1;
        }
    }
    pair tix = mk_i32((size_t)N * K, idx), twx = mk((size_t)N * K, 0, w);
    moe_route_plan pc, pg;
    int64_t cnt_c[8], off_c[9], cnt_g[8], off_g[9];
    memset(&pc, 0, sizeof pc);
    memset(&pg, 0, sizeof pg);
    pc.row_token = cpu->alloc(cpu, 4 * N * K, &e); pc.slot_row = cpu->alloc(cpu, 4 * N * K, &e);
    pc.expert_offset_dev = cpu->alloc(cpu, 4 * (E + 1), &e); pc.expert_count = cnt_c; pc.expert_offset = off_c;
    pg.row_token = gpu->alloc(gpu, 4 * N * K, &e); pg.slot_row = gpu->alloc(gpu, 4 * N * K, &e);
    pg.expert_offset_dev = gpu->alloc(gpu, 4 * (E + 1), &e); pg.expert_count = cnt_g; pg.expert_offset = off_g;
    CHECK(cpu->route_plan(cpu, &pc, tix.c, N, K, E, &e) == 0);
    CHECK(gpu->route_plan(gpu, &pg, tix.g, N, K, E, &e) == 0);
    for (int i = 0; i < E; i++)
        CHECK(cnt_c[i] == cnt_g[i]);
    int rows = N * K;
    pair xp = mk((size_t)rows * C, 1, NULL), pp = mk(rows, 0, NULL);
    poison(&xp);
    poison(&pp);
    BOTH(cpu->permute(cpu, C(xp), C(pp), C(x), C(twx), &pc, C), gpu->permute(gpu, G(xp), G(pp), G(x), G(twx), &pg, C));
    cmp("permute rows", &xp, 1e-6);
    cmp("permute probs", &pp, 1e-6);
    pair w1 = mk_rand((size_t)E * I * C, 1, 0.15f), w3 = mk_rand((size_t)E * I * C, 1, 0.15f), w2 = mk_rand((size_t)E * C * I, 1, 0.1f);
    pair h1 = mk((size_t)rows * I, 1, NULL), h3 = mk((size_t)rows * I, 1, NULL), a = mk((size_t)rows * I, 1, NULL), yp = mk((size_t)rows * C, 1, NULL);
    poison(&yp);
    poison(&h1);
    /* fp8_block keeps h1, h3 in E4M3: GPU buffers of that size, poisoned 0xFF (E4M3 NaN) */
    size_t saved = gpu->expert_saved_bytes ? gpu->expert_saved_bytes(gpu, rows, I)
                                           : gpu->act_bytes(gpu, (size_t)rows * I);
    int saved8 = saved != gpu->act_bytes(gpu, (size_t)rows * I);
    if (saved8) {
        uint8_t *ff = malloc(saved);
        memset(ff, 0xFF, saved);
        pair *hs[2] = {&h1, &h3};
        for (int k = 0; k < 2; k++) {
            gpu->free(gpu, hs[k]->g);
            hs[k]->g = gpu->alloc(gpu, saved, &e);
            CHECK(hs[k]->g && gpu->upload(gpu, hs[k]->g, ff, saved, &e) == 0);
        }
        free(ff);
    }
    BOTH(cpu->experts_fwd(cpu, C(yp), C(h1), C(h3), C(a), C(xp), C(pp), C(w1), C(w3), C(w2), &pc, C, I),
         gpu->experts_fwd(gpu, G(yp), G(h1), G(h3), G(a), G(xp), G(pp), G(w1), G(w3), G(w2), &pg, C, I));
    if (saved8) {
        cmp_saved_fp8("experts_fwd h1 (kept in E4M3)", &h1, saved, rows, I, TX);
        cmp_saved_fp8("experts_fwd h3 (kept in E4M3)", &h3, saved, rows, I, TX);
    } else {
        cmp("experts_fwd h1", &h1, TX);
    }
    cmp("experts_fwd y", &yp, TX);
    if (saved8 && I % 256 == 0) {
        /* the SwiGLU kernel wrote h1, h3's E4M3 copies itself: the quantiser
         * run after it (runtime.fp8_fused_save=false) must give the same bytes */
        void *q1 = gpu->alloc(gpu, saved, &e), *q3 = gpu->alloc(gpu, saved, &e);
        run_opts.fp8_fused_save = 0;
        int ok = q1 && q3 && gpu->set_run_opts(gpu, &run_opts, &e) == 0 &&
                 gpu->set_expert_precision(gpu, prec, C, I, &e) == 0;
        run_opts.fp8_fused_save = 1;
        ok = gpu->set_run_opts(gpu, &run_opts, &e) == 0 && ok;
        if (ok) {
            gpu->experts_fwd(gpu, G(yp), q1, q3, G(a), G(xp), G(pp), G(w1), G(w3), G(w2), &pg, C, I);
            ok = gpu->set_expert_precision(gpu, prec, C, I, &e) == 0 &&
                 saved_fp8_same(G(h1), q1, saved, rows, I) && saved_fp8_same(G(h3), q3, saved, rows, I);
        }
        fprintf(stderr, "  %-34s %s\n", "experts_fwd saved h (fused = after)", ok ? "same bytes" : "<-- FAIL");
        CHECK_MSG(ok, "fused E4M3 save of h1, h3 against the quantiser");
        gpu->free(gpu, q1);
        gpu->free(gpu, q3);
    }
    pair out = mk((size_t)N * C, 1, NULL);
    poison(&out);
    BOTH(cpu->combine(cpu, C(out), C(yp), &pc, C), gpu->combine(gpu, G(out), G(yp), &pg, C));
    cmp("combine", &out, TX);
    pair dout = mk_rand((size_t)N * C, 1, 1), dyp = mk((size_t)rows * C, 1, NULL);
    poison(&dyp);
    BOTH(cpu->combine_bwd(cpu, C(dyp), C(dout), &pc, C), gpu->combine_bwd(gpu, G(dyp), G(dout), &pg, C));
    cmp("combine_bwd", &dyp, 1e-6);
    float *z = calloc((size_t)E * I * C, sizeof(float));
    /* the weight gradients start as NaN: the first call overwrites them (idle
     * experts' too), the second accumulates onto the first */
    pair dw1 = mk((size_t)E * I * C, 0, NULL), dw3 = mk((size_t)E * I * C, 0, NULL), dw2 = mk((size_t)E * C * I, 0, NULL);
    pair dxp = mk((size_t)rows * C, 1, NULL), dpp = mk(rows, 0, NULL);
    for (int pass = 0; pass < 2; pass++) {
        poison(&dxp);
        poison(&dpp);
        BOTH(cpu->experts_bwd(cpu, C(dxp), C(dpp), C(dw1), C(dw3), C(dw2), C(dyp), C(xp), C(h1), C(h3), C(pp), C(w1), C(w3), C(w2), &pc, C, I, !pass),
             gpu->experts_bwd(gpu, G(dxp), G(dpp), G(dw1), G(dw3), G(dw2), G(dyp), G(xp), G(h1), G(h3), G(pp), G(w1), G(w3), G(w2), &pg, C, I, !pass));
        cmp("experts_bwd dx", &dxp, TX);
        cmp("experts_bwd dp", &dpp, TXS);
        cmp(pass ? "experts_bwd dw1 (accumulated)" : "experts_bwd dw1 (overwritten)", &dw1, TX);
        cmp(pass ? "experts_bwd dw3 (accumulated)" : "experts_bwd dw3 (overwritten)", &dw3, TX);
        cmp(pass ? "experts_bwd dw2 (accumulated)" : "experts_bwd dw2 (overwritten)", &dw2, TX);
    }
    pair dx = mk((size_t)N * C, 1, NULL), dtw = mk((size_t)N * K, 0, NULL);
    poison(&dx);
    poison(&dtw);
    BOTH(cpu->permute_bwd(cpu, C(dx), C(dtw), C(dxp), C(dpp), &pc, C), gpu->permute_bwd(gpu, G(dx), G(dtw), G(dxp), G(dpp), &pg, C));
    cmp("permute_bwd dx", &dx, TX);
    cmp("permute_bwd dtopk_w", &dtw, TXS);
    float auxh[8];
    for (int i = 0; i < E; i++)
        auxh[i] = 0.01f * (i + 1);
    pair aux = mk(E, 0, auxh), dwg = mk((size_t)E * C, 0, z);
    /* router backward on the CPU's routing (probs from the CPU copy on both) */
    float *ph = malloc(sizeof(float) * N * E);
    cpu->download(cpu, ph, probs.c, sizeof(float) * N * E, &e);
    pair pr = mk((size_t)N * E, 0, ph);
    BOTH(cpu->router_bwd(cpu, C(dx), C(dwg), C(dtw), C(aux), C(x), C(wg), C(pr), C(tix), C(twx), N, C, E, K),
         gpu->router_bwd(gpu, G(dx), G(dwg), G(dtw), G(aux), G(x), G(wg), G(pr), G(tix), G(twx), N, C, E, K));
    cmp("router_bwd dx (accumulate)", &dx, TXS);
    cmp("router_bwd dwg", &dwg, TXS);
    free(idx); free(w); free(z); free(ph);
    if (fp8 && gpu->set_expert_precision(gpu, MOE_PREC_BF16, C, I, &e)) {
        fprintf(stderr, "  FAIL set_expert_precision bf16: %s\n", e.msg);
        CHECK(0);
    }
}

static void test_moe(void)
{
    moe_case(0, 160, 64, 96, MOE_PREC_BF16);
    moe_case(1, 160, 64, 96, MOE_PREC_BF16);
    moe_case(2, 160, 64, 96, MOE_PREC_BF16);
    moe_case(0, 100, 48, 100, MOE_PREC_BF16); /* ffn not a multiple of 8: the SwiGLU kernels' scalar path */
    moe_case(1, 90, 36, 64, MOE_PREC_BF16);   /* hidden not a multiple of 8: the gathers' scalar path */
    /* an expert's rows through the backward 128 at a time (two experts of 300
     * rows: 128 + 128 + 44, the later chunks adding to dw) */
    run_opts.expert_chunk_rows = 128;
    apply_run_opts();
    moe_case(2, 300, 64, 96, MOE_PREC_BF16);
    moe_case(0, 1000, 64, 96, MOE_PREC_BF16);
    run_opts.expert_chunk_rows = backend_opts_default().expert_chunk_rows;
    apply_run_opts();
}

/* fp8_block experts: ~75 rows per expert (FP8 for 64, bf16 for the rest),
 * two experts taking 300 rows each, and ~10 rows per expert (all bf16);
 * hidden 192 ends in a partial 128-block */
static void test_moe_fp8(void)
{
    moe_case(0, 300, 192, 256, MOE_PREC_FP8_BLOCK);
    moe_case(2, 300, 128, 256, MOE_PREC_FP8_BLOCK);
    /* the FP8 rows in chunks of 128 (two experts of 300 rows: 128 + 128 + 32, then 12 in bf16) */
    run_opts.fp8_chunk_rows = 128;
    apply_run_opts();
    moe_case(2, 300, 128, 256, MOE_PREC_FP8_BLOCK);
    moe_case(0, 1000, 128, 256, MOE_PREC_FP8_BLOCK);
    /* and the backward's expert chunks of 128 rows around them */
    run_opts.expert_chunk_rows = 128;
    apply_run_opts();
    moe_case(2, 300, 128, 256, MOE_PREC_FP8_BLOCK);
    run_opts.fp8_chunk_rows = backend_opts_default().fp8_chunk_rows;
    apply_run_opts();
    moe_case(0, 1000, 128, 256, MOE_PREC_FP8_BLOCK);
    /* the unchunked forward (the quantiser, not the SwiGLU kernel, writes the kept h1, h3:
     * the pass's bf16 h1, h3 in scratch), beside the chunked one above */
    run_opts.fp8_fused_save = 0;
    apply_run_opts();
    moe_case(2, 300, 128, 256, MOE_PREC_FP8_BLOCK);
    run_opts.fp8_fused_save = 1;
    run_opts.expert_chunk_rows = backend_opts_default().expert_chunk_rows;
    apply_run_opts();
    /* h1, h3 kept in bf16 */
    gpu->set_fp8_saved_activations(gpu, 0);
    moe_case(0, 300, 192, 256, MOE_PREC_FP8_BLOCK);
    gpu->set_fp8_saved_activations(gpu, 1);
    moe_case(0, 40, 64, 128, MOE_PREC_FP8_BLOCK);
}

/* mxfp8 experts: on Blackwell the same cases (set_expert_precision runs its
 * self-test first); elsewhere the precision must be refused, naming why */
static void test_moe_mxfp8(void)
{
    struct cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
    if (prop.major == 10) {
        moe_case(0, 300, 192, 256, MOE_PREC_MXFP8);
        moe_case(2, 300, 128, 256, MOE_PREC_MXFP8);
        return;
    }
    moe_err e = {{0}};
    CHECK(gpu->set_expert_precision(gpu, MOE_PREC_MXFP8, 128, 256, &e) == -1);
    CHECK_MSG(strstr(e.msg, "Blackwell") && strstr(e.msg, "use bf16"), "%s", e.msg);
    fprintf(stderr, "  mxfp8 on compute capability %d.%d: refused: %s\n", prop.major, prop.minor,
            e.msg);
}

/* mxfp8_emulated experts: the same shapes; 32-blocks with partial ends (hidden 200) */
static void test_moe_mxfp8_emulated(void)
{
    moe_case(0, 300, 200, 256, MOE_PREC_MXFP8_EMULATED);
    moe_case(2, 300, 128, 256, MOE_PREC_MXFP8_EMULATED);
    moe_case(1, 40, 64, 128, MOE_PREC_MXFP8_EMULATED);
}

int main(int argc, char **argv)
{
    rng_state = argc > 1 ? strtoull(argv[1], NULL, 10) : (unsigned long long)time(NULL);
    fprintf(stderr, "seed %llu\n", rng_state);
    moe_err e = {{0}};
    if (cpu_backend_create(&cpu, 0, &e) || cuda_backend_create(&gpu, 0, &e)) {
        fprintf(stderr, "backend: %s\n", e.msg);
        return 1;
    }
    run_opts = backend_opts_default();
    RUN(test_dense);
    RUN(test_split_masters);
    RUN(test_masters_init);
    RUN(test_attention);
    RUN(test_long_attention);
    RUN(test_rope_positions);
    RUN(test_segment_attention);
    RUN(test_moe);
    RUN(test_moe_fp8);
    RUN(test_moe_mxfp8_emulated);
    RUN(test_moe_mxfp8);
    moe_err e2 = {{0}};
    if (gpu->sync(gpu, &e2)) {
        fprintf(stderr, "cuda: %s\n", e2.msg);
        CHECK(0);
    }
    return check_summary("cuda_ops");
}

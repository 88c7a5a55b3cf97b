/* Time each CUDA op at the benchmark's shapes (bench_8x7B_2L: hidden 4096,
 * 32/8 heads of 128, 8 experts top-2, intermediate 14336, vocab 32000,
 * 2 x 4096 tokens), so the step's time can be split by op. CUDA events
 * around 5 repetitions after a warm-up, median reported, with the op's
 * FLOP rate or bandwidth. Random inputs (never zeros).
 *   build/tests/gpu/bench_ops */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/backend/backend.h"

static moe_backend *be;
static moe_err err;

static void *dev_rand(size_t n, int is_act, float scale)
{
    float *h = malloc(sizeof(float) * n);
    unsigned long long s = 0x9E3779B97F4A7C15ULL ^ n;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = scale * ((float)((s >> 40) & 0xffffff) / 16777216.0f - 0.5f);
    }
    void *d = be->alloc(be, is_act ? be->act_bytes(be, n) : n * sizeof(float), &err);
    if (is_act)
        be->act_from_real(be, d, h, n, &err);
    else
        be->upload(be, d, h, n * sizeof(float), &err);
    free(h);
    return d;
}

typedef void (*op_fn)(void *ctx);

static double time_ms(op_fn f, void *ctx)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    f(ctx);
    cudaDeviceSynchronize();
    float t[5];
    for (int i = 0; i < 5; i++) {
        cudaEventRecord(a, (cudaStream_t)cuda_backend_stream(be));
        f(ctx);
        cudaEventRecord(b, (cudaStream_t)cuda_backend_stream(be));
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&t[i], a, b);
    }
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (t[j] < t[i]) {
                float x = t[i];
                t[i] = t[j];
                t[j] = x;
            }
    return t[2];
}

enum { B = 2, T = 4096, N = B * T, C = 4096, NH = 32, NKV = 8, HD = 128, E = 8, K = 2, I = 14336, V = 32000 };
static void *q, *k, *v, *o, *lse, *dq, *dk, *dv, *dout, *x, *wq, *y, *dwq, *dx, *wlm, *dwlm, *tgt;
static void *xp, *pp, *w1, *w3, *w2, *h1, *h3, *aa, *yp, *dw1, *dw3, *dw2, *dxp, *dpp;
static moe_route_plan plan;
static real *master, *grad, *mm, *vv;
static act *wc;
static moe_param_span span;

static void f_attn_fwd(void *c) { be->attention_fwd(be, o, lse, q, k, v, B, T, NH, NKV, HD, NULL); }
static void f_attn_bwd(void *c) { be->attention_bwd(be, dq, dk, dv, dout, q, k, v, o, lse, B, T, NH, NKV, HD, NULL); }
static void f_qproj(void *c) { be->matmul_fwd(be, y, x, wq, N, C, NH * HD); }
static void f_qproj_bwd(void *c) { be->matmul_bwd(be, dx, dwq, y, x, wq, N, C, NH * HD, 0); }
static void f_exp_fwd(void *c) { be->experts_fwd(be, yp, h1, h3, aa, xp, pp, w1, w3, w2, &plan, C, I); }
static void f_exp_bwd(void *c) { be->experts_bwd(be, dxp, dpp, dw1, dw3, dw2, yp, xp, h1, h3, pp, w1, w3, w2, &plan, C, I, 0); }
/* the first micro-batch of a step: the expert gradients written, not accumulated */
static void f_exp_bwd_first(void *c) { be->experts_bwd(be, dxp, dpp, dw1, dw3, dw2, yp, xp, h1, h3, pp, w1, w3, w2, &plan, C, I, 1); }
static void f_head(void *c)
{
    double ls;
    int64_t nv;
    be->lm_head_loss(be, &ls, &nv, dx, dwlm, x, wlm, tgt, N, C, V, 1.0f / N, &err);
}
static void f_adamw(void *c)
{
    moe_adamw_hyper h = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .bias_corr1 = 0.1f, .bias_corr2 = 0.05f,
                         .grad_scale = 1.f};
    be->adamw(be, master, wc, grad, mm, vv, &span, 1, &h);
}
/* split masters: the low halves in the first half of the fp32 buffer */
static void f_adamw_split(void *c)
{
    moe_adamw_hyper h = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .bias_corr1 = 0.1f, .bias_corr2 = 0.05f,
                         .grad_scale = 1.f};
    be->adamw_split(be, (uint16_t *)master, wc, grad, mm, vv, &span, 1, &h);
}
static void f_sumsq(void *c) { (void)be->sum_squares(be, grad, span.n); }
static void f_zero(void *c) { be->memset0(be, grad, span.n * sizeof(real)); }

int main(void)
{
    if (cuda_backend_create(&be, 0, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    size_t nq = (size_t)N * NH * HD, nk = (size_t)N * NKV * HD;
    q = dev_rand(nq, 1, 2); k = dev_rand(nk, 1, 2); v = dev_rand(nk, 1, 2); o = dev_rand(nq, 1, 1);
    lse = dev_rand((size_t)B * NH * T, 0, 1); dq = dev_rand(nq, 1, 1); dk = dev_rand(nk, 1, 1);
    dv = dev_rand(nk, 1, 1); dout = dev_rand(nq, 1, 1);
    x = dev_rand((size_t)N * C, 1, 2); wq = dev_rand((size_t)NH * HD * C, 1, 0.05f);
    y = dev_rand((size_t)N * NH * HD, 1, 1); dwq = dev_rand((size_t)NH * HD * C, 0, 0);
    dx = dev_rand((size_t)N * C, 1, 1);
    int rows = N * K;
    int32_t *hrow = malloc(sizeof(int32_t) * rows), *hslot = malloc(sizeof(int32_t) * rows);
    static int64_t cnt[E], off[E + 1];
    for (int e = 0; e <= E; e++)
        off[e] = (int64_t)rows * e / E;
    for (int e = 0; e < E; e++)
        cnt[e] = off[e + 1] - off[e];
    for (int r = 0; r < rows; r++) {
        hrow[r] = r % N;
        hslot[r] = r;
    }
    plan.row_token = be->alloc(be, 4 * rows, &err);
    plan.slot_row = be->alloc(be, 4 * rows, &err);
    be->upload(be, plan.row_token, hrow, 4 * rows, &err);
    be->upload(be, plan.slot_row, hslot, 4 * rows, &err);
    plan.expert_count = cnt;
    plan.expert_offset = off;
    plan.n_tokens = N;
    plan.top_k = K;
    plan.n_experts = E;
    plan.n_rows = rows;
    xp = dev_rand((size_t)rows * C, 1, 2); pp = dev_rand(rows, 0, 1);
    w1 = dev_rand((size_t)E * I * C, 1, 0.05f); w3 = dev_rand((size_t)E * I * C, 1, 0.05f);
    w2 = dev_rand((size_t)E * C * I, 1, 0.05f);
    h1 = dev_rand((size_t)rows * I, 1, 1); h3 = dev_rand((size_t)rows * I, 1, 1);
    aa = dev_rand((size_t)rows * I, 1, 1); yp = dev_rand((size_t)rows * C, 1, 1);
    dw1 = dev_rand((size_t)E * I * C, 0, 0); dw3 = dev_rand((size_t)E * I * C, 0, 0);
    dw2 = dev_rand((size_t)E * C * I, 0, 0); dxp = dev_rand((size_t)rows * C, 1, 1);
    dpp = dev_rand(rows, 0, 1);
    wlm = dev_rand((size_t)V * C, 1, 0.05f); dwlm = dev_rand((size_t)V * C, 0, 0);
    int32_t *ht = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++)
        ht[i] = (i * 7919) % V;
    tgt = be->alloc(be, 4 * N, &err);
    be->upload(be, tgt, ht, 4 * N, &err);
    span.offset = 0;
    span.n = 3164688384ULL;
    span.decay = 1;
    master = dev_rand(span.n, 0, 0.1f);
    grad = dev_rand(span.n, 0, 0.1f);
    mm = dev_rand(span.n, 0, 0.1f);
    vv = dev_rand(span.n, 0, 0.1f);
    wc = be->alloc(be, be->act_bytes(be, span.n), &err);
    if (be->sync(be, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    double attn_f = 4.0 * B * NH * (double)T * T / 2 * HD;
    double gemm_q = 2.0 * N * C * NH * HD, gemm_e = 3 * 2.0 * rows * C * I, gemm_h = 2.0 * N * C * V;
    struct { const char *name; op_fn f; double flop, bytes; int per_step; } ops[] = {
        {"attention fwd (per layer)", f_attn_fwd, attn_f, 0, 2},
        {"attention bwd (per layer)", f_attn_bwd, 2.5 * attn_f, 0, 2},
        {"q_proj fwd (1 of 4 projections)", f_qproj, gemm_q, 0, 2},
        {"q_proj bwd", f_qproj_bwd, 2 * gemm_q, 0, 2},
        {"experts fwd (per layer)", f_exp_fwd, gemm_e, 0, 2},
        {"experts bwd (per layer)", f_exp_bwd, 2 * gemm_e, 0, 0},
        {"experts bwd, dw overwritten", f_exp_bwd_first, 2 * gemm_e, 0, 2},
        {"lm head + loss, fwd+bwd", f_head, 3 * gemm_h, 0, 1},
        {"adamw, 3.16B params", f_adamw, 0, 30.0 * span.n, 0},
        {"adamw on split masters", f_adamw_split, 0, 28.0 * span.n, 1},
        {"gradient sum of squares", f_sumsq, 0, 4.0 * span.n, 1},
        {"zero grads", f_zero, 0, 4.0 * span.n, 1},
    };
    printf("%-34s %9s %10s %10s\n", "op", "ms", "TFLOP/s", "GB/s");
    double total = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        double ms = time_ms(ops[i].f, NULL);
        total += ms * ops[i].per_step;
        printf("%-34s %9.3f %10.1f %10.0f\n", ops[i].name, ms,
               ops[i].flop ? ops[i].flop / ms / 1e9 : 0, ops[i].bytes ? ops[i].bytes / ms / 1e6 : 0);
    }
    printf("sum over one step's use of these ops (x per-step count): %.1f ms\n", total);
    /* the expert FFN again with its GEMMs in FP8 block scaling (quantisation included) */
    if (be->set_expert_precision && be->set_expert_precision(be, MOE_PREC_FP8_BLOCK, C, I, &err) == 0) {
        double f = time_ms(f_exp_fwd, NULL), b = time_ms(f_exp_bwd, NULL);
        printf("%-34s %9.3f %10.1f\n", "experts fwd, fp8_block", f, gemm_e / f / 1e9);
        printf("%-34s %9.3f %10.1f\n", "experts bwd, fp8_block", b, 2 * gemm_e / b / 1e9);
        if (be->set_expert_precision(be, MOE_PREC_BF16, C, I, &err))
            fprintf(stderr, "%s\n", err.msg);
    } else {
        printf("experts in fp8_block: %s\n", err.msg);
    }
    if (be->sync(be, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}

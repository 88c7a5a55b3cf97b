/* CPU reference: embedding, RMSNorm, linear layers, RoPE and the LM head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#define R(p) ((real *)(p))
#define CR(p) ((const real *)(p))

static void embedding_fwd(moe_backend *be, act *out, const int32_t *tokens, const act *wte, int N,
                          int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(R(out) + (size_t)n * C, CR(wte) + (size_t)tokens[n] * C, sizeof(real) * C);
}

static void embedding_bwd(moe_backend *be, real *dwte, const act *dx, const int32_t *tokens, int N,
                          int C, int V)
{
    (void)V;
    /* tokens repeat, so split by columns: each column summed in token order */
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++)
        for (int n = 0; n < N; n++)
            dwte[(size_t)tokens[n] * C + c] += CR(dx)[(size_t)n * C + c];
}

static void rmsnorm_fwd(moe_backend *be, act *out, real *rstd, const act *in, const act *w, int N,
                        int C, real eps)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *x = CR(in) + (size_t)n * C;
        real *y = R(out) + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        real r = (real)(1.0 / sqrt(ss / C + eps));
        for (int c = 0; c < C; c++)
            y[c] = CR(w)[c] * (x[c] * r);
        rstd[n] = r;
    }
}

static void add(moe_backend *be, act *out, const act *a, const act *b, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        R(out)[i] = CR(a)[i] + CR(b)[i];
}

static void add_rmsnorm_fwd(moe_backend *be, act *resid_out, act *norm_out, real *rstd,
                            const act *resid_in, const act *delta, const act *w, int N, int C,
                            real eps)
{
    add(be, resid_out, resid_in, delta, (size_t)N * C);
    rmsnorm_fwd(be, norm_out, rstd, resid_out, w, N, C, eps);
}

static void rmsnorm_bwd(moe_backend *be, act *din, real *dw, const act *dout, const act *in,
                        const act *w, const real *rstd, int N, int C, int accumulate)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *x = CR(in) + (size_t)n * C, *dy = CR(dout) + (size_t)n * C;
        real *dx = R(din) + (size_t)n * C;
        real r = rstd[n];
        double dot = 0; /* sum_c dy_c w_c x_c */
        for (int c = 0; c < C; c++)
            dot += (double)dy[c] * CR(w)[c] * x[c];
        real k = (real)(dot * r * r * r / C);
        for (int c = 0; c < C; c++) {
            real g = dy[c] * CR(w)[c] * r - x[c] * k;
            dx[c] = accumulate ? dx[c] + g : g;
        }
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        real s = 0;
        for (int n = 0; n < N; n++)
            s += CR(dout)[(size_t)n * C + c] * CR(in)[(size_t)n * C + c] * rstd[n];
        dw[c] += s;
    }
}

static void matmul_fwd(moe_backend *be, act *out, const act *in, const act *w, int N, int IC,
                       int OC)
{
    cpu_gemm_xwT(R(out), CR(in), CR(w), N, IC, OC);
}

static void matmul_bwd(moe_backend *be, act *din, real *dw, const act *dout, const act *in,
                       const act *w, int N, int IC, int OC, int accumulate)
{
    if (din)
        cpu_gemm_dyw(R(din), CR(dout), CR(w), N, IC, OC, accumulate);
    cpu_gemm_dyTx(dw, CR(dout), CR(in), N, IC, OC);
}

/* Rotation angles as Hugging Face computes them (in fp32, whatever the model
 * dtype), so the reference matches transformers to the last bits:
 * inv_freq[j] = 1 / theta^(2j / HD), angle = t * inv_freq[j]. */
static void rope_table(float *cosv, float *sinv, int T, int HD, real theta)
{
    int half = HD / 2;
    for (int j = 0; j < half; j++) {
        float expo = (float)(2 * j) / (float)HD;
        float inv = 1.0f / powf((float)theta, expo);
        for (int t = 0; t < T; t++) {
            float ang = (float)t * inv;
            cosv[(size_t)t * half + j] = cosf(ang);
            sinv[(size_t)t * half + j] = sinf(ang);
        }
    }
}

/* sign = +1 rotates forward, -1 applies the transpose (the backward); token
 * bt at position pos[bt] (a packed row's positions restart at each
 * segment), or bt % T without pos */
static void rope_apply(act *x_, int B, int T, int H, int HD, const float *cosv, const float *sinv,
                       int sign, const int32_t *pos)
{
    real *x = R(x_);
    int half = HD / 2;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = pos ? pos[bt] : bt % T;
        for (int h = 0; h < H; h++) {
            real *v = x + ((size_t)bt * H + h) * HD;
            for (int j = 0; j < half; j++) {
                real c = cosv[(size_t)t * half + j], s = sign * sinv[(size_t)t * half + j];
                real a = v[j], b = v[j + half];
                v[j] = a * c - b * s;
                v[j + half] = b * c + a * s;
            }
        }
    }
}

static void rope_both(act *q, act *k, int B, int T, int NH, int NKV, int HD, real theta, int sign,
                      const int32_t *pos)
{
    size_t n = (size_t)T * (HD / 2);
    float *cosv = malloc(n * sizeof *cosv), *sinv = malloc(n * sizeof *sinv);
    if (!cosv || !sinv) {
        /* a few KB; running out here means the process is already lost */
        abort();
    }
    rope_table(cosv, sinv, T, HD, theta);
    rope_apply(q, B, T, NH, HD, cosv, sinv, sign, pos);
    rope_apply(k, B, T, NKV, HD, cosv, sinv, sign, pos);
    free(cosv);
    free(sinv);
}

static void rope_fwd(moe_backend *be, act *q, act *k, int B, int T, int NH, int NKV, int HD,
                     real theta, const int32_t *pos)
{
    rope_both(q, k, B, T, NH, NKV, HD, theta, +1, pos);
}

static void rope_bwd(moe_backend *be, act *dq, act *dk, int B, int T, int NH, int NKV, int HD,
                     real theta, const int32_t *pos)
{
    rope_both(dq, dk, B, T, NH, NKV, HD, theta, -1, pos);
}

static void lm_head_logits(moe_backend *be, real *logits, const act *x, const act *w, int N, int C,
                           int V)
{
    cpu_gemm_xwT(logits, CR(x), CR(w), N, C, V);
}

static int lm_head_loss(moe_backend *be, double *loss_sum_out, int64_t *n_valid_out, act *dx,
                        real *dw, const act *x, const act *w, const int32_t *targets, int N, int C,
                        int V, real dloss, moe_err *e)
{
    /* The reference keeps one logits block per call; the CUDA backend streams. */
    real *logits = malloc(sizeof(real) * (size_t)N * V);
    if (!logits)
        return moe_errf(e, "cpu lm_head_loss: out of memory for %d x %d logits", N, V);
    cpu_gemm_xwT(logits, CR(x), CR(w), N, C, V);
    double loss_sum = 0;
    int64_t n_valid = 0;
    int bad_target = -1;
    /* per-token losses in a buffer, summed in order afterwards: deterministic */
    double *tok_loss = calloc((size_t)N, sizeof *tok_loss);
    if (!tok_loss) {
        free(logits);
        return moe_errf(e, "cpu lm_head_loss: out of memory");
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real *l = logits + (size_t)n * V;
        int tgt = targets[n];
        if (tgt >= V) {
#pragma omp critical
            bad_target = n;
            tgt = -1;
        }
        real mx = l[0];
        for (int v = 1; v < V; v++)
            mx = l[v] > mx ? l[v] : mx;
        double sum = 0;
        for (int v = 0; v < V; v++)
            sum += exp((double)(l[v] - mx));
        double lse = mx + log(sum);
        if (tgt >= 0)
            tok_loss[n] = lse - l[tgt];
        if (dx) {
            for (int v = 0; v < V; v++) {
                real p = (real)exp((double)l[v] - lse);
                l[v] = tgt < 0 ? 0 : (p - (v == tgt)) * dloss;
            }
        }
    }
    for (int n = 0; n < N; n++)
        if (targets[n] >= 0 && targets[n] < V) {
            loss_sum += tok_loss[n];
            n_valid++;
        }
    free(tok_loss);
    if (bad_target >= 0) {
        free(logits);
        return moe_errf(e, "target token id %d at position %d is outside the vocabulary (%d)",
                        targets[bad_target], bad_target, V);
    }
    if (dx) {
        cpu_gemm_dyw(R(dx), logits, CR(w), N, C, V, 0);
        cpu_gemm_dyTx(dw, logits, CR(x), N, C, V);
    }
    free(logits);
    *loss_sum_out = loss_sum;
    *n_valid_out = n_valid;
    return 0;
}

void cpu_fill_dense_ops(moe_backend *be)
{
    be->embedding_fwd = embedding_fwd;
    be->embedding_bwd = embedding_bwd;
    be->rmsnorm_fwd = rmsnorm_fwd;
    be->add_rmsnorm_fwd = add_rmsnorm_fwd;
    be->add = add;
    be->rmsnorm_bwd = rmsnorm_bwd;
    be->matmul_fwd = matmul_fwd;
    be->matmul_bwd = matmul_bwd;
    be->rope_fwd = rope_fwd;
    be->rope_bwd = rope_bwd;
    be->lm_head_logits = lm_head_logits;
    be->lm_head_loss = lm_head_loss;
}

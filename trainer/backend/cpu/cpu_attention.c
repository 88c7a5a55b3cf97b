/* CPU reference: causal grouped-query attention, forward and backward.
 * Layouts: q, out [B, T, NH, HD]; k, v [B, T, NKV, HD]; lse [B, NH, T].
 * Query head h reads kv head h / (NH / NKV), as Hugging Face repeats kv heads.
 * With segments (packed rows), token t attends to keys first[t]..t, first[t]
 * being its segment's first token: what each record run alone would see.
 * One row of scores at a time: no T x T matrix is stored. */
#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"

/* The row-local index of each token's first key: its segment's start, or
 * 0 without segments. NULL when out of memory (the caller aborts: a few
 * bytes a token). */
static int *first_keys(int B, int T, const moe_segments *seg)
{
    int *first = malloc(sizeof(int) * (size_t)B * (size_t)T);
    if (!first)
        abort();
    for (int i = 0; i < B * T; i++)
        first[i] = 0;
    for (int s = 0; seg && s < seg->n_seg; s++) {
        int a = seg->cu_seqlens[s], z = seg->cu_seqlens[s + 1];
        for (int i = a; i < z; i++)
            first[i] = a % T;
    }
    return first;
}

#define R(p) ((real *)(p))
#define CR(p) ((const real *)(p))

static void attention_fwd(moe_backend *be, act *out, real *lse, const act *q_, const act *k_,
                          const act *v_, int B, int T, int NH, int NKV, int HD,
                          const moe_segments *seg)
{
    const real *q = CR(q_), *k = CR(k_), *v = CR(v_);
    int *first = first_keys(B, T, seg);
    int group = NH / NKV;
    real scale = (real)(1.0 / sqrt((double)HD));
#pragma omp parallel
    {
        real *p = malloc(sizeof(real) * (size_t)T);
#pragma omp for schedule(static) collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                int kh = h / group;
                for (int t = 0; t < T; t++) {
                    const real *qt = q + (((size_t)b * T + t) * NH + h) * HD;
                    int s0 = first[b * T + t];
                    real mx = -INFINITY;
                    for (int s = s0; s <= t; s++) {
                        const real *ks = k + (((size_t)b * T + s) * NKV + kh) * HD;
                        real d = 0;
                        for (int i = 0; i < HD; i++)
                            d += qt[i] * ks[i];
                        p[s] = d * scale;
                        mx = p[s] > mx ? p[s] : mx;
                    }
                    double sum = 0;
                    for (int s = s0; s <= t; s++) {
                        p[s] = (real)exp((double)(p[s] - mx));
                        sum += p[s];
                    }
                    real inv = (real)(1.0 / sum);
                    real *o = R(out) + (((size_t)b * T + t) * NH + h) * HD;
                    for (int i = 0; i < HD; i++)
                        o[i] = 0;
                    for (int s = s0; s <= t; s++) {
                        const real *vs = v + (((size_t)b * T + s) * NKV + kh) * HD;
                        real w = p[s] * inv;
                        for (int i = 0; i < HD; i++)
                            o[i] += w * vs[i];
                    }
                    lse[((size_t)b * NH + h) * T + t] = (real)(mx + log(sum));
                }
            }
        free(p);
    }
    free(first);
}

static void attention_bwd(moe_backend *be, act *dq_, act *dk_, act *dv_, const act *dout_,
                          const act *q_, const act *k_, const act *v_, const act *out_,
                          const real *lse, int B, int T, int NH, int NKV, int HD,
                          const moe_segments *seg)
{
    const real *q = CR(q_), *k = CR(k_), *v = CR(v_), *dout = CR(dout_), *out = CR(out_);
    int *first = first_keys(B, T, seg);
    real *dq = R(dq_), *dk = R(dk_), *dv = R(dv_);
    int group = NH / NKV;
    real scale = (real)(1.0 / sqrt((double)HD));
    /* dk and dv collect from every query head of a group: parallelise over
     * (batch, kv head) so each is written by one thread, in a fixed order */
#pragma omp parallel
    {
        real *ds = malloc(sizeof(real) * (size_t)T);
#pragma omp for schedule(static) collapse(2)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < NKV; kh++) {
                for (int s = 0; s < T; s++)
                    for (int i = 0; i < HD; i++) {
                        dk[(((size_t)b * T + s) * NKV + kh) * HD + i] = 0;
                        dv[(((size_t)b * T + s) * NKV + kh) * HD + i] = 0;
                    }
                for (int h = kh * group; h < (kh + 1) * group; h++)
                    for (int t = 0; t < T; t++) {
                        size_t qi = (((size_t)b * T + t) * NH + h) * HD;
                        const real *qt = q + qi, *dot_ = dout + qi, *ot = out + qi;
                        real *dqt = dq + qi;
                        real L = lse[((size_t)b * NH + h) * T + t];
                        real D = 0; /* sum_s p_s dp_s = dout . out */
                        for (int i = 0; i < HD; i++)
                            D += dot_[i] * ot[i];
                        for (int i = 0; i < HD; i++)
                            dqt[i] = 0;
                        int s0 = first[b * T + t];
                        for (int s = s0; s <= t; s++) {
                            size_t ki = (((size_t)b * T + s) * NKV + kh) * HD;
                            real sc = 0, dp = 0;
                            for (int i = 0; i < HD; i++) {
                                sc += qt[i] * k[ki + i];
                                dp += dot_[i] * v[ki + i];
                            }
                            real p = (real)exp((double)(sc * scale - L));
                            ds[s] = p * (dp - D) * scale;
                            for (int i = 0; i < HD; i++)
                                dv[ki + i] += p * dot_[i];
                        }
                        for (int s = s0; s <= t; s++) {
                            size_t ki = (((size_t)b * T + s) * NKV + kh) * HD;
                            for (int i = 0; i < HD; i++) {
                                dqt[i] += ds[s] * k[ki + i];
                                dk[ki + i] += ds[s] * qt[i];
                            }
                        }
                    }
            }
        free(ds);
    }
    free(first);
}

void cpu_fill_attention_ops(moe_backend *be)
{
    be->attention_fwd = attention_fwd;
    be->attention_bwd = attention_bwd;
}

/* CPU reference: the MoE block: router, dispatch plan, grouped expert FFN,
 * combine, and their backward passes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../route_plan.h"
#include "cpu_internal.h"

#define R(p) ((real *)(p))
#define CR(p) ((const real *)(p))

static void router_fwd(moe_backend *be, real *probs, int32_t *topk_idx, real *topk_w,
                       real *prob_sum, const act *x, const act *wg, int N, int C, int E, int K)
{
    cpu_gemm_xwT(probs, CR(x), CR(wg), N, C, E); /* logits, softmaxed in place */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        real *p = probs + (size_t)n * E;
        real mx = p[0];
        for (int e = 1; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        double sum = 0;
        for (int e = 0; e < E; e++) {
            p[e] = (real)exp((double)(p[e] - mx));
            sum += p[e];
        }
        for (int e = 0; e < E; e++)
            p[e] = (real)(p[e] / sum);
        /* top-k by repeated selection; ties go to the lower expert index */
        real wsum = 0;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++)
                    taken |= topk_idx[(size_t)n * K + i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            topk_idx[(size_t)n * K + j] = best;
            topk_w[(size_t)n * K + j] = p[best];
            wsum += p[best];
        }
        for (int j = 0; j < K; j++)
            topk_w[(size_t)n * K + j] /= wsum;
    }
    for (int e = 0; e < E; e++) {
        real s = 0;
        for (int n = 0; n < N; n++)
            s += probs[(size_t)n * E + e];
        prob_sum[e] = s;
    }
}

static int route_plan(moe_backend *be, moe_route_plan *plan, const int32_t *topk_idx, int N, int K,
                      int E, moe_err *e)
{
    if (route_plan_build(topk_idx, N, K, E, plan->expert_count, plan->expert_offset,
                         plan->row_token, plan->slot_row, e))
        return -1;
    for (int x = 0; x <= E; x++)
        plan->expert_offset_dev[x] = (int32_t)plan->expert_offset[x];
    plan->n_tokens = N;
    plan->top_k = K;
    plan->n_experts = E;
    plan->n_rows = N * K;
    return 0;
}

static void permute(moe_backend *be, act *x_perm, real *p_perm, const act *x, const real *topk_w,
                    const moe_route_plan *plan, int C)
{
    int NK = plan->n_tokens * plan->top_k;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < NK; i++) {
        int row = plan->slot_row[i];
        memcpy(R(x_perm) + (size_t)row * C, CR(x) + (size_t)(i / plan->top_k) * C,
               sizeof(real) * C);
        p_perm[row] = topk_w[i];
    }
}

static inline real sigmoid(real x) { return (real)(1.0 / (1.0 + exp(-(double)x))); }

static void experts_fwd(moe_backend *be, act *y_perm, act *h1, act *h3, act *a, const act *x_perm,
                        const real *p_perm, const act *w1, const act *w3, const act *w2,
                        const moe_route_plan *plan, int C, int I)
{
    for (int x = 0; x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        if (rows == 0)
            continue;
        const real *X = CR(x_perm) + r0 * C;
        real *H1 = R(h1) + r0 * I, *H3 = R(h3) + r0 * I, *A = R(a) + r0 * I;
        cpu_gemm_xwT(H1, X, CR(w1) + (size_t)x * I * C, (int)rows, C, I);
        cpu_gemm_xwT(H3, X, CR(w3) + (size_t)x * I * C, (int)rows, C, I);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            real p = p_perm[r0 + r];
            for (int i = 0; i < I; i++) {
                real g = H1[r * I + i];
                A[r * I + i] = p * (g * sigmoid(g)) * H3[r * I + i];
            }
        }
        cpu_gemm_xwT(R(y_perm) + r0 * C, A, CR(w2) + (size_t)x * C * I, (int)rows, I, C);
    }
}

static void combine(moe_backend *be, act *out, const act *y_perm, const moe_route_plan *plan, int C)
{
    int K = plan->top_k;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < plan->n_tokens; t++) {
        real *o = R(out) + (size_t)t * C;
        for (int c = 0; c < C; c++)
            o[c] = 0;
        for (int j = 0; j < K; j++) {
            const real *y = CR(y_perm) + (size_t)plan->slot_row[t * K + j] * C;
            for (int c = 0; c < C; c++)
                o[c] += y[c];
        }
    }
}

static void combine_bwd(moe_backend *be, act *dy_perm, const act *dout, const moe_route_plan *plan,
                        int C)
{
#pragma omp parallel for schedule(static)
    for (int row = 0; row < plan->n_rows; row++)
        memcpy(R(dy_perm) + (size_t)row * C, CR(dout) + (size_t)plan->row_token[row] * C,
               sizeof(real) * C);
}

static void experts_bwd(moe_backend *be, act *dx_perm, real *dp_perm, real *dw1, real *dw3,
                        real *dw2, const act *dy_perm, const act *x_perm, const act *h1,
                        const act *h3, const real *p_perm, const act *w1, const act *w3,
                        const act *w2, const moe_route_plan *plan, int C, int I,
                        int dw_overwrite)
{
    if (dw_overwrite) { /* the reference: zero, then the same accumulation */
        size_t per = (size_t)I * C;
        for (int x = 0; x < plan->n_experts; x++) {
            if (dw_overwrite == MOE_DW_OVERWRITE_LAZY && plan->expert_count[x] == 0)
                continue; /* left as it is: the caller counts it as zeros */
            memset(dw1 + x * per, 0, sizeof(real) * per);
            memset(dw3 + x * per, 0, sizeof(real) * per);
            memset(dw2 + x * per, 0, sizeof(real) * per);
        }
    }
    int64_t max_rows = 0;
    for (int x = 0; x < plan->n_experts; x++)
        max_rows = plan->expert_count[x] > max_rows ? plan->expert_count[x] : max_rows;
    if (max_rows == 0)
        return;
    /* scratch: the recomputed activation a, and its gradient reused for dh1/dh3 */
    real *A = malloc(sizeof(real) * (size_t)max_rows * I);
    real *dA = malloc(sizeof(real) * (size_t)max_rows * I);
    real *dH1 = malloc(sizeof(real) * (size_t)max_rows * I);
    real *dH3 = malloc(sizeof(real) * (size_t)max_rows * I);
    if (!A || !dA || !dH1 || !dH3)
        abort(); /* sized by the memory plan; failing here means the host is out of memory */
    for (int x = 0; x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        if (rows == 0)
            continue;
        const real *X = CR(x_perm) + r0 * C, *DY = CR(dy_perm) + r0 * C;
        const real *H1 = CR(h1) + r0 * I, *H3 = CR(h3) + r0 * I;
        const real *W1 = CR(w1) + (size_t)x * I * C, *W3 = CR(w3) + (size_t)x * I * C;
        const real *W2 = CR(w2) + (size_t)x * C * I;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            real p = p_perm[r0 + r];
            for (int i = 0; i < I; i++) {
                real g = H1[r * I + i];
                A[r * I + i] = p * (g * sigmoid(g)) * H3[r * I + i];
            }
        }
        cpu_gemm_dyTx(dw2 + (size_t)x * C * I, DY, A, (int)rows, I, C);
        cpu_gemm_dyw(dA, DY, W2, (int)rows, I, C, 0);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            real p = p_perm[r0 + r];
            real dp = 0;
            for (int i = 0; i < I; i++) {
                real g = H1[r * I + i], u = H3[r * I + i], s = sigmoid(g);
                real silu = g * s, da = dA[r * I + i];
                dp += da * silu * u;
                dH3[r * I + i] = da * p * silu;
                dH1[r * I + i] = da * p * u * (s * (1 + g * (1 - s)));
            }
            dp_perm[r0 + r] = dp;
        }
        cpu_gemm_dyTx(dw1 + (size_t)x * I * C, dH1, X, (int)rows, C, I);
        cpu_gemm_dyTx(dw3 + (size_t)x * I * C, dH3, X, (int)rows, C, I);
        real *DX = R(dx_perm) + r0 * C;
        cpu_gemm_dyw(DX, dH1, W1, (int)rows, C, I, 0);
        cpu_gemm_dyw(DX, dH3, W3, (int)rows, C, I, 1);
    }
    free(A);
    free(dA);
    free(dH1);
    free(dH3);
}

static void permute_bwd(moe_backend *be, act *dx, real *dtopk_w, const act *dx_perm,
                        const real *dp_perm, const moe_route_plan *plan, int C)
{
    int K = plan->top_k;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < plan->n_tokens; t++) {
        real *d = R(dx) + (size_t)t * C;
        for (int c = 0; c < C; c++)
            d[c] = 0;
        for (int j = 0; j < K; j++) {
            int row = plan->slot_row[t * K + j];
            const real *g = CR(dx_perm) + (size_t)row * C;
            for (int c = 0; c < C; c++)
                d[c] += g[c];
            dtopk_w[t * K + j] = dp_perm[row];
        }
    }
}

static void router_bwd(moe_backend *be, act *dx, real *dwg, const real *dtopk_w,
                       const real *aux_dprob, const act *x, const act *wg, const real *probs,
                       const int32_t *topk_idx, const real *topk_w, int N, int C, int E, int K)
{
    real *dlogits = malloc(sizeof(real) * (size_t)N * E);
    if (!dlogits)
        abort();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *p = probs + (size_t)n * E;
        real *dl = dlogits + (size_t)n * E;
        /* d prob: the aux loss, plus the top-k weights w_j = p_j / S */
        for (int e = 0; e < E; e++)
            dl[e] = aux_dprob ? aux_dprob[e] : 0;
        real S = 0, wdw = 0;
        for (int j = 0; j < K; j++) {
            S += p[topk_idx[(size_t)n * K + j]];
            wdw += topk_w[(size_t)n * K + j] * dtopk_w[(size_t)n * K + j];
        }
        for (int j = 0; j < K; j++)
            dl[topk_idx[(size_t)n * K + j]] += (dtopk_w[(size_t)n * K + j] - wdw) / S;
        /* softmax backward: dlogit = p (dprob - sum p dprob) */
        real dot = 0;
        for (int e = 0; e < E; e++)
            dot += p[e] * dl[e];
        for (int e = 0; e < E; e++)
            dl[e] = p[e] * (dl[e] - dot);
    }
    cpu_gemm_dyw(R(dx), dlogits, CR(wg), N, C, E, 1);
    cpu_gemm_dyTx(dwg, dlogits, CR(x), N, C, E);
    free(dlogits);
}

void cpu_fill_moe_ops(moe_backend *be)
{
    be->router_fwd = router_fwd;
    be->route_plan = route_plan;
    be->permute = permute;
    be->experts_fwd = experts_fwd;
    be->combine = combine;
    be->combine_bwd = combine_bwd;
    be->experts_bwd = experts_bwd;
    be->permute_bwd = permute_bwd;
    be->router_bwd = router_bwd;
}

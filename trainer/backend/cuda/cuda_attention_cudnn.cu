/* moekit CUDA backend: causal GQA attention through cuDNN's fused flash
 * attention (the SDPA forward and backward patterns of its graph API).
 *
 * The graphs are the ones cuDNN's frontend writes for its SDPA node, in the
 * same order and types (the engines match those patterns): forward
 *   S = Q K^T (fp32) * scale, causal mask (row >= col, else -inf),
 *   softmax with Stats = max + log(sum exp) (fp32, our lse), P (bf16), O = P V;
 * backward
 *   delta = rowsum(dO * O), S recomputed minus Stats, masked, E = exp,
 *   dV = E^T dO, dS = (dO V^T - delta) * E * scale, dK = dS^T Q, dQ = dS K
 * with GQA as a sum over each key head's query heads. Packed rows add a
 * [B, 1, T, T] bias of 0 / -inf to the scaled scores before the masks (where
 * cuDNN's frontend adds its bias), keeping each query within its sequence.
 * moekit's layouts
 * ([B, T, heads, HD], lse [B, NH, T]) go in as strides, with no copies.
 * A plan is built once per shape and kept; a shape cuDNN does not take is
 * remembered too, and runs on the fallback kernels. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_cudnn.h"
#include "cuda_internal.h"

/* the variant pack's ids: moekit's buffers and the by-value scalars */
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SCALE, U_NEG_INF, U_ONE,
       U_DELTA, U_DQ_ACCUM, U_BIAS };

#define ATTN_PLANS 16
typedef struct {
    int backward, B, T, NH, NKV, HD, bias;
    int ok; /* 1: plan built; -1: cuDNN does not take this shape */
    cudnn_graph g;
} attn_plan;

struct cuda_cudnn_attn {
    const cudnn_api *api;
    cudnnHandle_t handle;
    attn_plan plans[ATTN_PLANS];
    int n, next; /* entries used; the one a new shape replaces when full */
};

/* the shapes of the graph's tensors, from moekit's layouts */
typedef struct {
    int64_t q[4], q_str[4];   /* [B, NH, T, HD] of [B, T, NH, HD] */
    int64_t kt[4], kt_str[4]; /* K^T (or V^T): [B, NKV, HD, T] of [B, T, NKV, HD] */
    int64_t kv[4], kv_str[4]; /* [B, NKV, T, HD] */
    int64_t row[4], row_str[4]; /* per query row: [B, NH, T, 1] */
    int64_t s[4], s_str[4];   /* scores [B, NH, T, T] */
    int64_t st[4], st_str[4]; /* scores transposed, [B, NH, T(kv), T(q)] */
    int64_t full[4], full_str[4]; /* dK, dV of every query head, [B, NH, T, HD] */
    int64_t bias[4], bias_str[4]; /* packed sequences' score bias [B, 1, T, T] */
    int64_t one[4];
} attn_shapes;

static void shapes(attn_shapes *s, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HD)
{
    const int64_t q[4] = {B, NH, T, HD}, q_str[4] = {T * NH * HD, HD, NH * HD, 1};
    const int64_t kt[4] = {B, NKV, HD, T}, kt_str[4] = {T * NKV * HD, HD, 1, NKV * HD};
    const int64_t kv[4] = {B, NKV, T, HD}, kv_str[4] = {T * NKV * HD, HD, NKV * HD, 1};
    const int64_t row[4] = {B, NH, T, 1}, row_str[4] = {NH * T, T, 1, 1};
    const int64_t sc[4] = {B, NH, T, T}, s_str[4] = {NH * T * T, T * T, T, 1};
    const int64_t st_str[4] = {NH * T * T, T * T, 1, T};
    const int64_t full_str[4] = {NH * T * HD, T * HD, HD, 1};
    memcpy(s->q, q, sizeof q), memcpy(s->q_str, q_str, sizeof q_str);
    memcpy(s->kt, kt, sizeof kt), memcpy(s->kt_str, kt_str, sizeof kt_str);
    memcpy(s->kv, kv, sizeof kv), memcpy(s->kv_str, kv_str, sizeof kv_str);
    memcpy(s->row, row, sizeof row), memcpy(s->row_str, row_str, sizeof row_str);
    memcpy(s->s, sc, sizeof sc), memcpy(s->s_str, s_str, sizeof s_str);
    memcpy(s->st, sc, sizeof sc), memcpy(s->st_str, st_str, sizeof st_str);
    memcpy(s->full, q, sizeof q), memcpy(s->full_str, full_str, sizeof full_str);
    const int64_t bias[4] = {B, 1, T, T}, bias_str[4] = {T * T, T * T, T, 1};
    memcpy(s->bias, bias, sizeof bias), memcpy(s->bias_str, bias_str, sizeof bias_str);
    for (int i = 0; i < 4; i++)
        s->one[i] = 1;
}

#define VIRT(type, dim, str) cudnn_tensor(g, 0, type, dim, str, CUDNN_T_VIRTUAL)
#define SCALAR(uid) cudnn_tensor(g, uid, CUDNN_DATA_FLOAT, sh->one, sh->one, CUDNN_T_BY_VALUE)
#define PW(mode, x, b, y) cudnn_pointwise(g, mode, CUDNN_DATA_FLOAT, x, b, NULL, y, -1)

/* scores where key > query become -inf (top-left causal: row >= col kept) */
static cudnnBackendDescriptor_t causal_mask(cudnn_graph *g, const attn_shapes *sh,
                                            cudnnBackendDescriptor_t scores,
                                            cudnnBackendDescriptor_t neg_inf)
{
    cudnnBackendDescriptor_t row = VIRT(CUDNN_DATA_INT32, sh->s, sh->s_str);
    cudnnBackendDescriptor_t col = VIRT(CUDNN_DATA_INT32, sh->s, sh->s_str);
    cudnnBackendDescriptor_t keep = VIRT(CUDNN_DATA_BOOLEAN, sh->s, sh->s_str);
    cudnnBackendDescriptor_t out = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scores, NULL, NULL, row, 2);
    cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scores, NULL, NULL, col, 3);
    cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, scores, neg_inf, keep,
                    out, -1);
    return out;
}

/* scores + the packed sequences' bias, or the scores as they are */
static cudnnBackendDescriptor_t add_bias(cudnn_graph *g, const attn_shapes *sh, int bias,
                                         cudnnBackendDescriptor_t scores)
{
    if (!bias)
        return scores;
    cudnnBackendDescriptor_t b =
        cudnn_tensor(g, U_BIAS, CUDNN_DATA_BFLOAT16, sh->bias, sh->bias_str, 0);
    cudnnBackendDescriptor_t out = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    PW(CUDNN_POINTWISE_ADD, scores, b, out);
    return out;
}

static void build_fwd(cudnn_graph *g, const attn_shapes *sh, int bias)
{
    cudnnBackendDescriptor_t q = cudnn_tensor(g, U_Q, CUDNN_DATA_BFLOAT16, sh->q, sh->q_str, 0);
    cudnnBackendDescriptor_t kt = cudnn_tensor(g, U_K, CUDNN_DATA_BFLOAT16, sh->kt, sh->kt_str, 0);
    cudnnBackendDescriptor_t v = cudnn_tensor(g, U_V, CUDNN_DATA_BFLOAT16, sh->kv, sh->kv_str, 0);
    cudnnBackendDescriptor_t o = cudnn_tensor(g, U_O, CUDNN_DATA_BFLOAT16, sh->q, sh->q_str, 0);
    cudnnBackendDescriptor_t stats =
        cudnn_tensor(g, U_STATS, CUDNN_DATA_FLOAT, sh->row, sh->row_str, 0);
    cudnnBackendDescriptor_t scale = SCALAR(U_SCALE), neg_inf = SCALAR(U_NEG_INF);
    cudnnBackendDescriptor_t s = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t s_scaled = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnn_matmul(g, q, kt, s);
    PW(CUDNN_POINTWISE_MUL, s, scale, s_scaled);
    cudnnBackendDescriptor_t masked = causal_mask(g, sh, add_bias(g, sh, bias, s_scaled), neg_inf);
    /* softmax, keeping Stats = max + log(sum exp) */
    cudnnBackendDescriptor_t max = VIRT(CUDNN_DATA_FLOAT, sh->row, sh->row_str);
    cudnnBackendDescriptor_t centred = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t e = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t sum = VIRT(CUDNN_DATA_FLOAT, sh->row, sh->row_str);
    cudnnBackendDescriptor_t log_sum = VIRT(CUDNN_DATA_FLOAT, sh->row, sh->row_str);
    cudnnBackendDescriptor_t p = VIRT(CUDNN_DATA_BFLOAT16, sh->s, sh->s_str);
    cudnn_reduction(g, CUDNN_REDUCE_TENSOR_MAX, masked, max);
    PW(CUDNN_POINTWISE_SUB, masked, max, centred);
    PW(CUDNN_POINTWISE_EXP, centred, NULL, e);
    cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    PW(CUDNN_POINTWISE_LOG, sum, NULL, log_sum);
    PW(CUDNN_POINTWISE_ADD, max, log_sum, stats);
    PW(CUDNN_POINTWISE_DIV, e, sum, p);
    cudnn_matmul(g, p, v, o);
}

/* a gradient of every query head, summed over each key head's group (or
 * written straight when there is no grouping) */
static void head_sum_matmul(cudnn_graph *g, const attn_shapes *sh, int grouped,
                            cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                            cudnnBackendDescriptor_t out)
{
    if (!grouped) {
        cudnn_matmul(g, a, b, out);
        return;
    }
    cudnnBackendDescriptor_t full = VIRT(CUDNN_DATA_BFLOAT16, sh->full, sh->full_str);
    cudnn_matmul(g, a, b, full);
    cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

static void build_bwd(cudnn_graph *g, const attn_shapes *sh, int grouped, int bias)
{
    cudnnBackendDescriptor_t q = cudnn_tensor(g, U_Q, CUDNN_DATA_BFLOAT16, sh->q, sh->q_str, 0);
    cudnnBackendDescriptor_t kt = cudnn_tensor(g, U_K, CUDNN_DATA_BFLOAT16, sh->kt, sh->kt_str, 0);
    cudnnBackendDescriptor_t vt = cudnn_tensor(g, U_V, CUDNN_DATA_BFLOAT16, sh->kt, sh->kt_str, 0);
    cudnnBackendDescriptor_t o = cudnn_tensor(g, U_O, CUDNN_DATA_BFLOAT16, sh->q, sh->q_str, 0);
    cudnnBackendDescriptor_t dout = cudnn_tensor(g, U_DO, CUDNN_DATA_BFLOAT16, sh->q, sh->q_str, 0);
    cudnnBackendDescriptor_t stats =
        cudnn_tensor(g, U_STATS, CUDNN_DATA_FLOAT, sh->row, sh->row_str, 0);
    cudnnBackendDescriptor_t dq = cudnn_tensor(g, U_DQ, CUDNN_DATA_BFLOAT16, sh->q, sh->q_str, 0);
    cudnnBackendDescriptor_t dk = cudnn_tensor(g, U_DK, CUDNN_DATA_BFLOAT16, sh->kv, sh->kv_str, 0);
    cudnnBackendDescriptor_t dv = cudnn_tensor(g, U_DV, CUDNN_DATA_BFLOAT16, sh->kv, sh->kv_str, 0);
    cudnnBackendDescriptor_t scale = SCALAR(U_SCALE), neg_inf = SCALAR(U_NEG_INF), one = SCALAR(U_ONE);
    /* delta = rowsum(dO * O), kept in the workspace */
    const int64_t prod_str[4] = {sh->q[1] * sh->q[2] * sh->q[3], sh->q[2] * sh->q[3], sh->q_str[2], 1};
    cudnnBackendDescriptor_t prod = VIRT(CUDNN_DATA_FLOAT, sh->q, prod_str);
    cudnnBackendDescriptor_t rowsum = VIRT(CUDNN_DATA_FLOAT, sh->row, sh->row_str);
    cudnnBackendDescriptor_t delta = cudnn_tensor(g, U_DELTA, CUDNN_DATA_FLOAT, sh->row, sh->row_str, 0);
    PW(CUDNN_POINTWISE_MUL, dout, o, prod);
    cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, prod, rowsum);
    PW(CUDNN_POINTWISE_MUL, rowsum, one, delta);
    /* E = exp(mask(scale Q K^T) - Stats), the probabilities again */
    cudnnBackendDescriptor_t s = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t s_scaled = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t s_centred = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t e = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnn_matmul(g, q, kt, s);
    PW(CUDNN_POINTWISE_MUL, s, scale, s_scaled);
    PW(CUDNN_POINTWISE_SUB, add_bias(g, sh, bias, s_scaled), stats, s_centred);
    PW(CUDNN_POINTWISE_EXP, causal_mask(g, sh, s_centred, neg_inf), NULL, e);
    cudnnBackendDescriptor_t pt = VIRT(CUDNN_DATA_BFLOAT16, sh->st, sh->st_str);
    cudnn_reshape(g, e, pt);
    head_sum_matmul(g, sh, grouped, pt, dout, dv);
    /* dS = (dO V^T - delta) * E * scale */
    cudnnBackendDescriptor_t dp = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t dp_centred = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t ds_unscaled = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnnBackendDescriptor_t ds = VIRT(CUDNN_DATA_FLOAT, sh->s, sh->s_str);
    cudnn_matmul(g, dout, vt, dp);
    PW(CUDNN_POINTWISE_SUB, dp, delta, dp_centred);
    PW(CUDNN_POINTWISE_MUL, dp_centred, e, ds_unscaled);
    PW(CUDNN_POINTWISE_MUL, ds_unscaled, scale, ds);
    cudnnBackendDescriptor_t dst = VIRT(CUDNN_DATA_BFLOAT16, sh->st, sh->st_str);
    cudnn_reshape(g, ds, dst);
    head_sum_matmul(g, sh, grouped, dst, q, dk);
    /* dQ = dS K, accumulated in fp32 in the workspace, then written as bf16 */
    const int64_t k_str[4] = {sh->kt_str[0], sh->kt_str[1], sh->kt_str[3], sh->kt_str[2]};
    cudnnBackendDescriptor_t k = VIRT(CUDNN_DATA_BFLOAT16, sh->kv, k_str);
    cudnnBackendDescriptor_t dq_acc =
        cudnn_tensor(g, U_DQ_ACCUM, CUDNN_DATA_FLOAT, sh->full, sh->full_str, 0);
    cudnn_reshape(g, kt, k);
    cudnn_matmul(g, ds, k, dq_acc);
    PW(CUDNN_POINTWISE_IDENTITY, dq_acc, NULL, dq);
}

static size_t align256(size_t n) { return cuda_align256(n); }
/* the backward's fp32 buffers after the plan's workspace: delta [B, NH, T], dQ [B, NH, T, HD] */
static size_t bwd_extra(const attn_plan *p, size_t *delta_bytes)
{
    return cuda_cudnn_bwd_extra_bytes(p->B, p->NH, p->T, p->HD, delta_bytes);
}

static struct cuda_cudnn_attn *attn_state(moe_backend *be)
{
    cuda_ctx *c = CTX(be);
    if (c->cudnn_attn)
        return c->cudnn_attn->api ? c->cudnn_attn : NULL;
    struct cuda_cudnn_attn *a = (struct cuda_cudnn_attn *)calloc(1, sizeof *a);
    if (!a)
        return NULL;
    c->cudnn_attn = a;
    char why[256] = "";
    const cudnn_api *api = cudnn_load(why, sizeof why);
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    if (api && (st = api->create(&a->handle)) != CUDNN_STATUS_SUCCESS)
        snprintf(why, sizeof why, "cudnnCreate: %s", api->status_string(st));
    if (!api || st != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "moe-train: attention on moekit's kernels: %s\n", why);
        return NULL;
    }
    a->api = api;
    return a;
}

/* the plan of this shape, built on first use; NULL where cuDNN does not take it */
static attn_plan *attn_plan_for(moe_backend *be, int backward, int B, int T, int NH, int NKV, int HD,
                                int bias)
{
    struct cuda_cudnn_attn *a = attn_state(be);
    if (!a)
        return NULL;
    for (int i = 0; i < a->n; i++) {
        attn_plan *p = &a->plans[i];
        if (p->backward == backward && p->B == B && p->T == T && p->NH == NH && p->NKV == NKV &&
            p->HD == HD && p->bias == bias)
            return p->ok > 0 ? p : NULL;
    }
    attn_plan *p;
    if (a->n < ATTN_PLANS) {
        p = &a->plans[a->n++];
    } else { /* full: the oldest shape goes */
        p = &a->plans[a->next];
        a->next = (a->next + 1) % ATTN_PLANS;
        cudnn_graph_free(&p->g);
    }
    *p = (attn_plan){backward, B, T, NH, NKV, HD, bias, 0, {}};
    cudnn_graph_init(&p->g, a->api);
    attn_shapes sh;
    shapes(&sh, B, T, NH, NKV, HD);
    if (backward)
        build_bwd(&p->g, &sh, NH != NKV, bias);
    else
        build_fwd(&p->g, &sh, bias);
    p->ok = p->g.error[0] || cudnn_graph_plan(&p->g, a->handle) ? -1 : 1;
    if (p->ok < 0) {
        fprintf(stderr, "moe-train: attention %s B=%d T=%d heads %d/%d dim %d%s on moekit's "
                "kernels: cuDNN %zu: %s\n", backward ? "backward" : "forward", B, T, NH, NKV, HD,
                bias ? " (packed sequences)" : "", a->api->version, p->g.error);
        cudnn_graph_free(&p->g);
        return NULL;
    }
    return p;
}

/* the plan's workspace, then `extra` bytes of the caller's (NULL if it cannot be had: noted) */
static char *attn_workspace(moe_backend *be, const attn_plan *p, size_t extra)
{
    return (char *)cuda_scratch(be, CUDA_SCRATCH_CUDNN,
                                cuda_cudnn_scratch_bytes((size_t)p->g.workspace, extra));
}

static void attn_run(moe_backend *be, attn_plan *p, int n, const int64_t *uids, void *const *ptrs,
                     void *ws)
{
    struct cuda_cudnn_attn *a = CTX(be)->cudnn_attn;
    cudnnStatus_t st = a->api->set_stream(a->handle, CTX(be)->stream);
    if (st != CUDNN_STATUS_SUCCESS)
        cuda_note(be, "attention (cudnnSetStream)", a->api->status_string(st));
    else if (cudnn_graph_execute(&p->g, a->handle, n, uids, ptrs, ws))
        cuda_note(be, "attention (cuDNN)", p->g.error);
}

static float neg_inf_value(const cudnn_api *api)
{
    return api->version < 91000 ? -FLT_MAX : -INFINITY; /* older cuDNN masks with the lowest float */
}

int cuda_attention_cudnn_fwd(moe_backend *be, bf16 *out, float *lse, const bf16 *q,
                             const bf16 *k, const bf16 *v, int B, int T, int NH, int NKV, int HD,
                             const bf16 *bias)
{
    attn_plan *p = attn_plan_for(be, 0, B, T, NH, NKV, HD, bias != NULL);
    if (!p)
        return 1;
    float scale = (float)(1.0 / sqrt((double)HD)), neg_inf = neg_inf_value(p->g.api);
    const int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF, U_BIAS};
    void *const ptrs[] = {(void *)q, (void *)k, (void *)v, out, lse, &scale, &neg_inf,
                          (void *)bias};
    char *ws = attn_workspace(be, p, 0);
    if (ws)
        attn_run(be, p, bias ? 8 : 7, uids, ptrs, ws);
    return 0;
}

int cuda_attention_cudnn_bwd(moe_backend *be, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                             const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
                             const float *lse, int B, int T, int NH, int NKV, int HD,
                             const bf16 *bias)
{
    attn_plan *p = attn_plan_for(be, 1, B, T, NH, NKV, HD, bias != NULL);
    if (!p)
        return 1;
    /* the fp32 delta and dQ accumulator live after the plan's workspace; the
     * address is known once the scratch is sized, so the pack is filled after */
    size_t delta_bytes, extra = bwd_extra(p, &delta_bytes);
    char *ws = attn_workspace(be, p, extra);
    if (!ws)
        return 0;
    char *delta = ws + align256((size_t)p->g.workspace), *dq_acc = delta + delta_bytes;
    if (p->g.api->version < 90600) /* older cuDNN expects the accumulator cleared */
        CU(be, "attention_bwd (cuDNN)",
           cudaMemsetAsync(dq_acc, 0, extra - delta_bytes, CTX(be)->stream));
    float scale = (float)(1.0 / sqrt((double)HD)), neg_inf = neg_inf_value(p->g.api), one = 1.f;
    const int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV,
                            U_SCALE, U_NEG_INF, U_ONE, U_DELTA, U_DQ_ACCUM, U_BIAS};
    void *const ptrs[] = {(void *)q, (void *)k, (void *)v, (void *)out, (void *)lse,
                          (void *)dout, dq, dk, dv, &scale, &neg_inf, &one, delta, dq_acc,
                          (void *)bias};
    attn_run(be, p, bias ? 15 : 14, uids, ptrs, ws);
    return 0;
}

void cuda_attention_cudnn_destroy(moe_backend *be)
{
    struct cuda_cudnn_attn *a = CTX(be)->cudnn_attn;
    if (!a)
        return;
    for (int i = 0; i < a->n; i++)
        if (a->plans[i].ok > 0)
            cudnn_graph_free(&a->plans[i].g);
    if (a->api)
        a->api->destroy(a->handle);
    free(a);
    CTX(be)->cudnn_attn = NULL;
}

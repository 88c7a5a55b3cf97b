/* moekit: the Mixtral MoE decoder's memory plan, forward and backward.
 *
 * Per layer:  h = x + Attn(RMSNorm(x));  x' = h + MoE(RMSNorm(h))
 * MoE(u)   =  sum over the top-k experts e of w_e * W2_e (silu(W1_e u) * W3_e u)
 * with w the renormalised top-k of softmax(Wg u). The backward walks the same
 * ops in reverse; every number is computed by the backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#include "../numerics/half.h"
#include "params.h"

struct moe_layer_acts {
    act *resid_in, *ln1, *q, *k, *v, *att, *resid_mid, *ln2;
    real *rstd1, *rstd2, *lse;
    real *probs, *topk_w, *prob_sum;
    int32_t *topk_idx;
    moe_route_plan plan;
    int resident_pass;    /* the pass of the expert rows x_perm, h1, h3 hold */
    int64_t *route_count; /* [E] host */
    act *x_perm, *h1, *h3, *a, *y_perm, *moe_out;
    real *p_perm;
};

/* ---- the memory plan ---- */

typedef struct {
    moe_backend *be;
    moe_err *e;
    int failed;
} planner;

static void *plan_bytes(planner *pl, size_t bytes)
{
    if (pl->failed)
        return NULL;
    void *p = pl->be->alloc(pl->be, bytes, pl->e);
    if (!p)
        pl->failed = 1;
    return p;
}

/* the kind of the buffers planned next (backend.h) */
static void plan_kind(planner *pl, moe_mem_kind k) { pl->be->mem_kind = k; }

static act *plan_act(planner *pl, size_t n) { return plan_bytes(pl, pl->be->act_bytes(pl->be, n)); }
static real *plan_real(planner *pl, size_t n) { return plan_bytes(pl, sizeof(real) * n); }
static int32_t *plan_i32(planner *pl, size_t n) { return plan_bytes(pl, sizeof(int32_t) * n); }

static void *host_calloc(planner *pl, size_t n, size_t sz)
{
    if (pl->failed)
        return NULL;
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        moe_errf(pl->e, "out of host memory");
        pl->failed = 1;
    }
    return p;
}

/* Layer l's buffers. Layer 0 owns the buffers that layers share. Always
 * shared: what only the forward reads (the SwiGLU output, the experts'
 * output rows, the combined MoE output, each consumed before the next layer
 * writes it). With recompute, every layer keeps only its input and router
 * statistics; the rest is one layer's worth, rebuilt per layer in the
 * backward. rows: the expert rows of one pass. */
static void plan_layer(planner *pl, moe_model *m, int l, size_t rows)
{
    moe_backend *be = pl->be;
    const moe_dims *d = &m->d;
    size_t N = (size_t)m->B * m->T, C = d->C, E = d->E, K = d->K, I = d->I;
    size_t QD = (size_t)d->NH * d->HD, KVD = (size_t)d->NKV * d->HD;
    moe_layer_acts *a = &m->layers[l];
    const moe_layer_acts *s0 = l > 0 ? &m->layers[0] : NULL;
    plan_kind(pl, MOE_MEM_ACTIVATIONS);
    a->resid_in = l == 0 ? m->embed_out : plan_act(pl, N * C);
    plan_kind(pl, MOE_MEM_WORKSPACE);
    a->prob_sum = plan_real(pl, E);
    a->route_count = host_calloc(pl, E, sizeof(int64_t));
    a->moe_out = s0 ? s0->moe_out : plan_act(pl, N * C);
    plan_kind(pl, MOE_MEM_CAPACITY);
    size_t a_rows = be->expert_swiglu_rows ? be->expert_swiglu_rows(be, rows) : rows;
    a->a = s0 ? s0->a : a_rows ? plan_act(pl, a_rows * I) : NULL;
    a->y_perm = s0 ? s0->y_perm : plan_act(pl, rows * C);
    if (s0 && m->recompute) {
        int64_t *rc = a->route_count;
        real *ps = a->prob_sum;
        act *in = a->resid_in;
        *a = *s0;
        a->resid_in = in, a->prob_sum = ps, a->route_count = rc;
        return;
    }
    plan_kind(pl, MOE_MEM_ACTIVATIONS);
    a->ln1 = plan_act(pl, N * C);
    a->rstd1 = plan_real(pl, N);
    a->q = plan_act(pl, N * QD);
    a->k = plan_act(pl, N * KVD);
    a->v = plan_act(pl, N * KVD);
    a->att = plan_act(pl, N * QD);
    a->lse = plan_real(pl, (size_t)m->B * d->NH * m->T);
    a->resid_mid = plan_act(pl, N * C);
    a->ln2 = plan_act(pl, N * C);
    a->rstd2 = plan_real(pl, N);
    a->probs = plan_real(pl, N * E);
    a->topk_idx = plan_i32(pl, N * K);
    a->topk_w = plan_real(pl, N * K);
    a->plan.slot_row = plan_i32(pl, N * K);
    a->plan.expert_offset_dev = plan_i32(pl, (size_t)m->E_local + 1);
    plan_kind(pl, MOE_MEM_CAPACITY);
    a->plan.row_token = plan_i32(pl, rows);
    a->plan.expert_count = host_calloc(pl, (size_t)m->E_local, sizeof(int64_t));
    a->plan.expert_offset = host_calloc(pl, (size_t)m->E_local + 1, sizeof(int64_t));
    a->x_perm = plan_act(pl, rows * C);
    a->p_perm = plan_real(pl, rows);
    /* the SwiGLU inputs as the backend keeps them (fp8_block: E4M3) */
    size_t saved = be->expert_saved_bytes ? be->expert_saved_bytes(be, rows, I)
                                          : be->act_bytes(be, rows * I);
    /* train.recompute_experts: one layer's worth, rebuilt per layer in the backward */
    a->h1 = s0 && m->recompute_experts ? s0->h1 : plan_bytes(pl, saved);
    a->h3 = s0 && m->recompute_experts ? s0->h3 : plan_bytes(pl, saved);
}

int model_create(moe_model **out, const moe_dims *d, moe_backend *be, moe_dispatcher *disp, int B,
                 int T, moe_err *e)
{
    return model_create_parallel(out, d, be, disp, B, T, 0, 1, 1, 0, e);
}

/* one moment buffer of n elements (bf16: one byte more, as it always was) */
static size_t moment_bytes(int bf16, size_t n)
{
    return bf16 ? sizeof(uint16_t) * n + 1 : sizeof(real) * n;
}

/* An equal share of the experts for every rank, and head sizes RoPE and GQA take. */
static int check_shape(const moe_dims *d, int ep_rank, int ep_size, moe_err *e)
{
    if (ep_size < 1 || ep_rank < 0 || ep_rank >= ep_size || d->E % ep_size)
        return moe_errf(e, "expert-parallel rank %d of %d cannot hold an equal share of %d "
                           "experts", ep_rank, ep_size, d->E);
    if (d->HD % 2)
        return moe_errf(e, "head_dim %d must be even for rotary embeddings", d->HD);
    if (d->NH % d->NKV)
        return moe_errf(e, "num_heads %d is not a multiple of num_kv_heads %d", d->NH, d->NKV);
    return 0;
}

/* The model's description and its parameter table, nothing allocated on
 * the backend yet. */
static moe_model *model_new(const moe_dims *d, moe_backend *be, moe_dispatcher *disp, int B,
                            int T, int ep_rank, int ep_size, int recompute, moe_err *e)
{
    moe_model *m = calloc(1, sizeof *m);
    if (!m) {
        moe_errf(e, "out of memory");
        return NULL;
    }
    m->be = be;
    m->d = *d;
    m->B = B;
    m->T = T;
    m->ep_rank = ep_rank;
    m->ep_size = ep_size;
    m->E_local = d->E / ep_size;
    m->e0 = ep_rank * m->E_local;
    m->disp = disp;
    m->recompute = recompute == MOE_RECOMPUTE_LAYERS;
    m->recompute_experts = recompute == MOE_RECOMPUTE_EXPERTS;
    if (params_layout(m, e)) {
        model_destroy(m);
        return NULL;
    }
    return m;
}

/* bytes of the masters: the low halves with split masters, else fp32 */
static size_t master_bytes(const moe_model *m)
{
    return (m->split_master ? sizeof(uint16_t) : sizeof(real)) * m->n_elems;
}

/* The parameters' state: masters and moments (with_moments), the gradient
 * buffer and the compute copy of the weights. */
static void plan_param_state(planner *pl, moe_model *m, int with_moments)
{
    moe_backend *be = pl->be;
    size_t P = m->n_elems;
    /* split masters where the backend offers them: the compute copy is the high half */
    m->split_master = be->masters_upload && be->masters_download && be->adamw_split;
    plan_kind(pl, MOE_MEM_MASTER);
    if (with_moments)
        m->master = plan_bytes(pl, master_bytes(m));
    plan_kind(pl, MOE_MEM_GRADS);
    m->grad = plan_real(pl, P);
    plan_kind(pl, MOE_MEM_OPTIMIZER);
    m->moments_bf16 = with_moments == MOE_MOMENTS_BF16;
    if (with_moments) {
        m->m = plan_bytes(pl, moment_bytes(m->moments_bf16, P));
        m->v = plan_bytes(pl, moment_bytes(m->moments_bf16, P));
    }
    plan_kind(pl, MOE_MEM_WEIGHTS);
    m->wc = plan_act(pl, P);
}

/* A batch's tokens, targets and packed sequences (8 bytes a token, on
 * every backend so the plan counts them too). */
static void plan_batch(planner *pl, moe_model *m)
{
    size_t N = (size_t)m->B * m->T;
    plan_kind(pl, MOE_MEM_WORKSPACE);
    m->tokens = plan_i32(pl, N);
    m->targets = plan_i32(pl, N);
    m->seg_pos = plan_i32(pl, N);
    m->seg_cu = plan_i32(pl, N + 1);
}

/* The forward's buffers: the embedding, every layer's (plan_layer), the
 * host bookkeeping of the experts' gradients, the final norm. rows: the
 * expert rows of one pass. */
static void plan_forward(planner *pl, moe_model *m, size_t rows)
{
    const moe_dims *d = &m->d;
    size_t N = (size_t)m->B * m->T, C = d->C, E = d->E;
    plan_kind(pl, MOE_MEM_ACTIVATIONS);
    m->embed_out = plan_act(pl, N * C);
    m->layers = host_calloc(pl, (size_t)d->L, sizeof *m->layers);
    m->expert_dw_fresh = host_calloc(pl, (size_t)d->L, 1);
    m->expert_dw_valid = host_calloc(pl, (size_t)d->L * m->E_local, 1);
    /* at most one range per expert weight tensor, and one more between them */
    m->grad_ranges_cap = 3 * d->L * m->E_local + 1;
    m->grad_ranges = host_calloc(pl, (size_t)m->grad_ranges_cap, sizeof(moe_range));
    for (int l = 0; l < d->L && !pl->failed; l++)
        plan_layer(pl, m, l, rows);
    plan_kind(pl, MOE_MEM_WORKSPACE);
    if (m->recompute) {
        m->prob_sum_scratch = plan_real(pl, E);
        m->route_count_scratch = host_calloc(pl, E, sizeof(int64_t));
    }
    plan_kind(pl, MOE_MEM_ACTIVATIONS);
    m->resid_final = plan_act(pl, N * C);
    m->lnf = plan_act(pl, N * C);
    m->rstdf = plan_real(pl, N);
}

/* The backward's gradient buffers, shared by all layers, and the router's
 * statistics. */
static void plan_backward(planner *pl, moe_model *m, size_t rows)
{
    const moe_dims *d = &m->d;
    size_t N = (size_t)m->B * m->T, C = d->C, E = d->E, K = d->K;
    size_t QD = (size_t)d->NH * d->HD, KVD = (size_t)d->NKV * d->HD;
    plan_kind(pl, MOE_MEM_WORKSPACE);
    m->d_resid = plan_act(pl, N * C);
    m->d_a = plan_act(pl, N * C);
    m->d_b = plan_act(pl, N * QD);
    m->d_q = plan_act(pl, N * QD);
    m->d_k = plan_act(pl, N * KVD);
    m->d_v = plan_act(pl, N * KVD);
    plan_kind(pl, MOE_MEM_CAPACITY);
    m->d_rows_a = plan_act(pl, rows * C);
    m->d_rows_b = plan_act(pl, rows * C);
    m->d_prows = plan_real(pl, rows);
    plan_kind(pl, MOE_MEM_WORKSPACE);
    m->d_topk = plan_real(pl, N * K);
    m->aux_dprob_dev = plan_real(pl, E);
    m->tmp_c = plan_act(pl, N * C);
    m->route_frac = host_calloc(pl, E, sizeof(double));
    m->layer_count = host_calloc(pl, (size_t)m->E_local, sizeof(int64_t));
}

/* Gradients and, where the model keeps them, moments and masters start at zero. */
static void zero_param_state(moe_model *m, int with_moments)
{
    moe_backend *be = m->be;
    size_t P = m->n_elems;
    be->memset0(be, m->grad, sizeof(real) * P);
    if (with_moments) {
        be->memset0(be, m->m, moment_bytes(m->moments_bf16, P));
        be->memset0(be, m->v, moment_bytes(m->moments_bf16, P));
        be->memset0(be, m->master, master_bytes(m));
    }
}

int model_create_parallel(moe_model **out, const moe_dims *d, moe_backend *be,
                          moe_dispatcher *disp, int B, int T, int ep_rank, int ep_size,
                          int with_moments, int recompute, moe_err *e)
{
    if (check_shape(d, ep_rank, ep_size, e))
        return -1;
    moe_model *m = model_new(d, be, disp, B, T, ep_rank, ep_size, recompute, e);
    if (!m)
        return -1;
    planner pl = {be, e, 0};
    size_t N = (size_t)B * T;
    size_t rows = (size_t)disp->max_rows(disp, (int)N, d->K);
    plan_param_state(&pl, m, with_moments);
    plan_batch(&pl, m);
    plan_forward(&pl, m, rows);
    plan_backward(&pl, m, rows);
    /* the dispatcher's buffers too, now, so the memory plan counts them */
    if (!pl.failed && disp->reserve && disp->reserve(disp, be, (int)N, d->K, d->C, d->L, e))
        pl.failed = 1;
    if (pl.failed) {
        moe_err_prefix(e, "model memory plan (%d x %d tokens, %zu parameters)", B, T, m->n_elems);
        model_destroy(m);
        return -1;
    }
    zero_param_state(m, with_moments);
    *out = m;
    return 0;
}

void model_destroy(moe_model *m)
{
    if (!m)
        return;
    moe_backend *be = m->be;
#define FREE(p) do { if (p) be->free(be, p); } while (0)
    if (m->layers) {
        for (int l = 0; l < m->d.L; l++) {
            moe_layer_acts *a = &m->layers[l];
            if (l > 0)
                FREE(a->resid_in);
            FREE(a->prob_sum);
            free(a->route_count);
            if (l == 0) {
                FREE(a->a); FREE(a->y_perm); FREE(a->moe_out);
            }
            if (l > 0 && m->recompute)
                continue; /* the rest is layer 0's */
            FREE(a->ln1); FREE(a->rstd1); FREE(a->q); FREE(a->k); FREE(a->v); FREE(a->att);
            FREE(a->lse); FREE(a->resid_mid); FREE(a->ln2); FREE(a->rstd2); FREE(a->probs);
            FREE(a->topk_idx); FREE(a->topk_w); FREE(a->plan.row_token);
            FREE(a->plan.slot_row); FREE(a->plan.expert_offset_dev); FREE(a->x_perm);
            FREE(a->p_perm);
            if (l == 0 || !m->recompute_experts) {
                FREE(a->h1); FREE(a->h3);
            }
            free(a->plan.expert_count);
            free(a->plan.expert_offset);
        }
        free(m->layers);
    }
    FREE(m->prob_sum_scratch);
    free(m->route_count_scratch);
    FREE(m->master); FREE(m->grad); FREE(m->m); FREE(m->v); FREE(m->wc); FREE(m->tokens);
    FREE(m->targets); FREE(m->seg_pos); FREE(m->seg_cu); FREE(m->embed_out); FREE(m->resid_final); FREE(m->lnf); FREE(m->rstdf);
    FREE(m->d_resid); FREE(m->d_a); FREE(m->d_b); FREE(m->d_q); FREE(m->d_k); FREE(m->d_v);
    FREE(m->d_rows_a); FREE(m->d_rows_b); FREE(m->d_prows); FREE(m->d_topk);
    FREE(m->aux_dprob_dev); FREE(m->tmp_c);
#undef FREE
    free(m->route_frac);
    free(m->layer_count);
    free(m->expert_dw_fresh);
    free(m->expert_dw_valid);
    free(m->grad_ranges);
    free(m->params);
    free(m->spans);
    free(m);
}

/* ---- helpers ---- */

static const act *W(const moe_model *m, moe_param_kind kind, int layer)
{
    const moe_param *p = params_find(m, kind, layer);
    return (const char *)m->wc + m->be->act_bytes(m->be, p->offset);
}

static real *G(const moe_model *m, moe_param_kind kind, int layer)
{
    return m->grad + params_find(m, kind, layer)->offset;
}

static int is_expert_weight(moe_param_kind k) { return k == MOE_P_W1 || k == MOE_P_W3 || k == MOE_P_W2; }

/* Zero every gradient but the experts' weights (~90% of them at Mixtral
 * sizes): the next backward writes those instead of accumulating, so they are
 * neither zeroed nor read back. Contiguous tensors go in one memset. */
void model_zero_grad(moe_model *m)
{
    moe_backend *be = m->be;
    size_t run0 = 0, run_n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        if (is_expert_weight(p->kind))
            continue;
        if (run_n && run0 + run_n == p->offset) {
            run_n += p->n;
            continue;
        }
        if (run_n)
            be->memset0(be, m->grad + run0, sizeof(real) * run_n);
        run0 = p->offset, run_n = p->n;
    }
    if (run_n)
        be->memset0(be, m->grad + run0, sizeof(real) * run_n);
    memset(m->expert_dw_fresh, 1, (size_t)m->d.L);
    memset(m->expert_dw_valid, 0, (size_t)m->d.L * m->E_local);
}

/* the dW slices of local expert x of layer l to zeros */
static void zero_expert_dw(moe_model *m, int l, int x)
{
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        if (p->layer != l || !is_expert_weight(p->kind))
            continue;
        size_t per = p->n / (size_t)m->E_local;
        m->be->memset0(m->be, m->grad + p->offset + (size_t)x * per, sizeof(real) * per);
    }
    m->expert_dw_valid[(size_t)l * m->E_local + x] = 1;
}

/* A layer whose experts' backward did not run this step still needs zeros
 * (or, lazily, only to be counted as zeros: its experts stay invalid). */
static void zero_fresh_expert_grads(moe_model *m)
{
    for (int l = 0; l < m->d.L; l++) {
        if (!m->expert_dw_fresh[l])
            continue;
        if (!m->lazy_expert_grads)
            for (int x = 0; x < m->E_local; x++)
                zero_expert_dw(m, l, x);
        m->expert_dw_fresh[l] = 0;
    }
}

/* The backward of layer l's experts: how it writes dW, and which experts'
 * dW hold values after it. */
static int expert_dw_mode(moe_model *m, int l, const moe_route_plan *plan)
{
    unsigned char *valid = m->expert_dw_valid + (size_t)l * m->E_local;
    if (m->expert_dw_fresh[l]) {
        for (int x = 0; x < m->E_local; x++)
            valid[x] = !m->lazy_expert_grads || plan->expert_count[x] > 0;
        return m->lazy_expert_grads ? MOE_DW_OVERWRITE_LAZY : MOE_DW_OVERWRITE;
    }
    /* a later micro-batch accumulates: an expert reached now for the first
     * time this step starts from zeros */
    for (int x = 0; x < m->E_local; x++)
        if (!valid[x] && plan->expert_count[x] > 0)
            zero_expert_dw(m, l, x);
    return MOE_DW_ACCUMULATE;
}

/* The same for a layer whose rows run in several passes: every pass
 * accumulates, so the experts with rows in any pass start from zeros here
 * (as MOE_DW_OVERWRITE would: zeros, then the same sums). */
static int expert_dw_start(moe_model *m, int l)
{
    unsigned char *valid = m->expert_dw_valid + (size_t)l * m->E_local;
    int fresh = m->expert_dw_fresh[l];
    for (int x = 0; x < m->E_local; x++)
        if ((fresh && (!m->lazy_expert_grads || m->layer_count[x] > 0)) ||
            (!fresh && !valid[x] && m->layer_count[x] > 0))
            zero_expert_dw(m, l, x);
    return MOE_DW_ACCUMULATE;
}

const int64_t *model_route_counts(const moe_model *m, int layer)
{
    return m->layers[layer].plan.expert_count;
}

void model_set_lazy_expert_grads(moe_model *m, int on)
{
    if (!on)
        model_materialize_grads(m);
    m->lazy_expert_grads = on != 0;
}

void model_materialize_grads(moe_model *m)
{
    for (int l = 0; l < m->d.L; l++)
        for (int x = 0; x < m->E_local; x++)
            if (!m->expert_dw_valid[(size_t)l * m->E_local + x])
                zero_expert_dw(m, l, x);
}

/* The sorted ranges of m->grad that count as zeros (merged where adjacent),
 * in m->grad_ranges; their number. */
static int grad_zero_ranges(moe_model *m)
{
    int n = 0;
    for (int i = 0; i < m->n_params; i++) { /* params are in offset order */
        const moe_param *p = &m->params[i];
        if (!is_expert_weight(p->kind) || p->layer < 0)
            continue;
        size_t per = p->n / (size_t)m->E_local;
        for (int x = 0; x < m->E_local; x++) {
            if (m->expert_dw_valid[(size_t)p->layer * m->E_local + x])
                continue;
            size_t off = p->offset + (size_t)x * per;
            if (n > 0 && m->grad_ranges[n - 1].offset + m->grad_ranges[n - 1].n == off)
                m->grad_ranges[n - 1].n += per;
            else
                m->grad_ranges[n++] = (moe_range){off, per};
        }
    }
    return n;
}

double model_grad_sum_squares(moe_model *m)
{
    moe_backend *be = m->be;
    int nz = m->lazy_expert_grads ? grad_zero_ranges(m) : 0;
    if (nz == 0)
        return be->sum_squares(be, m->grad, m->n_elems);
    /* the complement of the zero ranges, in place: at most one range more */
    moe_range *r = m->grad_ranges;
    size_t end = m->n_elems;
    int nk = 0;
    size_t from = 0;
    for (int i = 0; i < nz; i++) {
        moe_range z = r[i];
        if (z.offset > from)
            r[nk++] = (moe_range){from, z.offset - from};
        from = z.offset + z.n;
    }
    if (from < end)
        r[nk++] = (moe_range){from, end - from};
    if (be->sum_squares_ranges)
        return be->sum_squares_ranges(be, m->grad, r, nk);
    double s = 0;
    for (int i = 0; i < nk; i++)
        s += be->sum_squares(be, m->grad + r[i].offset, r[i].n);
    return s;
}

int model_weights_settle(moe_model *m, moe_err *e)
{
    return m->weights_needed ? m->weights_needed(m->weights_ctx, MOE_WEIGHTS_ALL, e) : 0;
}

/* before the forward reads layer l's weights */
static int weights_needed(moe_model *m, int layer, moe_err *e)
{
    if (!m->weights_needed || !m->weights_needed(m->weights_ctx, layer, e))
        return 0;
    return moe_err_prefix(e, "layer %d's weights", layer);
}

int model_get_host(moe_model *m, const real *dev, real *host, moe_err *e)
{
    if (dev == m->grad)
        model_materialize_grads(m);
    return m->be->download(m->be, host, dev, sizeof(real) * m->n_elems, e);
}

int model_set_host(moe_model *m, real *dev, const real *host, moe_err *e)
{
    return m->be->upload(m->be, dev, host, sizeof(real) * m->n_elems, e);
}

int model_get_masters(moe_model *m, real *host, moe_err *e)
{
    moe_backend *be = m->be;
    if (model_weights_settle(m, e))
        return -1;
    if (!m->master && m->masters_io)
        return m->masters_io(m->masters_ctx, host, 1, e);
    if (!m->master) /* the compute copy is the master */
        return be->act_to_real(be, host, m->wc, m->n_elems, e);
    if (m->split_master)
        return be->masters_download(be, host, m->master, m->wc, m->n_elems, e);
    return be->download(be, host, m->master, sizeof(real) * m->n_elems, e);
}

int model_set_masters(moe_model *m, const real *host, moe_err *e)
{
    moe_backend *be = m->be;
    if (model_weights_settle(m, e))
        return -1;
    if (!m->master && m->masters_io)
        return m->masters_io(m->masters_ctx, (real *)host, 0, e); /* read only */
    if (!m->master) {
        if (m->split_master)
            return moe_errf(e, "internal: split masters without their low halves");
        return be->act_from_real(be, m->wc, host, m->n_elems, e);
    }
    if (m->split_master)
        return be->masters_upload(be, m->master, m->wc, host, m->n_elems, e);
    if (be->upload(be, m->master, host, sizeof(real) * m->n_elems, e))
        return -1;
    be->weights_from_master(be, m->wc, m->master, m->n_elems);
    return 0;
}

/* one moment buffer (n elements) between the host's reals and its storage */
static int moment_move(moe_model *m, void *dev, real *host, int to_host, moe_err *e)
{
    moe_backend *be = m->be;
    size_t n = m->n_elems;
    if (!m->moments_bf16)
        return to_host ? be->download(be, host, dev, sizeof(real) * n, e)
                       : be->upload(be, dev, host, sizeof(real) * n, e);
    uint16_t *tmp = malloc(sizeof(uint16_t) * n + 1);
    if (!tmp)
        return moe_errf(e, "out of memory for %zu bf16 moments", n);
    int rc = 0;
    if (to_host) {
        rc = be->download(be, tmp, dev, sizeof(uint16_t) * n, e);
        for (size_t i = 0; !rc && i < n; i++)
            host[i] = (real)bf16_to_f32(tmp[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            tmp[i] = f32_to_bf16((float)host[i]);
        rc = be->upload(be, dev, tmp, sizeof(uint16_t) * n, e);
    }
    free(tmp);
    return rc;
}

int model_get_moments(moe_model *m, real *m_host, real *v_host, moe_err *e)
{
    return moment_move(m, m->m, m_host, 1, e) || moment_move(m, m->v, v_host, 1, e) ? -1 : 0;
}

int model_set_moments(moe_model *m, const real *m_host, const real *v_host, moe_err *e)
{
    return moment_move(m, m->m, (real *)m_host, 0, e) || moment_move(m, m->v, (real *)v_host, 0, e)
               ? -1 : 0; /* read only */
}

int model_set_moments_bf16(moe_model *m, int on, moe_err *e)
{
    moe_backend *be = m->be;
    if (m->moments_bf16 == (on != 0))
        return 0; /* already so: no second allocation (the memory plan counts one) */
    m->moments_bf16 = on != 0;
    if (!m->m)
        return 0; /* an optimizer elsewhere keeps them */
    be->mem_kind = MOE_MEM_OPTIMIZER;
    be->free(be, m->m);
    be->free(be, m->v);
    size_t bytes = moment_bytes(on, m->n_elems);
    m->m = be->alloc(be, bytes, e);
    m->v = m->m ? be->alloc(be, bytes, e) : NULL;
    if (!m->v)
        return moe_err_prefix(e, "AdamW moments of %zu parameters", m->n_elems);
    be->memset0(be, m->m, bytes);
    be->memset0(be, m->v, bytes);
    be->mem_kind = MOE_MEM_WORKSPACE;
    return 0;
}

void model_adamw(moe_model *m, const moe_adamw_hyper *hyper)
{
    moe_backend *be = m->be;
    moe_adamw_hyper hz = *hyper, *h = &hz;
    hz.moments_bf16 = m->moments_bf16;
    hz.n_zero_grads = m->lazy_expert_grads ? grad_zero_ranges(m) : 0;
    hz.zero_grads = hz.n_zero_grads ? m->grad_ranges : NULL;
    if (m->split_master)
        be->adamw_split(be, m->master, m->wc, m->grad, m->m, m->v, m->spans, m->n_params, h);
    else
        be->adamw(be, m->master, m->wc, m->grad, m->m, m->v, m->spans, m->n_params, h);
}

/* ---- forward ---- */

static int check_tokens(const moe_model *m, const int32_t *tokens, moe_err *e)
{
    int N = m->B * m->T;
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= m->d.V)
            return moe_errf(e, "token id %d at position %d is outside the vocabulary (0..%d)",
                            tokens[i], i, m->d.V - 1);
    return 0;
}

/* Passes of layer l's expert rows since its last dispatch (fills
 * m->layer_count with the rows of each local expert). */
static int layer_passes(moe_model *m, int l)
{
    if (!m->disp->passes)
        return 1;
    return m->disp->passes(m->disp, &m->layers[l].plan, m->layer_count);
}

/* Pass p of layer l's expert rows into its buffers, and its experts' forward
 * (h1, h3 for the backward). */
static int expert_pass(moe_model *m, int l, int p, moe_err *e)
{
    moe_backend *be = m->be;
    moe_layer_acts *a = &m->layers[l];
    int C = m->d.C;
    if (m->disp->dispatch_pass(m->disp, be, &a->plan, p, a->x_perm, a->p_perm, a->ln2, a->topk_w,
                               C, e))
        return moe_err_prefix(e, "layer %d expert pass %d", l, p + 1);
    be->experts_fwd(be, a->y_perm, a->h1, a->h3, a->a, a->x_perm, a->p_perm, W(m, MOE_P_W1, l),
                    W(m, MOE_P_W3, l), W(m, MOE_P_W2, l), &a->plan, C, m->d.I);
    a->resident_pass = p;
    return 0;
}

int model_expert_passes(moe_model *m, int layer) { return layer_passes(m, layer); }

/* Everything up to the final norm; computes the aux loss of the batch. */
/* Decoder layer l forward. recomputing: the backward rebuilding layer l's
 * activations from its kept input (train.activation_recompute): the input is
 * normalised as stored (what add_rmsnorm normalises too, so the result is
 * the same bits), the router statistics go to scratch (the aux loss was
 * taken in the forward), and the combine is skipped (only the next layer's
 * forward reads it). The experts' down projection is redone too, unused:
 * the backend has no op for the up projections alone. */
static int layer_forward(moe_model *m, int l, int recomputing, moe_err *e)
{
    moe_backend *be = m->be;
    const moe_dims *d = &m->d;
    int B = m->B, T = m->T, N = B * T, C = d->C, QD = d->NH * d->HD, KVD = d->NKV * d->HD;
    moe_layer_acts *a = &m->layers[l];
    if (l == 0 || recomputing) {
        be->rmsnorm_fwd(be, a->ln1, a->rstd1, a->resid_in, W(m, MOE_P_LN1, l), N, C, d->eps);
    } else {
        moe_layer_acts *p = &m->layers[l - 1];
        be->add_rmsnorm_fwd(be, a->resid_in, a->ln1, a->rstd1, p->resid_mid, p->moe_out,
                            W(m, MOE_P_LN1, l), N, C, d->eps);
    }
    be->matmul_fwd(be, a->q, a->ln1, W(m, MOE_P_Q, l), N, C, QD);
    be->matmul_fwd(be, a->k, a->ln1, W(m, MOE_P_K, l), N, C, KVD);
    be->matmul_fwd(be, a->v, a->ln1, W(m, MOE_P_V, l), N, C, KVD);
    const moe_segments *seg = m->seg_active ? &m->seg : NULL;
    be->rope_fwd(be, a->q, a->k, B, T, d->NH, d->NKV, d->HD, d->theta, seg ? seg->pos : NULL);
    be->attention_fwd(be, a->att, a->lse, a->q, a->k, a->v, B, T, d->NH, d->NKV, d->HD, seg);
    be->matmul_fwd(be, m->tmp_c, a->att, W(m, MOE_P_O, l), N, QD, C);
    be->add_rmsnorm_fwd(be, a->resid_mid, a->ln2, a->rstd2, a->resid_in, m->tmp_c,
                        W(m, MOE_P_LN2, l), N, C, d->eps);
    be->router_fwd(be, a->probs, a->topk_idx, a->topk_w,
                   recomputing ? m->prob_sum_scratch : a->prob_sum, a->ln2, W(m, MOE_P_GATE, l),
                   N, C, d->E, d->K);
    if (m->disp->dispatch(m->disp, be, &a->plan, recomputing ? m->route_count_scratch : a->route_count,
                          a->x_perm, a->p_perm, a->ln2, a->topk_idx, a->topk_w, N, C, d->E, d->K,
                          e))
        return moe_err_prefix(e, "layer %d dispatch%s", l, recomputing ? " (recompute)" : "");
    /* rows beyond the expert buffers' capacity run in further passes; a
     * recompute only needs pass 0 (the backward redoes the others) */
    int passes = layer_passes(m, l);
    for (int p = 0; p < (recomputing ? 1 : passes); p++) {
        if (p > 0 && expert_pass(m, l, p, e))
            return -1;
        a->resident_pass = p;
        if (p == 0)
            be->experts_fwd(be, a->y_perm, a->h1, a->h3, a->a, a->x_perm, a->p_perm,
                            W(m, MOE_P_W1, l), W(m, MOE_P_W3, l), W(m, MOE_P_W2, l), &a->plan, C,
                            d->I);
        if (!recomputing && m->disp->combine(m->disp, be, a->moe_out, a->y_perm, &a->plan, C, e))
            return moe_err_prefix(e, "layer %d combine", l);
    }
    return 0;
}

int model_set_segments(moe_model *m, const int32_t *pos, const int32_t *cu_seqlens, int n_seg,
                       int max_seqlen, moe_err *e)
{
    moe_backend *be = m->be;
    int N = m->B * m->T;
    m->seg_active = 0;
    if (!pos)
        return 0;
    if (be->segments == MOE_SEGMENTS_NONE)
        return moe_errf(e, "the %s backend cannot take packed windows (data.pack = packed): its "
                        "attention has no sequence boundaries; use data.pack = padded", be->name);
    if (n_seg < 1 || n_seg > N || cu_seqlens[0] != 0 || cu_seqlens[n_seg] != N)
        return moe_errf(e, "packed batch: %d sequences do not tile its %d tokens", n_seg, N);
    if (be->upload(be, m->seg_pos, pos, sizeof(int32_t) * N, e) ||
        be->upload(be, m->seg_cu, cu_seqlens, sizeof(int32_t) * (size_t)(n_seg + 1), e))
        return -1;
    m->seg = (moe_segments){.pos = m->seg_pos, .cu_seqlens = m->seg_cu, .n_seg = n_seg,
                            .max_seqlen = max_seqlen};
    m->seg_active = 1;
    return 0;
}

static int forward_body(moe_model *m, const int32_t *tokens, moe_err *e)
{
    moe_backend *be = m->be;
    const moe_dims *d = &m->d;
    int N = m->B * m->T, C = d->C;
    if (check_tokens(m, tokens, e))
        return -1;
    if (be->upload(be, m->tokens, tokens, sizeof(int32_t) * N, e) || weights_needed(m, -1, e))
        return -1;
    be->embedding_fwd(be, m->embed_out, m->tokens, W(m, MOE_P_EMBED, -1), N, C);
    for (int l = 0; l < d->L; l++)
        if (weights_needed(m, l, e) || layer_forward(m, l, 0, e))
            return -1;
    if (weights_needed(m, d->L, e))
        return -1;
    moe_layer_acts *last = &m->layers[d->L - 1];
    be->add_rmsnorm_fwd(be, m->resid_final, m->lnf, m->rstdf, last->resid_mid, last->moe_out,
                        W(m, MOE_P_NORM, -1), N, C, d->eps);

    /* Aux loss as transformers defines it: over the tokens of all layers at
     * once, aux = E * sum_e F_e P_e, F_e the share of routed (token, slot)
     * pairs that chose e, P_e the mean router probability of e. */
    double total = (double)d->L * N;
    real *ps = malloc(sizeof(real) * d->E);
    double *P = calloc((size_t)d->E, sizeof *P);
    if (!ps || !P) {
        free(ps);
        free(P);
        return moe_errf(e, "out of memory");
    }
    for (int x = 0; x < d->E; x++)
        m->route_frac[x] = 0;
    for (int l = 0; l < d->L; l++) {
        if (be->download(be, ps, m->layers[l].prob_sum, sizeof(real) * d->E, e)) {
            free(ps);
            free(P);
            return -1;
        }
        for (int x = 0; x < d->E; x++) {
            P[x] += ps[x];
            m->route_frac[x] += (double)m->layers[l].route_count[x];
        }
    }
    if (m->stats_sum) {
        /* F and P of the global batch: every rank's counts and sums */
        double *v = malloc(sizeof(double) * (2 * (size_t)d->E + 1));
        if (!v) {
            free(ps);
            free(P);
            return moe_errf(e, "out of memory");
        }
        for (int x = 0; x < d->E; x++) {
            v[x] = m->route_frac[x];
            v[d->E + x] = P[x];
        }
        v[2 * d->E] = total;
        int rc = m->stats_sum(m->stats_ctx, v, 2 * d->E + 1, e);
        for (int x = 0; x < d->E && !rc; x++) {
            m->route_frac[x] = v[x];
            P[x] = v[d->E + x];
        }
        total = v[2 * d->E];
        free(v);
        if (rc) {
            free(ps);
            free(P);
            return moe_err_prefix(e, "router statistics");
        }
    }
    m->aux_tokens = total;
    double aux = 0;
    for (int x = 0; x < d->E; x++) {
        m->route_frac[x] /= total;
        aux += m->route_frac[x] * (P[x] / total);
    }
    m->aux_loss = aux * d->E;
    free(ps);
    free(P);
    return 0;
}

int model_forward(moe_model *m, const int32_t *tokens, const int32_t *targets, double *loss_sum,
                  int64_t *n_valid, real *logits_host, moe_err *e)
{
    moe_backend *be = m->be;
    int N = m->B * m->T;
    if (forward_body(m, tokens, e))
        return -1;
    if (be->upload(be, m->targets, targets, sizeof(int32_t) * N, e))
        return -1;
    if (be->lm_head_loss(be, loss_sum, n_valid, NULL, NULL, m->lnf, W(m, MOE_P_HEAD, -1),
                         m->targets, N, m->d.C, m->d.V, 0, e))
        return -1;
    if (logits_host) {
        real *dev = be->alloc(be, sizeof(real) * (size_t)N * m->d.V, e);
        if (!dev)
            return -1;
        be->lm_head_logits(be, dev, m->lnf, W(m, MOE_P_HEAD, -1), N, m->d.C, m->d.V);
        int rc = be->download(be, logits_host, dev, sizeof(real) * (size_t)N * m->d.V, e);
        be->free(be, dev);
        if (rc)
            return -1;
    }
    m->lm_loss_sum = *loss_sum;
    m->n_valid = *n_valid;
    m->have_forward = 0; /* no gradient of the head was taken */
    return 0;
}

/* ---- backward ---- */

/* Layer l's MoE backward, d_resid into d_a and d_topk, pass by pass in row
 * order (the expert gradients then sum their rows in one order, whatever
 * the passes). */
static int moe_branch_bwd(moe_model *m, int l, moe_err *e)
{
    moe_backend *be = m->be;
    moe_layer_acts *a = &m->layers[l];
    int C = m->d.C;
    int passes = layer_passes(m, l);
    int dw_mode = passes == 1 ? expert_dw_mode(m, l, &a->plan) : expert_dw_start(m, l);
    if (m->recompute_experts && l < m->d.L - 1) {
        /* h1, h3 live in layer 0's buffers, which later layers overwrote: rebuilt
         * from the kept rows (one pass), or pass by pass with the rows */
        if (passes == 1)
            be->experts_fwd(be, a->y_perm, a->h1, a->h3, a->a, a->x_perm, a->p_perm,
                            W(m, MOE_P_W1, l), W(m, MOE_P_W3, l), W(m, MOE_P_W2, l), &a->plan,
                            C, m->d.I);
        else
            a->resident_pass = -1;
    }
    for (int p = 0; p < passes; p++) {
        if (a->resident_pass != p && expert_pass(m, l, p, e))
            return -1;
        /* d_resid flows into moe_out */
        if (m->disp->combine_bwd(m->disp, be, m->d_rows_a, m->d_resid, &a->plan, C, e))
            return moe_err_prefix(e, "layer %d combine backward", l);
        be->experts_bwd(be, m->d_rows_b, m->d_prows, G(m, MOE_P_W1, l), G(m, MOE_P_W3, l),
                        G(m, MOE_P_W2, l), m->d_rows_a, a->x_perm, a->h1, a->h3, a->p_perm,
                        W(m, MOE_P_W1, l), W(m, MOE_P_W3, l), W(m, MOE_P_W2, l), &a->plan, C,
                        m->d.I, dw_mode);
        if (m->disp->dispatch_bwd(m->disp, be, m->d_a, m->d_topk, m->d_rows_b, m->d_prows,
                                  &a->plan, C, e))
            return moe_err_prefix(e, "layer %d dispatch backward", l);
    }
    m->expert_dw_fresh[l] = 0;
    return 0;
}

static int grads_ready(moe_model *m, int layer, moe_err *e)
{
    if (!m->grads_ready || !m->grads_ready(m->grads_ctx, layer, e))
        return 0;
    return moe_err_prefix(e, "layer %d's gradients", layer);
}

int model_forward_backward(moe_model *m, const int32_t *tokens, const int32_t *targets,
                           double dloss, double aux_scale, double *loss_sum, int64_t *n_valid,
                           moe_err *e)
{
    moe_backend *be = m->be;
    const moe_dims *d = &m->d;
    int B = m->B, T = m->T, N = B * T, C = d->C, QD = d->NH * d->HD, KVD = d->NKV * d->HD;
    if (forward_body(m, tokens, e))
        return -1;
    if (be->upload(be, m->targets, targets, sizeof(int32_t) * N, e))
        return -1;
    /* the head and the loss, forward and backward in one pass: d lnf in d_a */
    if (be->lm_head_loss(be, loss_sum, n_valid, m->d_a, G(m, MOE_P_HEAD, -1), m->lnf,
                         W(m, MOE_P_HEAD, -1), m->targets, N, C, d->V, (real)dloss, e))
        return -1;
    m->lm_loss_sum = *loss_sum;
    m->n_valid = *n_valid;

    /* d aux / d prob[t, e] = scale * E * F_e / (L N), the same for every token
     * (L N over all ranks' tokens when the statistics are global) */
    real *aux_dprob = NULL;
    if (aux_scale != 0) {
        real host[d->E];
        for (int x = 0; x < d->E; x++)
            host[x] = (real)(aux_scale * d->E * m->route_frac[x] / m->aux_tokens);
        if (be->upload(be, m->aux_dprob_dev, host, sizeof host, e))
            return -1;
        aux_dprob = m->aux_dprob_dev;
    }

    be->rmsnorm_bwd(be, m->d_resid, G(m, MOE_P_NORM, -1), m->d_a, m->resid_final,
                    W(m, MOE_P_NORM, -1), m->rstdf, N, C, 0);
    if (grads_ready(m, d->L, e))
        return -1;
    for (int l = d->L - 1; l >= 0; l--) {
        moe_layer_acts *a = &m->layers[l];
        /* the last layer's activations are still in place after the forward */
        if (m->recompute && l < d->L - 1 && layer_forward(m, l, 1, e))
            return -1;
        if (moe_branch_bwd(m, l, e))
            return -1;
        be->router_bwd(be, m->d_a, G(m, MOE_P_GATE, l), m->d_topk, aux_dprob, a->ln2,
                       W(m, MOE_P_GATE, l), a->probs, a->topk_idx, a->topk_w, N, C, d->E, d->K);
        be->rmsnorm_bwd(be, m->d_resid, G(m, MOE_P_LN2, l), m->d_a, a->resid_mid,
                        W(m, MOE_P_LN2, l), a->rstd2, N, C, 1);
        /* attention branch */
        be->matmul_bwd(be, m->d_b, G(m, MOE_P_O, l), m->d_resid, a->att, W(m, MOE_P_O, l), N, QD,
                       C, 0);
        const moe_segments *seg = m->seg_active ? &m->seg : NULL;
        be->attention_bwd(be, m->d_q, m->d_k, m->d_v, m->d_b, a->q, a->k, a->v, a->att, a->lse, B,
                          T, d->NH, d->NKV, d->HD, seg);
        be->rope_bwd(be, m->d_q, m->d_k, B, T, d->NH, d->NKV, d->HD, d->theta,
                     seg ? seg->pos : NULL);
        be->matmul_bwd(be, m->d_a, G(m, MOE_P_Q, l), m->d_q, a->ln1, W(m, MOE_P_Q, l), N, C, QD, 0);
        be->matmul_bwd(be, m->d_a, G(m, MOE_P_K, l), m->d_k, a->ln1, W(m, MOE_P_K, l), N, C, KVD,
                       1);
        be->matmul_bwd(be, m->d_a, G(m, MOE_P_V, l), m->d_v, a->ln1, W(m, MOE_P_V, l), N, C, KVD,
                       1);
        be->rmsnorm_bwd(be, m->d_resid, G(m, MOE_P_LN1, l), m->d_a, a->resid_in,
                        W(m, MOE_P_LN1, l), a->rstd1, N, C, 1);
        if (grads_ready(m, l, e))
            return -1;
    }
    be->embedding_bwd(be, G(m, MOE_P_EMBED, -1), m->d_resid, m->tokens, N, C, d->V);
    zero_fresh_expert_grads(m);
    return grads_ready(m, -1, e);
}

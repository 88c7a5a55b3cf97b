/* moekit: the expert-parallel token dispatcher (see dispatch_ep.h).
 *
 * Two plans per layer drive the backend's local ops:
 *   send plan  this rank's N tokens x K slots in send order (by global
 *              expert, so by owner rank): permute/combine over it move rows
 *              between token order and the all-to-all's send buffer;
 *   recv plan  the rows that arrived (source-rank-major) as "tokens" with
 *              one slot each, whose slot_row is their expert-major row.
 * The model's plan gets the expert-major counts, offsets and row sources;
 * the experts never see the difference. */
#include "dispatch_ep.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const moe_route_plan *key;     /* the model's plan of this layer */
    moe_route_plan send, recv;     /* backend arrays, host counts */
    int32_t *send_pos_h, *send_tok_h, *recv_slot_h, *recv_src_h; /* host copies */
    int64_t *recv_cnt;             /* [P * E_local] rows from rank q for local expert x */
    size_t *s_rows, *r_rows;       /* [P] rows sent to / received from each rank */
    int n_recv;
} ep_layer;

typedef struct {
    moe_comm *c;
    int E, E_local, P;
    int N, K, C;                   /* the shape the buffers are sized for */
    size_t row_bytes;              /* act bytes of one row of C */
    ep_layer *layers;
    int n_layers, cap_layers;
    /* transient buffers shared by all layers (backend memory) */
    act *a_send, *a_recv;          /* [N K, C], [P N K, C] */
    real *p_send, *p_recv;         /* [N K], [P N K] */
    /* host staging for communicators that carry host memory only */
    char *h_send, *h_recv;
    moe_backend *be;
} ep_ctx;

static int ep_max_rows(moe_dispatcher *d, int N, int K)
{
    ep_ctx *x = d->ctx;
    return x->P * N * K; /* skewed routing: every token of the group may choose our experts */
}

static void free_plan(moe_backend *be, moe_route_plan *p)
{
    if (p->row_token)
        be->free(be, p->row_token);
    if (p->slot_row)
        be->free(be, p->slot_row);
    if (p->expert_offset_dev)
        be->free(be, p->expert_offset_dev);
    free(p->expert_count);
    free(p->expert_offset);
    memset(p, 0, sizeof *p);
}

static void free_layer(ep_ctx *x, ep_layer *l)
{
    free_plan(x->be, &l->send);
    free_plan(x->be, &l->recv);
    free(l->send_pos_h);
    free(l->send_tok_h);
    free(l->recv_slot_h);
    free(l->recv_src_h);
    free(l->recv_cnt);
    free(l->s_rows);
    free(l->r_rows);
}

static void free_buffers(ep_ctx *x)
{
    moe_backend *be = x->be;
    for (int i = 0; i < x->n_layers; i++)
        free_layer(x, &x->layers[i]);
    free(x->layers);
    x->layers = NULL;
    x->n_layers = x->cap_layers = 0;
    if (be) {
        if (x->a_send) be->free(be, x->a_send);
        if (x->a_recv) be->free(be, x->a_recv);
        if (x->p_send) be->free(be, x->p_send);
        if (x->p_recv) be->free(be, x->p_recv);
    }
    x->a_send = x->a_recv = NULL;
    x->p_send = x->p_recv = NULL;
    free(x->h_send);
    free(x->h_recv);
    x->h_send = x->h_recv = NULL;
}

/* (Re)size the shared buffers for N tokens of K slots and C columns. */
static int ensure_buffers(ep_ctx *x, moe_backend *be, int N, int K, int C, moe_err *e)
{
    if (x->be == be && x->N == N && x->K == K && x->C == C && x->a_send)
        return 0;
    free_buffers(x);
    x->be = be;
    x->N = N;
    x->K = K;
    x->C = C;
    x->row_bytes = be->act_bytes(be, (size_t)C);
    size_t ns = (size_t)N * K, nr = (size_t)x->P * N * K;
    size_t big = x->row_bytes > sizeof(real) ? x->row_bytes : sizeof(real);
    x->a_send = be->alloc(be, ns * x->row_bytes + 1, e);
    x->a_recv = x->a_send ? be->alloc(be, nr * x->row_bytes + 1, e) : NULL;
    x->p_send = x->a_recv ? be->alloc(be, sizeof(real) * ns + 1, e) : NULL;
    x->p_recv = x->p_send ? be->alloc(be, sizeof(real) * nr + 1, e) : NULL;
    if (!x->p_recv)
        return moe_err_prefix(e, "expert-parallel dispatch buffers");
    if (!x->c->device_memory) {
        /* either direction may carry every row of the group */
        x->h_send = malloc(nr * big + 1);
        x->h_recv = malloc(nr * big + 1);
        if (!x->h_send || !x->h_recv)
            return moe_errf(e, "out of host memory for the expert-parallel staging buffers");
    }
    return 0;
}

static int alloc_plan(moe_backend *be, moe_route_plan *p, size_t rows, size_t slots, int experts,
                      moe_err *e)
{
    p->row_token = be->alloc(be, sizeof(int32_t) * rows + 1, e);
    p->slot_row = p->row_token ? be->alloc(be, sizeof(int32_t) * slots + 1, e) : NULL;
    p->expert_offset_dev =
        p->slot_row ? be->alloc(be, sizeof(int32_t) * ((size_t)experts + 1), e) : NULL;
    p->expert_count = calloc((size_t)experts + 1, sizeof(int64_t));
    p->expert_offset = calloc((size_t)experts + 1, sizeof(int64_t));
    if (!p->expert_offset_dev || !p->expert_count || !p->expert_offset)
        return moe_errf(e, "out of memory for an expert-parallel plan");
    return 0;
}

/* The state of the layer whose model plan is `key` (made on first use). */
static ep_layer *layer_of(ep_ctx *x, const moe_route_plan *key, moe_err *e)
{
    for (int i = 0; i < x->n_layers; i++)
        if (x->layers[i].key == key)
            return &x->layers[i];
    if (x->n_layers == x->cap_layers) {
        int cap = x->cap_layers ? 2 * x->cap_layers : 8;
        ep_layer *nl = realloc(x->layers, sizeof *nl * (size_t)cap);
        if (!nl) {
            moe_errf(e, "out of memory");
            return NULL;
        }
        x->layers = nl;
        x->cap_layers = cap;
    }
    ep_layer *l = &x->layers[x->n_layers++];
    memset(l, 0, sizeof *l);
    l->key = key;
    size_t ns = (size_t)x->N * x->K, nr = (size_t)x->P * ns;
    int P = x->P;
    l->send_pos_h = malloc(sizeof(int32_t) * ns + 1);
    l->send_tok_h = malloc(sizeof(int32_t) * ns + 1);
    l->recv_slot_h = malloc(sizeof(int32_t) * nr + 1);
    l->recv_src_h = malloc(sizeof(int32_t) * nr + 1);
    l->recv_cnt = calloc((size_t)P * x->E_local, sizeof(int64_t));
    l->s_rows = calloc((size_t)P, sizeof(size_t));
    l->r_rows = calloc((size_t)P, sizeof(size_t));
    if (!l->send_pos_h || !l->send_tok_h || !l->recv_slot_h || !l->recv_src_h || !l->recv_cnt ||
        !l->s_rows || !l->r_rows || alloc_plan(x->be, &l->send, ns, ns, x->E, e) ||
        alloc_plan(x->be, &l->recv, nr, nr, x->E_local, e)) {
        if (!e->msg[0])
            moe_errf(e, "out of memory for the expert-parallel plan of a layer");
        return NULL;
    }
    return l;
}

/* Byte all-to-all of rows of `unit` bytes, `fwd` = 1 from send order to
 * recv order (tokens to experts), 0 back. Stages through host memory when
 * the communicator carries host memory only. */
static int exchange(ep_ctx *x, const ep_layer *l, int fwd, const void *src, void *dst, size_t unit,
                    size_t src_rows, size_t dst_rows, moe_err *e)
{
    moe_backend *be = x->be;
    const size_t *out_rows = fwd ? l->s_rows : l->r_rows, *in_rows = fwd ? l->r_rows : l->s_rows;
    size_t so = 0, ro = 0;
    size_t sc[x->P], sd[x->P], rc[x->P], rd[x->P];
    for (int q = 0; q < x->P; q++) {
        sc[q] = out_rows[q] * unit;
        sd[q] = so;
        so += sc[q];
        rc[q] = in_rows[q] * unit;
        rd[q] = ro;
        ro += rc[q];
    }
    if (so != src_rows * unit || ro != dst_rows * unit)
        return moe_errf(e, "internal: all-to-all of %zu/%zu bytes for %zu/%zu rows", so, ro,
                        src_rows, dst_rows);
    if (x->c->device_memory)
        return comm_alltoallv(x->c, src, sc, sd, dst, rc, rd, e);
    if (so && be->download(be, x->h_send, src, so, e))
        return -1;
    if (comm_alltoallv(x->c, x->h_send, sc, sd, x->h_recv, rc, rd, e))
        return -1;
    return ro ? be->upload(be, dst, x->h_recv, ro, e) : 0;
}

static int ep_dispatch(moe_dispatcher *d, moe_backend *be, moe_route_plan *plan,
                       int64_t *route_count, act *x_perm, real *p_perm, const act *xin,
                       const int32_t *topk_idx, const real *topk_w, int N, int C, int E, int K,
                       moe_err *e)
{
    ep_ctx *x = d->ctx;
    if (E != x->E)
        return moe_errf(e, "expert-parallel dispatcher made for %d experts was given %d", x->E, E);
    if (ensure_buffers(x, be, N, K, C, e))
        return -1;
    ep_layer *l = layer_of(x, plan, e);
    if (!l)
        return -1;
    int P = x->P, EL = x->E_local, NK = N * K;
    /* 1. this rank's pairs per global expert, and their send order */
    if (be->download(be, l->send_tok_h, topk_idx, sizeof(int32_t) * (size_t)NK, e))
        return -1;
    int64_t off[E + 1];
    for (int g = 0; g < E; g++)
        route_count[g] = 0;
    for (int i = 0; i < NK; i++) {
        int g = l->send_tok_h[i];
        if (g < 0 || g >= E)
            return moe_errf(e, "router chose expert %d of %d", g, E);
        route_count[g]++;
    }
    off[0] = 0;
    for (int g = 0; g < E; g++)
        off[g + 1] = off[g] + route_count[g];
    for (int i = 0; i < NK; i++)
        l->send_pos_h[i] = (int32_t)off[l->send_tok_h[i]]++;
    for (int i = 0; i < NK; i++)
        l->send_tok_h[l->send_pos_h[i]] = i / K; /* send row -> its token */
    for (int q = 0; q < P; q++) {
        l->s_rows[q] = 0;
        for (int k = 0; k < EL; k++)
            l->s_rows[q] += (size_t)route_count[q * EL + k];
    }
    /* 2. counts per (rank, expert): every rank learns what it will receive */
    size_t cnt_b[P], cnt_d[P];
    for (int q = 0; q < P; q++) {
        cnt_b[q] = sizeof(int64_t) * (size_t)EL;
        cnt_d[q] = cnt_b[q] * (size_t)q;
    }
    if (comm_alltoallv(x->c, route_count, cnt_b, cnt_d, l->recv_cnt, cnt_b, cnt_d, e))
        return moe_err_prefix(e, "exchanging expert counts");
    int64_t n_recv = 0;
    for (int q = 0; q < P; q++) {
        l->r_rows[q] = 0;
        for (int k = 0; k < EL; k++) {
            if (l->recv_cnt[q * EL + k] < 0)
                return moe_errf(e, "rank %d announced %lld rows for expert %d", q,
                                (long long)l->recv_cnt[q * EL + k], k);
            l->r_rows[q] += (size_t)l->recv_cnt[q * EL + k];
        }
        n_recv += (int64_t)l->r_rows[q];
    }
    if (n_recv > (int64_t)P * NK)
        return moe_errf(e, "the EP group sends %lld rows, more than the %d the plan holds",
                        (long long)n_recv, P * NK);
    l->n_recv = (int)n_recv;
    /* 3. the send plan: rows in send order, K slots per token */
    moe_route_plan *sp = &l->send;
    sp->n_tokens = N;
    sp->top_k = K;
    sp->n_experts = E;
    sp->n_rows = NK;
    if (be->upload(be, sp->slot_row, l->send_pos_h, sizeof(int32_t) * (size_t)NK, e) ||
        be->upload(be, sp->row_token, l->send_tok_h, sizeof(int32_t) * (size_t)NK, e))
        return -1;
    /* 4. the recv plan: arrival index -> expert-major row (expert, source rank, order) */
    moe_route_plan *rp = &l->recv;
    int64_t *cnt = rp->expert_count, *eoff = rp->expert_offset;
    eoff[0] = 0;
    for (int k = 0; k < EL; k++) {
        cnt[k] = 0;
        for (int q = 0; q < P; q++)
            cnt[k] += l->recv_cnt[q * EL + k];
        eoff[k + 1] = eoff[k] + cnt[k];
    }
    int64_t next[EL > 0 ? EL : 1];
    for (int k = 0; k < EL; k++)
        next[k] = eoff[k];
    int i = 0;
    for (int q = 0; q < P; q++)
        for (int k = 0; k < EL; k++)
            for (int64_t r = 0; r < l->recv_cnt[q * EL + k]; r++, i++) {
                int32_t row = (int32_t)next[k]++;
                l->recv_slot_h[i] = row;
                l->recv_src_h[row] = i;
            }
    rp->n_tokens = l->n_recv;
    rp->top_k = 1;
    rp->n_experts = EL;
    rp->n_rows = l->n_recv;
    int32_t off32[EL + 1];
    for (int k = 0; k <= EL; k++)
        off32[k] = (int32_t)eoff[k];
    size_t nrb = sizeof(int32_t) * (size_t)l->n_recv;
    if ((nrb && (be->upload(be, rp->slot_row, l->recv_slot_h, nrb, e) ||
                 be->upload(be, rp->row_token, l->recv_src_h, nrb, e))) ||
        be->upload(be, rp->expert_offset_dev, off32, sizeof off32, e))
        return -1;
    /* the model's plan: what the grouped expert ops read */
    plan->n_tokens = N;
    plan->top_k = K;
    plan->n_experts = EL;
    plan->n_rows = l->n_recv;
    memcpy(plan->expert_count, cnt, sizeof(int64_t) * (size_t)EL);
    memcpy(plan->expert_offset, eoff, sizeof(int64_t) * ((size_t)EL + 1));
    if ((nrb && be->upload(be, plan->row_token, l->recv_src_h, nrb, e)) ||
        be->upload(be, plan->expert_offset_dev, off32, sizeof off32, e))
        return -1;
    /* 5. rows and router weights to the experts' owners, then expert-major */
    be->permute(be, x->a_send, x->p_send, xin, topk_w, sp, C);
    if (exchange(x, l, 1, x->a_send, x->a_recv, x->row_bytes, (size_t)NK, (size_t)l->n_recv, e) ||
        exchange(x, l, 1, x->p_send, x->p_recv, sizeof(real), (size_t)NK, (size_t)l->n_recv, e))
        return moe_err_prefix(e, "sending tokens to their experts");
    be->permute(be, x_perm, p_perm, x->a_recv, x->p_recv, rp, C);
    return 0;
}

static ep_layer *known_layer(ep_ctx *x, const moe_route_plan *plan, const char *what, moe_err *e)
{
    for (int i = 0; i < x->n_layers; i++)
        if (x->layers[i].key == plan)
            return &x->layers[i];
    moe_errf(e, "expert-parallel %s before any dispatch of this layer", what);
    return NULL;
}

static int ep_combine(moe_dispatcher *d, moe_backend *be, act *out, const act *y_perm,
                      const moe_route_plan *plan, int C, moe_err *e)
{
    ep_ctx *x = d->ctx;
    ep_layer *l = known_layer(x, plan, "combine", e);
    if (!l)
        return -1;
    be->combine(be, x->a_recv, y_perm, &l->recv, C); /* expert-major -> arrival order */
    if (exchange(x, l, 0, x->a_recv, x->a_send, x->row_bytes, (size_t)l->n_recv,
                 (size_t)x->N * x->K, e))
        return moe_err_prefix(e, "returning expert outputs");
    be->combine(be, out, x->a_send, &l->send, C); /* sum each token's slots */
    return 0;
}

static int ep_combine_bwd(moe_dispatcher *d, moe_backend *be, act *dy_perm, const act *dout,
                          const moe_route_plan *plan, int C, moe_err *e)
{
    ep_ctx *x = d->ctx;
    ep_layer *l = known_layer(x, plan, "combine backward", e);
    if (!l)
        return -1;
    be->combine_bwd(be, x->a_send, dout, &l->send, C); /* each slot's copy of dout */
    if (exchange(x, l, 1, x->a_send, x->a_recv, x->row_bytes, (size_t)x->N * x->K,
                 (size_t)l->n_recv, e))
        return moe_err_prefix(e, "sending output gradients to the experts");
    be->combine_bwd(be, dy_perm, x->a_recv, &l->recv, C);
    return 0;
}

static int ep_dispatch_bwd(moe_dispatcher *d, moe_backend *be, act *dx, real *dtopk_w,
                           const act *dx_perm, const real *dp_perm, const moe_route_plan *plan,
                           int C, moe_err *e)
{
    ep_ctx *x = d->ctx;
    ep_layer *l = known_layer(x, plan, "dispatch backward", e);
    if (!l)
        return -1;
    size_t ns = (size_t)x->N * x->K;
    be->permute_bwd(be, x->a_recv, x->p_recv, dx_perm, dp_perm, &l->recv, C);
    if (exchange(x, l, 0, x->a_recv, x->a_send, x->row_bytes, (size_t)l->n_recv, ns, e) ||
        exchange(x, l, 0, x->p_recv, x->p_send, sizeof(real), (size_t)l->n_recv, ns, e))
        return moe_err_prefix(e, "returning input gradients from the experts");
    be->permute_bwd(be, dx, dtopk_w, x->a_send, x->p_send, &l->send, C);
    return 0;
}

static void ep_destroy(moe_dispatcher *d)
{
    ep_ctx *x = d->ctx;
    free_buffers(x);
    free(x);
    free(d);
}

int dispatcher_ep_create(moe_dispatcher **out, moe_comm *ep, int E, moe_err *e)
{
    if (E < 1 || E % ep->size)
        return moe_errf(e, "%d experts do not split evenly over an EP group of %d ranks", E,
                        ep->size);
    moe_dispatcher *d = calloc(1, sizeof *d);
    ep_ctx *x = calloc(1, sizeof *x);
    if (!d || !x) {
        free(d);
        free(x);
        return moe_errf(e, "out of memory");
    }
    x->c = ep;
    x->E = E;
    x->P = ep->size;
    x->E_local = E / ep->size;
    d->name = "expert-parallel";
    d->ctx = x;
    d->max_rows = ep_max_rows;
    d->dispatch = ep_dispatch;
    d->combine = ep_combine;
    d->combine_bwd = ep_combine_bwd;
    d->dispatch_bwd = ep_dispatch_bwd;
    d->destroy = ep_destroy;
    *out = d;
    return 0;
}

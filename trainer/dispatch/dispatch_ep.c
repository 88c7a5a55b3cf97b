/* moekit: the expert-parallel token dispatcher (see dispatch_ep.h).
 *
 * Two plans per layer drive the backend's local ops:
 *   send plan  this rank's N tokens x K slots in send order (by global
 *              expert, so by owner rank): permute/combine over it move rows
 *              between token order and the all-to-all's send buffer;
 *   recv plan  the rows of one pass that arrived (source-rank-major) as
 *              "tokens" with one slot each, whose slot_row is their row in
 *              the pass's expert-major order.
 * The model's plan gets the pass's expert-major counts, offsets and row
 * sources; the experts never see the difference.
 *
 * Capacity: the expert-side buffers hold `cap` rows (N K x
 * parallel.expert_capacity_factor, at most P N K). A rank's expert-major rows
 * [0, n_recv) run in passes of cap rows: pass p is rows [p cap, (p+1) cap).
 * Every rank knows every rank's counts (an all-gather), so all agree on the
 * number of passes and on which of its rows each pass sends where: the rows
 * a pass takes from one sender for one receiver are contiguous in the
 * sender's send order (expert-major order is expert, then sender, then
 * token order). Expert outputs and input gradients come back into a_back
 * at their send positions, and are summed per token once every pass is in,
 * so the result is the one-pass result, whatever the number of passes.
 *
 * Overlap (dispatcher_ep_set_overlap): a layer runs in at least two passes
 * of at most half the capacity each, and the exchanges are queued ahead of
 * the compute that does not read them (comm.h's stream order):
 *   forward   pass p+1's rows travel while the experts compute pass p, and
 *             pass p's outputs travel back while the experts compute p+1;
 *   backward  pass p+1's output gradients travel while the experts' backward
 *             of pass p runs, and pass p's input gradients travel back while
 *             pass p+1's rows arrive and its experts' forward is redone.
 * Buffers by role, so that nothing in flight is written under it: a_send
 * (the layer's token rows in send order, written once a dispatch), g_send
 * (the output gradients in send order, once a backward), two arrival slots
 * a_recv[p % 2] for the rows, a_grad for the output gradients, one return
 * buffer a_ret whose next writer first waits for the return in flight.
 * Without overlap the slots, a_grad, g_send and a_ret are one buffer and
 * every exchange is waited for at once. */
#include "dispatch_ep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/host_wait.h"

typedef struct {
    size_t *s_cnt, *s_off;         /* [P] rows to each rank and where they start in send order */
    size_t *r_cnt, *r_off;         /* [P] rows from each rank, arrival offsets */
    size_t n_rows;                 /* rows of this pass here */
} ep_pass;

typedef struct {
    const moe_route_plan *key;     /* the model's plan of this layer */
    moe_route_plan send, recv;     /* backend arrays, host counts */
    int32_t *send_pos_h, *send_tok_h, *recv_slot_h, *recv_src_h; /* host copies */
    int64_t *all_cnt;              /* [P * E]: rows of rank q for global expert g */
    int64_t *layer_cnt;            /* [E_local]: rows of each local expert, all passes */
    int64_t n_recv;                /* rows for the local experts, all passes */
    size_t pass_rows;              /* expert-major rows a pass takes (the last: the rest) */
    int n_pass, cur_pass, returned, returned_bwd;
    int grads_sent_ready;          /* g_send holds this backward's output gradients */
    ep_pass pass[2];               /* traffic of the passes in arrival slots 0 and 1 */
} ep_layer;

/* An exchange issued ahead: live until waited for (a queued one), its
 * arrivals pending until read (layer NULL: none). */
typedef struct {
    moe_comm_req req;              /* its last collective (a wait covers the ones before) */
    int live;
    const ep_layer *layer;         /* rows_ and grads_in_flight: whose pass arrived or comes */
    int pass;
} ep_flight;

typedef struct {
    moe_comm *c;
    int E, E_local, P;
    double capacity_factor;        /* 0: no capacity (P N K rows) */
    int overlap;                   /* dispatcher_ep_set_overlap */
    int N, K, C;                   /* the shape the buffers are sized for */
    size_t cap;                    /* expert-side rows per pass */
    size_t row_bytes;              /* act bytes of one row of C */
    ep_layer *layers;
    int n_layers, cap_layers;
    /* transient buffers shared by all layers (backend memory); without
     * overlap a_recv[1], a_ret and g_send alias a_recv[0], a_recv[0], a_send */
    act *a_send, *a_back;          /* [N K, C] each */
    act *a_recv[2], *a_ret, *a_grad, *g_send; /* [cap, C] each; g_send [N K, C] */
    real *p_send, *p_back;         /* [N K] */
    real *p_recv[2], *p_ret;       /* [cap] */
    const ep_layer *send_rows_of;  /* whose token rows a_send holds (NULL: none) */
    ep_flight rows_in_flight;      /* the queued dispatch of a pass (into a_recv) */
    ep_flight return_in_flight;    /* the queued return of a pass (from a_ret) */
    ep_flight grads_in_flight;     /* the queued output gradients of a pass (into a_grad) */
    void *owned[12];               /* the buffers above as allocated (the aliases once) */
    int n_owned;
    /* host staging for communicators that carry host memory only */
    char *h_send, *h_recv;
    moe_backend *be;
} ep_ctx;

/* Expert-side rows of one pass: the capacity, or half of it with overlap
 * (two passes in flight in the bytes of one). */
static size_t cap_rows(const ep_ctx *x, int N, int K)
{
    size_t all = (size_t)x->P * N * K, nk = (size_t)N * K, cap = all;
    if (x->capacity_factor > 0) {
        double want = ceil((double)nk * x->capacity_factor);
        cap = want < 1 ? 1 : want > (double)all ? all : (size_t)want;
    }
    return x->overlap ? (cap + 1) / 2 : cap;
}

static int ep_max_rows(moe_dispatcher *d, int N, int K)
{
    return (int)cap_rows(d->ctx, N, K);
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
    free(l->all_cnt);
    free(l->layer_cnt);
    for (int i = 0; i < 2; i++) {
        free(l->pass[i].s_cnt);
        free(l->pass[i].s_off);
        free(l->pass[i].r_cnt);
        free(l->pass[i].r_off);
    }
}

static void free_buffers(ep_ctx *x)
{
    moe_backend *be = x->be;
    for (int i = 0; i < x->n_layers; i++)
        free_layer(x, &x->layers[i]);
    free(x->layers);
    x->layers = NULL;
    x->n_layers = x->cap_layers = 0;
    for (int i = 0; be && i < x->n_owned; i++)
        be->free(be, x->owned[i]);
    x->n_owned = 0;
    x->a_send = x->a_back = x->a_recv[0] = x->a_recv[1] = x->a_ret = x->a_grad = NULL;
    x->g_send = NULL;
    x->p_send = x->p_back = x->p_recv[0] = x->p_recv[1] = x->p_ret = NULL;
    x->send_rows_of = NULL;
    memset(&x->rows_in_flight, 0, sizeof x->rows_in_flight);
    memset(&x->return_in_flight, 0, sizeof x->return_in_flight);
    memset(&x->grads_in_flight, 0, sizeof x->grads_in_flight);
    free(x->h_send);
    free(x->h_recv);
    x->h_send = x->h_recv = NULL;
}

/* A buffer of the backend's memory that free_buffers hands back. */
static void *own(ep_ctx *x, size_t bytes, moe_err *e)
{
    void *p = x->be->alloc(x->be, bytes, e);
    if (p)
        x->owned[x->n_owned++] = p;
    return p;
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
    x->cap = cap_rows(x, N, K);
    x->row_bytes = be->act_bytes(be, (size_t)C);
    size_t ns = (size_t)N * K, nr = x->cap;
    size_t big = x->row_bytes > sizeof(real) ? x->row_bytes : sizeof(real);
    size_t rows_s = ns * x->row_bytes + 1, rows_r = nr * x->row_bytes + 1;
    size_t probs_s = sizeof(real) * ns + 1, probs_r = sizeof(real) * nr + 1;
    int kind = be->mem_kind, ok;
    be->mem_kind = MOE_MEM_COMM;
    ok = (x->a_send = own(x, rows_s, e)) && (x->a_back = own(x, rows_s, e)) &&
         (x->p_send = own(x, probs_s, e)) && (x->p_back = own(x, probs_s, e)) &&
         (x->g_send = x->overlap ? own(x, rows_s, e) : x->a_send);
    be->mem_kind = MOE_MEM_CAPACITY;
    ok = ok && (x->a_recv[0] = own(x, rows_r, e)) && (x->p_recv[0] = own(x, probs_r, e));
    if (ok && x->overlap)
        ok = (x->a_recv[1] = own(x, rows_r, e)) && (x->p_recv[1] = own(x, probs_r, e)) &&
             (x->a_ret = own(x, rows_r, e)) && (x->p_ret = own(x, probs_r, e)) &&
             (x->a_grad = own(x, rows_r, e));
    else if (ok) {
        x->a_recv[1] = x->a_ret = x->a_grad = x->a_recv[0];
        x->p_recv[1] = x->p_ret = x->p_recv[0];
    }
    be->mem_kind = kind;
    if (!ok)
        return moe_err_prefix(e, "expert-parallel dispatch buffers");
    if (!x->c->device_memory) {
        /* either side of an exchange, laid out as the backend buffers are */
        size_t rows = ns > nr ? ns : nr;
        x->h_send = malloc(rows * big + 1);
        x->h_recv = malloc(rows * big + 1);
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

static int layer_init(ep_ctx *x, ep_layer *l, moe_err *e)
{
    memset(l, 0, sizeof *l);
    size_t ns = (size_t)x->N * x->K, nr = (size_t)x->P * ns;
    int P = x->P;
    /* host tables of the rows (EP x tokens x top_k a layer): none for a plan, which
     * routes nothing (they would be the plan's largest host memory) */
    size_t hs = x->be->counts_only ? 0 : ns, hr = x->be->counts_only ? 0 : nr;
    l->send_pos_h = malloc(sizeof(int32_t) * hs + 1);
    l->send_tok_h = malloc(sizeof(int32_t) * hs + 1);
    l->recv_slot_h = malloc(sizeof(int32_t) * hr + 1);
    l->recv_src_h = malloc(sizeof(int32_t) * hr + 1);
    l->all_cnt = calloc(x->be->counts_only ? 1 : (size_t)P * x->E, sizeof(int64_t));
    l->layer_cnt = calloc((size_t)x->E_local + 1, sizeof(int64_t));
    int tables = 1;
    for (int i = 0; i < 2; i++) {
        ep_pass *ps = &l->pass[i];
        ps->s_cnt = calloc((size_t)P, sizeof(size_t));
        ps->s_off = calloc((size_t)P, sizeof(size_t));
        ps->r_cnt = calloc((size_t)P, sizeof(size_t));
        ps->r_off = calloc((size_t)P, sizeof(size_t));
        tables = tables && ps->s_cnt && ps->s_off && ps->r_cnt && ps->r_off;
    }
    int kind = x->be->mem_kind;
    x->be->mem_kind = MOE_MEM_COMM;
    int rc = (!l->send_pos_h || !l->send_tok_h || !l->recv_slot_h || !l->recv_src_h ||
              !l->all_cnt || !l->layer_cnt || !tables)
                 ? moe_errf(e, "out of memory for the expert-parallel plan of a layer")
             : alloc_plan(x->be, &l->send, ns, ns, x->E, e) ||
                     alloc_plan(x->be, &l->recv, x->cap, x->cap, x->E_local, e)
                 ? -1
                 : 0;
    x->be->mem_kind = kind;
    return rc;
}

/* The state of the layer whose model plan is `key`: the one made for it, a
 * reserved one not yet taken, or a new one. */
static ep_layer *layer_of(ep_ctx *x, const moe_route_plan *key, moe_err *e)
{
    for (int i = 0; i < x->n_layers; i++)
        if (x->layers[i].key == key)
            return &x->layers[i];
    for (int i = 0; i < x->n_layers; i++)
        if (!x->layers[i].key) {
            x->layers[i].key = key;
            return &x->layers[i];
        }
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
    if (layer_init(x, l, e))
        return NULL;
    l->key = key;
    return l;
}

/* Byte all-to-all of rows of `unit` bytes between the send-order buffer
 * (N K rows; to and from each rank at ps->s_off) and a pass's arrival
 * buffer (ps->r_off): `fwd` = 1 tokens to experts, 0 back. Queued into *f
 * when the communicator carries the backend's memory (a later wait covers
 * the earlier collectives of the flight); staged through host memory, laid
 * out as the backend buffers, and done on return otherwise. */
static int exchange(ep_ctx *x, const ep_pass *ps, int fwd, const void *src, void *dst,
                    size_t unit, ep_flight *f, moe_err *e)
{
    moe_backend *be = x->be;
    int P = x->P;
    size_t sc[P], sd[P], rc[P], rd[P];
    memset(sc, 0, sizeof sc), memset(sd, 0, sizeof sd);
    memset(rc, 0, sizeof rc), memset(rd, 0, sizeof rd);
    for (int q = 0; q < P; q++) {
        sc[q] = (fwd ? ps->s_cnt[q] : ps->r_cnt[q]) * unit;
        sd[q] = (fwd ? ps->s_off[q] : ps->r_off[q]) * unit;
        rc[q] = (fwd ? ps->r_cnt[q] : ps->s_cnt[q]) * unit;
        rd[q] = (fwd ? ps->r_off[q] : ps->s_off[q]) * unit;
    }
    if (x->c->device_memory) {
        if (comm_alltoallv_start(x->c, src, sc, sd, dst, rc, rd, &f->req, e))
            return -1;
        f->live = 1;
        return 0;
    }
    for (int q = 0; q < P; q++)
        if (sc[q] && be->download(be, x->h_send + sd[q], (const char *)src + sd[q], sc[q], e))
            return -1;
    if (comm_alltoallv(x->c, x->h_send, sc, sd, x->h_recv, rc, rd, e))
        return -1;
    for (int q = 0; q < P; q++)
        if (rc[q] && be->upload(be, (char *)dst + rd[q], x->h_recv + rd[q], rc[q], e))
            return -1;
    return 0;
}

/* The backend's later work behind the flight (no host wait). */
static int flight_wait(ep_flight *f, moe_err *e)
{
    if (!f->live)
        return 0;
    f->live = 0;
    return comm_wait(&f->req, e);
}

/* Rows [lo, hi) of receiver d's expert-major order that come from rank q
 * for local expert k, as [*from, *from + return) of that block. */
static size_t block_part(const ep_ctx *x, const ep_layer *l, int d, int k, int q, size_t lo,
                         size_t hi, size_t *from)
{
    const int64_t *cnt = l->all_cnt;
    int E = x->E, EL = x->E_local, g = d * EL + k;
    size_t off = 0;
    for (int kk = 0; kk < k; kk++)
        for (int qq = 0; qq < x->P; qq++)
            off += (size_t)cnt[(size_t)qq * E + d * EL + kk];
    for (int qq = 0; qq < q; qq++)
        off += (size_t)cnt[(size_t)qq * E + g];
    size_t n = (size_t)cnt[(size_t)q * E + g];
    size_t a = lo > off ? lo : off, b = hi < off + n ? hi : off + n;
    *from = a - off;
    return b > a ? b - a : 0;
}

static size_t rows_of(const ep_ctx *x, const ep_layer *l, int d)
{
    size_t n = 0;
    for (int q = 0; q < x->P; q++)
        for (int k = 0; k < x->E_local; k++)
            n += (size_t)l->all_cnt[(size_t)q * x->E + d * x->E_local + k];
    return n;
}

/* Pass p's traffic, this rank as sender and as receiver (host only). */
static int pass_traffic(const ep_ctx *x, const ep_layer *l, int p, ep_pass *ps, moe_err *e)
{
    int P = x->P, EL = x->E_local, E = x->E, me = x->c->rank;
    size_t lo = (size_t)p * l->pass_rows, hi = lo + l->pass_rows, from;
    /* as sender: for each receiver, one contiguous range of send order */
    for (int d = 0; d < P; d++) {
        size_t soff = 0, start = 0, n = 0;
        for (int g = 0; g < d * EL; g++)
            soff += (size_t)l->all_cnt[(size_t)me * E + g];
        for (int k = 0; k < EL; k++) {
            size_t part = block_part(x, l, d, k, me, lo, hi, &from);
            if (part && n && soff + from != start + n)
                return moe_errf(e, "internal: pass %d's rows for rank %d are not contiguous", p,
                                d);
            if (part && !n)
                start = soff + from;
            n += part;
            soff += (size_t)l->all_cnt[(size_t)me * E + d * EL + k];
        }
        ps->s_cnt[d] = n;
        ps->s_off[d] = start;
    }
    /* as receiver: arrivals source-major */
    size_t i = 0;
    for (int q = 0; q < P; q++) {
        ps->r_off[q] = i;
        for (int k = 0; k < EL; k++)
            i += block_part(x, l, me, k, q, lo, hi, &from);
        ps->r_cnt[q] = i - ps->r_off[q];
    }
    ps->n_rows = i;
    return 0;
}

/* Pass p's recv plan (arrivals as rows of the pass's expert-major order)
 * and the model's plan, on the host and uploaded. */
static int plan_pass(ep_ctx *x, ep_layer *l, moe_route_plan *plan, int p, moe_err *e)
{
    moe_backend *be = x->be;
    int P = x->P, EL = x->E_local, E = x->E, me = x->c->rank;
    size_t lo = (size_t)p * l->pass_rows, hi = lo + l->pass_rows, i = 0;
    moe_route_plan *rp = &l->recv;
    int64_t *cnt = rp->expert_count, *eoff = rp->expert_offset;
    for (int q = 0; q < P; q++)
        for (int k = 0; k < EL; k++) {
            size_t from, part = block_part(x, l, me, k, q, lo, hi, &from);
            size_t off = 0;
            for (int kk = 0; kk < k; kk++)
                off += (size_t)l->layer_cnt[kk];
            for (int qq = 0; qq < q; qq++)
                off += (size_t)l->all_cnt[(size_t)qq * E + me * EL + k];
            for (size_t r = 0; r < part; r++, i++) {
                int32_t row = (int32_t)(off + from + r - lo);
                l->recv_slot_h[i] = row;
                l->recv_src_h[row] = (int32_t)i;
            }
        }
    if (i != l->pass[p % 2].n_rows)
        return moe_errf(e, "internal: pass %d plans %zu rows, its traffic %zu", p, i,
                        l->pass[p % 2].n_rows);
    eoff[0] = 0;
    for (int k = 0; k < EL; k++) {
        size_t k0 = 0;
        for (int kk = 0; kk < k; kk++)
            k0 += (size_t)l->layer_cnt[kk];
        size_t k1 = k0 + (size_t)l->layer_cnt[k];
        size_t b0 = k0 > lo ? k0 : lo, b1 = k1 < hi ? k1 : hi;
        cnt[k] = b1 > b0 ? (int64_t)(b1 - b0) : 0;
        eoff[k + 1] = eoff[k] + cnt[k];
    }
    rp->n_tokens = (int)i;
    rp->top_k = 1;
    rp->n_experts = EL;
    rp->n_rows = (int)i;
    int32_t off32[EL + 1];
    for (int k = 0; k <= EL; k++)
        off32[k] = (int32_t)eoff[k];
    size_t nrb = sizeof(int32_t) * i;
    if ((nrb && (be->upload(be, rp->slot_row, l->recv_slot_h, nrb, e) ||
                 be->upload(be, rp->row_token, l->recv_src_h, nrb, e))) ||
        be->upload(be, rp->expert_offset_dev, off32, sizeof off32, e))
        return -1;
    /* the model's plan: what the grouped expert ops read */
    plan->n_tokens = x->N;
    plan->top_k = x->K;
    plan->n_experts = EL;
    plan->n_rows = (int)i;
    memcpy(plan->expert_count, cnt, sizeof(int64_t) * (size_t)EL);
    memcpy(plan->expert_offset, eoff, sizeof(int64_t) * ((size_t)EL + 1));
    if ((nrb && be->upload(be, plan->row_token, l->recv_src_h, nrb, e)) ||
        be->upload(be, plan->expert_offset_dev, off32, sizeof off32, e))
        return -1;
    l->cur_pass = p;
    return 0;
}

/* The layer's token rows and router weights in send order, unless a_send
 * holds them already (nothing in flight reads a_send here: the callers
 * waited for the last dispatch). */
static void rows_to_send(ep_ctx *x, ep_layer *l, const act *xin, const real *topk_w, int C)
{
    if (x->send_rows_of == l)
        return;
    x->be->permute(x->be, x->a_send, x->p_send, xin, topk_w, &l->send, C);
    x->send_rows_of = l;
}

/* Queue pass p's rows and router weights to the experts' owners, into
 * arrival slot p % 2 (whose last reader, a permute, was queued before). */
static int queue_pass(ep_ctx *x, ep_layer *l, int p, moe_err *e)
{
    ep_pass *ps = &l->pass[p % 2];
    ep_flight *f = &x->rows_in_flight;
    if (pass_traffic(x, l, p, ps, e) ||
        exchange(x, ps, 1, x->a_send, x->a_recv[p % 2], x->row_bytes, f, e) ||
        exchange(x, ps, 1, x->p_send, x->p_recv[p % 2], sizeof(real), f, e))
        return moe_err_prefix(e, "sending tokens to their experts (pass %d of %d)", p + 1,
                              l->n_pass);
    f->layer = l;
    f->pass = p;
    return 0;
}

/* Pass p's arrivals to expert-major order for the experts; with overlap the
 * next pass's rows are queued at once, to travel while they compute. */
static int land_pass(ep_ctx *x, ep_layer *l, moe_route_plan *plan, int p, act *x_perm,
                     real *p_perm, int C, moe_err *e)
{
    if (plan_pass(x, l, plan, p, e) || flight_wait(&x->rows_in_flight, e))
        return -1;
    x->rows_in_flight.layer = NULL; /* read below */
    x->be->permute(x->be, x_perm, p_perm, x->a_recv[p % 2], x->p_recv[p % 2], &l->recv, C);
    if (x->overlap && p + 1 < l->n_pass)
        return queue_pass(x, l, p + 1, e);
    return 0;
}

/* Passes of a layer whose busiest receiver gets `most` rows: the capacity
 * decides; with overlap at least two, of equal size. */
static void split_passes(const ep_ctx *x, ep_layer *l, size_t most)
{
    int n = most ? (int)((most + x->cap - 1) / x->cap) : 1;
    if (x->overlap && most >= 2 && n < 2)
        n = 2;
    l->n_pass = n;
    l->pass_rows = x->overlap && most ? (most + (size_t)n - 1) / (size_t)n : x->cap;
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
    int P = x->P, EL = x->E_local, NK = N * K, me = x->c->rank;
    /* 1. this rank's pairs per global expert, and their send order: the
     * layer's first host wait (the router's choices size every exchange) */
    host_wait_begin("route counts");
    int got = be->download(be, l->send_tok_h, topk_idx, sizeof(int32_t) * (size_t)NK, e);
    host_wait_end();
    if (got)
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
    /* 2. every rank's counts: each learns what every rank receives, so all
     * agree on the passes */
    host_wait_begin("route count exchange"); /* the second: host values from every rank */
    got = comm_allgather(x->c, route_count, l->all_cnt, (size_t)E, MOE_DT_INT64, e);
    host_wait_end();
    if (got)
        return moe_err_prefix(e, "exchanging expert counts");
    size_t most = 0;
    for (int q = 0; q < P * E; q++)
        if (l->all_cnt[q] < 0)
            return moe_errf(e, "rank %d announced %lld rows for expert %d", q / E,
                            (long long)l->all_cnt[q], q % E);
    for (int r = 0; r < P; r++) {
        size_t n = rows_of(x, l, r);
        most = n > most ? n : most;
    }
    l->n_recv = (int64_t)rows_of(x, l, me);
    if (most > (size_t)P * NK)
        return moe_errf(e, "a rank of the EP group receives %zu rows, more than the %d its "
                           "tokens can send", most, P * NK);
    for (int k = 0; k < EL; k++) {
        l->layer_cnt[k] = 0;
        for (int q = 0; q < P; q++)
            l->layer_cnt[k] += l->all_cnt[(size_t)q * E + me * EL + k];
    }
    split_passes(x, l, most);
    l->returned = l->returned_bwd = 0;
    l->grads_sent_ready = 0;
    /* nothing queued earlier is still in flight under the buffers rewritten
     * below (an abandoned pass, a return an error left behind) */
    if (flight_wait(&x->rows_in_flight, e) || flight_wait(&x->return_in_flight, e) ||
        flight_wait(&x->grads_in_flight, e))
        return -1;
    x->rows_in_flight.layer = x->grads_in_flight.layer = NULL;
    /* 3. the send plan: rows in send order, K slots per token */
    moe_route_plan *sp = &l->send;
    sp->n_tokens = N;
    sp->top_k = K;
    sp->n_experts = E;
    sp->n_rows = NK;
    if (be->upload(be, sp->slot_row, l->send_pos_h, sizeof(int32_t) * (size_t)NK, e) ||
        be->upload(be, sp->row_token, l->send_tok_h, sizeof(int32_t) * (size_t)NK, e))
        return -1;
    /* 4. pass 0, from this call's rows */
    x->send_rows_of = NULL;
    rows_to_send(x, l, xin, topk_w, C);
    if (queue_pass(x, l, 0, e))
        return -1;
    return land_pass(x, l, plan, 0, x_perm, p_perm, C, e);
}

static ep_layer *known_layer(ep_ctx *x, const moe_route_plan *plan, const char *what, moe_err *e)
{
    for (int i = 0; i < x->n_layers; i++)
        if (x->layers[i].key == plan)
            return &x->layers[i];
    moe_errf(e, "expert-parallel %s before any dispatch of this layer", what);
    return NULL;
}

static int ep_passes(moe_dispatcher *d, const moe_route_plan *plan, int64_t *layer_count)
{
    ep_ctx *x = d->ctx;
    for (int i = 0; i < x->n_layers; i++)
        if (x->layers[i].key == plan) {
            if (layer_count)
                memcpy(layer_count, x->layers[i].layer_cnt, sizeof(int64_t) * (size_t)x->E_local);
            return x->layers[i].n_pass;
        }
    return 1;
}

static int ep_dispatch_pass(moe_dispatcher *d, moe_backend *be, moe_route_plan *plan, int pass,
                            act *x_perm, real *p_perm, const act *xin, const real *topk_w, int C,
                            moe_err *e)
{
    ep_ctx *x = d->ctx;
    ep_layer *l = known_layer(x, plan, "pass", e);
    if (!l)
        return -1;
    if (pass < 0 || pass >= l->n_pass)
        return moe_errf(e, "internal: pass %d of a layer of %d passes", pass, l->n_pass);
    (void)be;
    ep_flight *f = &x->rows_in_flight;
    if (!(f->layer == l && f->pass == pass)) { /* not issued ahead */
        if (flight_wait(f, e))
            return -1;
        rows_to_send(x, l, xin, topk_w, C);
        if (queue_pass(x, l, pass, e))
            return -1;
    }
    return land_pass(x, l, plan, pass, x_perm, p_perm, C, e);
}

/* Queue the return of the pass dispatched last from a_ret into a_back (and
 * the router weights' gradients, p_ret into p_back, with_probs); the last
 * pass waits for every return, the others only without overlap. */
static int queue_return(ep_ctx *x, ep_layer *l, int with_probs, int last, moe_err *e)
{
    const ep_pass *ps = &l->pass[l->cur_pass % 2];
    ep_flight *f = &x->return_in_flight;
    if (exchange(x, ps, 0, x->a_ret, x->a_back, x->row_bytes, f, e) ||
        (with_probs && exchange(x, ps, 0, x->p_ret, x->p_back, sizeof(real), f, e)))
        return -1;
    return last || !x->overlap ? flight_wait(f, e) : 0;
}

static int ep_combine(moe_dispatcher *d, moe_backend *be, act *out, const act *y_perm,
                      const moe_route_plan *plan, int C, moe_err *e)
{
    ep_ctx *x = d->ctx;
    ep_layer *l = known_layer(x, plan, "combine", e);
    if (!l)
        return -1;
    int last = ++l->returned == l->n_pass;
    if (flight_wait(&x->return_in_flight, e)) /* the last return still reads a_ret */
        return -1;
    be->combine(be, x->a_ret, y_perm, &l->recv, C); /* expert-major -> arrival order */
    if (queue_return(x, l, 0, last, e))
        return moe_err_prefix(e, "returning expert outputs");
    if (last)
        be->combine(be, out, x->a_back, &l->send, C); /* sum each token's slots */
    return 0;
}

static int ep_combine_bwd(moe_dispatcher *d, moe_backend *be, act *dy_perm, const act *dout,
                          const moe_route_plan *plan, int C, moe_err *e)
{
    ep_ctx *x = d->ctx;
    ep_layer *l = known_layer(x, plan, "combine backward", e);
    if (!l)
        return -1;
    int s = l->cur_pass % 2;
    /* each slot's copy of dout in send order: once a backward in g_send of
     * its own, every pass where g_send is a_send (whose token rows go) */
    if (!(x->overlap && l->grads_sent_ready)) {
        be->combine_bwd(be, x->g_send, dout, &l->send, C);
        l->grads_sent_ready = 1;
        if (x->g_send == x->a_send)
            x->send_rows_of = NULL;
    }
    /* without overlap a_grad is the pass's arrival slot; with it one buffer
     * whose last reader (the permute below) is queued before the next pass's
     * gradients are */
    act *arrived = x->overlap ? x->a_grad : x->a_recv[s];
    ep_flight *f = &x->grads_in_flight;
    if (!(f->layer == l && f->pass == l->cur_pass)) { /* not issued ahead */
        if (flight_wait(f, e) ||
            exchange(x, &l->pass[s], 1, x->g_send, arrived, x->row_bytes, f, e))
            return moe_err_prefix(e, "sending output gradients to the experts");
    }
    if (flight_wait(f, e))
        return moe_err_prefix(e, "sending output gradients to the experts");
    f->layer = NULL;
    be->combine_bwd(be, dy_perm, arrived, &l->recv, C);
    /* the next pass's, to travel while the experts' backward runs: its
     * traffic is known once its rows were queued */
    const ep_flight *rows = &x->rows_in_flight;
    int next = l->cur_pass + 1;
    if (x->overlap && rows->layer == l && rows->pass == next) {
        if (exchange(x, &l->pass[next % 2], 1, x->g_send, x->a_grad, x->row_bytes, f, e))
            return moe_err_prefix(e, "sending output gradients to the experts (pass %d of %d)",
                                  next + 1, l->n_pass);
        f->layer = l;
        f->pass = next;
    }
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
    int last = ++l->returned_bwd == l->n_pass;
    if (flight_wait(&x->return_in_flight, e))
        return -1;
    be->permute_bwd(be, x->a_ret, x->p_ret, dx_perm, dp_perm, &l->recv, C);
    if (queue_return(x, l, 1, last, e))
        return moe_err_prefix(e, "returning input gradients from the experts");
    if (last)
        be->permute_bwd(be, dx, dtopk_w, x->a_back, x->p_back, &l->send, C);
    return 0;
}

static int ep_reserve(moe_dispatcher *d, moe_backend *be, int N, int K, int C, int n_layers,
                      moe_err *e)
{
    ep_ctx *x = d->ctx;
    if (ensure_buffers(x, be, N, K, C, e))
        return -1;
    if (n_layers > x->cap_layers) {
        ep_layer *nl = realloc(x->layers, sizeof *nl * (size_t)n_layers);
        if (!nl)
            return moe_errf(e, "out of memory");
        x->layers = nl;
        x->cap_layers = n_layers;
    }
    while (x->n_layers < n_layers)
        if (layer_init(x, &x->layers[x->n_layers++], e))
            return moe_err_prefix(e, "the expert-parallel plans of %d layers", n_layers);
    return 0;
}

static void ep_destroy(moe_dispatcher *d)
{
    ep_ctx *x = d->ctx;
    free_buffers(x);
    free(x);
    free(d);
}

void dispatcher_ep_set_capacity(moe_dispatcher *d, double factor)
{
    ep_ctx *x = d->ctx;
    x->capacity_factor = factor > 0 ? factor : 0;
}

void dispatcher_ep_set_overlap(moe_dispatcher *d, int on)
{
    ep_ctx *x = d->ctx;
    x->overlap = on != 0;
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
    d->passes = ep_passes;
    d->dispatch_pass = ep_dispatch_pass;
    d->reserve = ep_reserve;
    d->destroy = ep_destroy;
    *out = d;
    return 0;
}

/* moekit: the distributed optimizer on the backend's memory (see zero.h). */
#include "zero.h"

#include "../model/model_slices.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../numerics/half.h"

typedef struct {
    size_t flat, n;          /* [flat, flat + n) of the model's flat buffers */
    int group;               /* 0 dense (over the world), 1 experts (over DP) */
    const size_t *counts, *displs; /* each member's slice, elements from flat (shared:
                                      z->slicings) */
    size_t state;            /* where this rank's slice lives in the shard's state */
    int ready_layer;         /* its gradients are final after this layer's backward (L: the
                                head and final norm, -1: the embedding) */
    int started;             /* its reduce-scatter is queued this step (req) */
    moe_comm_req req;
    int gathering;           /* its all-gather of the new weights is queued, not waited for */
    moe_comm_req gather_req;
} bucket;

/* How a bucket of n elements splits over a group of S: every bucket of one
 * size shares one (a run's full buckets are all alike, and so are the runs of
 * every layer), so the table holds a few of these whatever the buckets. */
typedef struct {
    size_t n, S;
    size_t *counts, *displs;
} slicing;

struct moe_zero {
    moe_model *model;
    slicing *slicings;
    int n_slicings, cap_slicings;
    moe_comm *world, *comm[2];
    int n_buckets;
    bucket *b;
    moe_shard_piece *pieces; /* the slices cut where weight decay changes */
    int n_pieces;
    moe_range *ranges;       /* the slices' gradient ranges, for the norm */
    int n_ranges;
    size_t n_group[2], sn_group[2], sn; /* elements: per group, this rank's per group, shard */
    size_t msz;              /* bytes of one moment element */
    int armed;               /* the step's last backward: buckets start as they finish */
    uint16_t *lo;            /* [sn] masters' low halves (split-master backends) */
    void *m, *v;             /* [sn] moments */
};

static size_t act_es(const moe_model *m) { return m->be->act_bytes(m->be, 1); }
static int grads_ready(void *ctx, int layer, moe_err *e); /* the model's hooks */
static int weights_needed(void *ctx, int layer, moe_err *e);

/* ---- the layout: buckets, slices, pieces ---- */

/* The backward runs the head and the final norm first (layer L), then the
 * layers from the last, then the embedding (-1): a bucket is final after the
 * lowest layer any of its tensors belongs to. */
static int bucket_ready_layer(const moe_model *m, size_t flat, size_t n)
{
    int ready = m->d.L;
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        if (p->offset >= flat + n || p->offset + p->n <= flat)
            continue;
        int l = p->kind == MOE_P_EMBED ? -1 : p->layer < 0 ? m->d.L : p->layer;
        ready = l < ready ? l : ready;
    }
    return ready;
}

/* The split of n elements over S members: near-equal slices, the first n % S
 * one larger. NULL when out of memory. */
static const slicing *slicing_of(moe_zero *z, size_t n, size_t S)
{
    for (int i = 0; i < z->n_slicings; i++)
        if (z->slicings[i].n == n && z->slicings[i].S == S)
            return &z->slicings[i];
    if (z->n_slicings == z->cap_slicings) {
        int nc = z->cap_slicings ? 2 * z->cap_slicings : 8;
        slicing *ns = realloc(z->slicings, sizeof *ns * (size_t)nc);
        if (!ns)
            return NULL;
        z->slicings = ns;
        z->cap_slicings = nc;
    }
    slicing *sl = &z->slicings[z->n_slicings];
    *sl = (slicing){n, S, calloc(S, sizeof(size_t)), calloc(S, sizeof(size_t))};
    if (!sl->counts || !sl->displs) {
        free(sl->counts);
        free(sl->displs);
        return NULL;
    }
    z->n_slicings++;
    size_t base = n / S, extra = n % S, o = 0;
    for (size_t r = 0; r < S; r++) {
        sl->counts[r] = base + (r < extra);
        sl->displs[r] = o;
        o += sl->counts[r];
    }
    return sl;
}

static int add_bucket(moe_zero *z, size_t *cap, size_t flat, size_t n, int group, moe_err *e)
{
    if ((size_t)z->n_buckets == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        bucket *nb = realloc(z->b, sizeof *nb * nc);
        if (!nb)
            return moe_errf(e, "out of memory for the gradient buckets");
        z->b = nb;
        *cap = nc;
    }
    const slicing *sl = slicing_of(z, n, (size_t)z->comm[group]->size);
    if (!sl)
        return moe_errf(e, "out of memory for the gradient buckets");
    z->b[z->n_buckets++] = (bucket){.flat = flat, .n = n, .group = group, .counts = sl->counts,
                                    .displs = sl->displs,
                                    .ready_layer = bucket_ready_layer(z->model, flat, n)};
    return 0;
}

/* Contiguous runs of one group's tensors, cut into buckets of at most
 * bucket_elems (a multiple of the group's size, so every bucket but a run's
 * last splits evenly: NCCL's reduce-scatter and all-gather in place). */
static int make_buckets(moe_zero *z, size_t bucket_elems, moe_err *e)
{
    const moe_model *m = z->model;
    size_t cap = 0, run0 = 0, run_n = 0;
    int run_g = -1;
    for (int i = 0; i <= m->n_params; i++) {
        const moe_param *p = i < m->n_params ? &m->params[i] : NULL;
        int g = p ? p->n_experts > 0 : -1;
        if (p && g == run_g && run0 + run_n == p->offset) {
            run_n += p->n;
            continue;
        }
        if (run_n) { /* close the run */
            size_t S = (size_t)z->comm[run_g]->size, per = bucket_elems / S * S;
            if (per < S)
                per = S;
            for (size_t o = 0; o < run_n; o += per)
                if (add_bucket(z, &cap, run0 + o, run_n - o < per ? run_n - o : per, run_g, e))
                    return -1;
        }
        if (p) {
            run_g = g;
            run0 = p->offset;
            run_n = p->n;
        }
    }
    return 0;
}

/* This rank's slice of every bucket, cut at the tensors' decay spans. */
static int make_pieces(moe_zero *z, moe_err *e)
{
    const moe_model *m = z->model;
    size_t cap = (size_t)z->n_buckets + (size_t)m->n_params + 1;
    z->pieces = calloc(cap, sizeof *z->pieces);
    z->ranges = calloc((size_t)z->n_buckets + 1, sizeof *z->ranges);
    if (!z->pieces || !z->ranges)
        return moe_errf(e, "out of memory for the optimizer's shard table");
    size_t state = 0;
    for (int k = 0; k < z->n_buckets; k++) {
        bucket *b = &z->b[k];
        int me = z->comm[b->group]->rank;
        size_t lo = b->flat + b->displs[me], hi = lo + b->counts[me];
        b->state = state;
        z->sn_group[b->group] += hi - lo;
        z->n_group[b->group] += b->n;
        if (hi > lo)
            z->ranges[z->n_ranges++] = (moe_range){lo, hi - lo};
        for (int i = 0; i < m->n_params && lo < hi; i++) {
            const moe_param_span *sp = &m->spans[i];
            size_t a = sp->offset > lo ? sp->offset : lo;
            size_t c = sp->offset + sp->n < hi ? sp->offset + sp->n : hi;
            if (a >= c)
                continue;
            moe_shard_piece *last = z->n_pieces ? &z->pieces[z->n_pieces - 1] : NULL;
            size_t st = state + (a - lo);
            if (last && last->decay == sp->decay && last->flat + last->n == a &&
                last->state + last->n == st) {
                last->n += c - a;
                continue;
            }
            if ((size_t)z->n_pieces == cap) {
                cap *= 2;
                moe_shard_piece *np = realloc(z->pieces, sizeof *np * cap);
                if (!np)
                    return moe_errf(e, "out of memory for the optimizer's shard table");
                z->pieces = np;
            }
            z->pieces[z->n_pieces++] = (moe_shard_piece){a, st, c - a, sp->decay};
        }
        state += hi - lo;
    }
    z->sn = state;
    return 0;
}

/* ---- masters through the shard (split-master backends) ---- */

static size_t max_bucket(const moe_zero *z)
{
    size_t n = 1;
    for (int k = 0; k < z->n_buckets; k++)
        if (z->b[k].n > n)
            n = z->b[k].n;
    return n;
}

/* In place on `buf` (device): every member's slice of bucket b, of es bytes
 * an element, gathered from where each member wrote its own; queued into
 * *req when req is given, else waited for. */
static int gather_bucket_on(moe_zero *z, const bucket *b, void *buf, size_t es,
                            moe_comm_req *req, moe_err *e)
{
    moe_comm *c = z->comm[b->group];
    if (c->size == 1)
        return 0;
    size_t S = (size_t)c->size, cb[S], db[S];
    for (size_t r = 0; r < S; r++) {
        cb[r] = b->counts[r] * es;
        db[r] = b->displs[r] * es;
    }
    char *base = buf;
    if (req)
        return comm_allgatherv_start(c, base + db[c->rank], cb[c->rank], base, cb, db,
                                     MOE_DT_BYTE, req, e);
    return comm_allgatherv(c, base + db[c->rank], cb[c->rank], base, cb, db, MOE_DT_BYTE, e);
}

static int gather_bucket(moe_zero *z, const bucket *b, void *buf, size_t es, moe_err *e)
{
    return gather_bucket_on(z, b, buf, es, NULL, e);
}

/* The model's hook (model.h weights_needed): the backend's work from here
 * on waits for every queued all-gather of a bucket holding weights of
 * `layer` or below (a bucket's lowest layer is its ready_layer), so the
 * forward of layer l needs only the buckets up to it (Megatron-Core's
 * overlap_param_gather); MOE_WEIGHTS_ALL waits for them all. */
static int weights_needed(void *ctx, int layer, moe_err *e)
{
    moe_zero *z = ctx;
    for (int k = 0; k < z->n_buckets; k++) {
        bucket *b = &z->b[k];
        if (!b->gathering || b->ready_layer > layer)
            continue;
        b->gathering = 0;
        if (comm_wait(&b->gather_req, e))
            return moe_err_prefix(e, "gathering updated %s weights",
                                  b->group ? "expert" : "dense");
    }
    return 0;
}

/* op on every bucket in turn, through one bucket of 16-bit scratch (device) */
typedef int (*bucket_op)(moe_zero *z, const bucket *b, uint16_t *tmp, void *arg, moe_err *e);

static int each_bucket(moe_zero *z, bucket_op op, void *arg, moe_err *e)
{
    moe_backend *be = z->model->be;
    uint16_t *tmp = be->alloc(be, sizeof(uint16_t) * max_bucket(z), e);
    if (!tmp)
        return moe_err_prefix(e, "the masters' staging bucket");
    int rc = 0;
    for (int k = 0; k < z->n_buckets && !rc; k++)
        rc = op(z, &z->b[k], tmp, arg, e);
    if (!rc)
        rc = be->sync(be, e);
    be->free(be, tmp);
    return rc;
}

/* the bucket's low halves gathered from the group, the fp32 masters rebuilt on the host */
static int gather_op(moe_zero *z, const bucket *b, uint16_t *tmp, void *host, moe_err *e)
{
    moe_model *m = z->model;
    moe_backend *be = m->be;
    int me = z->comm[b->group]->rank;
    return be->copy(be, tmp + b->displs[me], z->lo + b->state, sizeof(uint16_t) * b->counts[me],
                    e) ||
           gather_bucket(z, b, tmp, sizeof(uint16_t), e) ||
           be->masters_download(be, (real *)host + b->flat, tmp, (char *)m->wc + act_es(m) * b->flat,
                                b->n, e);
}

typedef struct {
    moe_masters_fill_fn fill;
    void *arg;
} fill_args;

/* the whole bucket filled (the compute copy is replicated over the group), its own slice of
 * low halves kept */
static int fill_op(moe_zero *z, const bucket *b, uint16_t *tmp, void *arg, moe_err *e)
{
    const fill_args *f = arg;
    int me = z->comm[b->group]->rank;
    return f->fill(f->arg, b->flat, b->n, tmp, e) ||
           z->model->be->copy(z->model->be, z->lo + b->state, tmp + b->displs[me],
                              sizeof(uint16_t) * b->counts[me], e);
}

/* model_init_random's device path: nothing crosses PCIe and nothing is sent */
static int masters_fill(void *ctx, moe_masters_fill_fn fill, void *arg, moe_err *e)
{
    fill_args f = {fill, arg};
    return each_bucket(ctx, fill_op, &f, e) ? moe_err_prefix(e, "setting the sharded master weights")
                                            : 0;
}

typedef struct {
    moe_model *m;
    const real *host;
} upload_args;

static int fill_from_host(void *arg, size_t flat, size_t n, uint16_t *lo, moe_err *e)
{
    const upload_args *a = arg;
    moe_backend *be = a->m->be;
    return be->masters_upload(be, lo, (char *)a->m->wc + be->act_bytes(be, flat), a->host + flat,
                              n, e);
}

/* model_get_masters / model_set_masters of a model whose low halves are
 * sharded here, bucket by bucket */
static int masters_io(void *ctx, real *host, int to_host, moe_err *e)
{
    moe_zero *z = ctx;
    if (!to_host) {
        upload_args a = {z->model, host};
        return masters_fill(z, fill_from_host, &a, e);
    }
    return each_bucket(z, gather_op, host, e)
               ? moe_err_prefix(e, "gathering the sharded master weights")
               : 0;
}

/* ---- create / destroy ---- */

int zero_create(moe_zero **out, moe_model *m, moe_par *p, const moe_zero_opts *o, moe_err *e)
{
    moe_backend *be = m->be;
    if (m->master || m->m)
        return moe_errf(e, "internal: the distributed optimizer needs a model without its own "
                           "optimizer state (model_create_parallel with_moments = 0)");
    moe_comm *groups[3] = {p->world, p->dp, p->world};
    for (int i = 0; i < 3; i++)
        if (groups[i]->size > 1 && be->device_memory && !groups[i]->device_memory)
            return moe_errf(e, "the optimizer's collectives on the %s group run over %s, which "
                               "takes host memory, but the %s backend's buffers are on the device "
                               "(a GPU build needs NCCL for more than one rank)",
                            groups[i]->name, groups[i]->impl, be->name);
    if (m->split_master && !be->copy)
        return moe_errf(e, "the %s backend has no copy operation for the optimizer", be->name);
    moe_zero *z = calloc(1, sizeof *z);
    if (!z)
        return moe_errf(e, "out of memory");
    z->model = m;
    z->world = p->world;
    z->comm[0] = p->world;
    z->comm[1] = p->dp;
    z->msz = o->moments_bf16 ? sizeof(uint16_t) : sizeof(real);
    m->moments_bf16 = o->moments_bf16 != 0;
    size_t bucket_elems = o->bucket_bytes / sizeof(real);
    if (make_buckets(z, bucket_elems ? bucket_elems : 1, e) || make_pieces(z, e))
        goto fail;
    m->grads_ready = grads_ready;
    m->grads_ctx = z;
    m->weights_needed = weights_needed;
    m->weights_ctx = z;
    z->m = be->alloc(be, z->msz * z->sn + 1, e);
    z->v = z->m ? be->alloc(be, z->msz * z->sn + 1, e) : NULL;
    if (z->v && m->split_master)
        z->lo = be->alloc(be, sizeof(uint16_t) * z->sn + 1, e);
    if (!z->v || (m->split_master && !z->lo)) {
        moe_err_prefix(e, "optimizer shard of %zu elements", z->sn);
        goto fail;
    }
    be->memset0(be, z->m, z->msz * z->sn);
    be->memset0(be, z->v, z->msz * z->sn);
    if (z->lo)
        be->memset0(be, z->lo, sizeof(uint16_t) * z->sn);
    if (m->split_master) {
        m->masters_io = masters_io;
        m->masters_fill = masters_fill;
        m->masters_ctx = z;
    }
    *out = z;
    return 0;
fail:
    zero_destroy(z);
    return -1;
}

void zero_destroy(moe_zero *z)
{
    if (!z)
        return;
    moe_backend *be = z->model->be;
    if (z->model->weights_ctx == z) {
        z->model->weights_needed = NULL;
        z->model->weights_ctx = NULL;
    }
    if (z->model->masters_ctx == z) {
        z->model->masters_io = NULL;
        z->model->masters_fill = NULL;
        z->model->masters_ctx = NULL;
    }
    if (z->lo) be->free(be, z->lo);
    if (z->m) be->free(be, z->m);
    if (z->v) be->free(be, z->v);
    for (int i = 0; i < z->n_slicings; i++) {
        free(z->slicings[i].counts);
        free(z->slicings[i].displs);
    }
    free(z->slicings);
    free(z->b);
    free(z->pieces);
    free(z->ranges);
    free(z);
}

/* ---- the step ---- */

static double shard_sum_squares(moe_zero *z)
{
    moe_backend *be = z->model->be;
    const real *g = z->model->grad;
    if (be->sum_squares_ranges)
        return be->sum_squares_ranges(be, g, z->ranges, z->n_ranges);
    double s = 0;
    for (int i = 0; i < z->n_ranges; i++)
        s += be->sum_squares(be, g + z->ranges[i].offset, z->ranges[i].n);
    return s;
}

/* Queue bucket b's in-place reduce-scatter (stream order: behind the
 * backward kernels that wrote it, which comm.h orders for us). */
static int start_bucket(moe_zero *z, bucket *b, moe_err *e)
{
    moe_comm *c = z->comm[b->group];
    b->started = 1;
    if (c->size == 1) {
        b->req = (moe_comm_req){c, 0};
        return 0;
    }
    real *g = z->model->grad + b->flat;
    if (comm_reduce_scatter_sum_start(c, g, g + b->displs[c->rank], b->counts, MOE_DT_REAL,
                                      &b->req, e))
        return moe_err_prefix(e, "reducing %s gradients", b->group ? "expert" : "dense");
    return 0;
}

void zero_arm(moe_zero *z) { z->armed = 1; }

/* The model's hook (model.h grads_ready): while armed, every bucket whose
 * gradients the backward just finished starts reducing now, beside the
 * backward of the layers below it. */
static int grads_ready(void *ctx, int layer, moe_err *e)
{
    moe_zero *z = ctx;
    if (!z->armed)
        return 0;
    for (int k = 0; k < z->n_buckets; k++) {
        bucket *b = &z->b[k];
        if (!b->started && b->ready_layer == layer && start_bucket(z, b, e))
            return -1;
    }
    return 0;
}

int zero_step(moe_zero *z, moe_adamw_hyper h, double clip, double *norm_out, moe_err *e)
{
    moe_model *m = z->model;
    moe_backend *be = m->be;
    /* 1. reduce-scatter each bucket in place: those the backward did not
     * start (unarmed, or a bucket it never reached), then the optimizer's
     * work queued behind all of them (and behind the last step's gathers,
     * which a forward that never ran has not waited for) */
    int rc = weights_needed(z, MOE_WEIGHTS_ALL, e);
    for (int k = 0; k < z->n_buckets && !rc; k++)
        if (!z->b[k].started)
            rc = start_bucket(z, &z->b[k], e);
    for (int k = 0; k < z->n_buckets; k++) {
        bucket *b = &z->b[k];
        if (!rc && b->started)
            rc = comm_wait(&b->req, e);
        b->started = 0;
    }
    z->armed = 0;
    if (rc)
        return -1;
    /* 2. the global norm from the shards */
    double sq = shard_sum_squares(z);
    if (comm_allreduce_sum(z->world, &sq, 1, MOE_DT_DOUBLE, e))
        return moe_err_prefix(e, "gradient norm");
    double norm = sqrt(sq);
    *norm_out = norm;
    if (!isfinite(norm))
        return 0;
    h.grad_scale = clip > 0 && norm > clip ? (real)(clip / (norm + 1e-6)) : 1;
    h.moments_bf16 = m->moments_bf16;
    h.zero_grads = NULL;
    h.n_zero_grads = 0;
    /* 3. AdamW on the shard */
    be->adamw_shard(be, m->grad, m->wc, z->lo, z->m, z->v, z->pieces, z->n_pieces, &h);
    if (be->check && be->check(be, e))
        return moe_err_prefix(e, "the optimizer's update");
    /* 4. gather the updated compute copy, queued: the next forward waits for
     * each bucket before the first layer that reads it (weights_needed) */
    size_t es = act_es(m);
    for (int k = 0; k < z->n_buckets; k++) {
        bucket *b = &z->b[k];
        if (gather_bucket_on(z, b, (char *)m->wc + es * b->flat, es, &b->gather_req, e))
            return moe_err_prefix(e, "gathering updated %s weights", b->group ? "expert" : "dense");
        b->gathering = z->comm[b->group]->size > 1;
    }
    return 0;
}

/* ---- sizes ---- */

size_t zero_moment_bytes(const moe_zero *z) { return 2 * z->msz * z->sn; }

size_t zero_unsharded_moment_bytes(const moe_zero *z)
{
    return 2 * z->msz * (z->n_group[0] + z->n_group[1]);
}

size_t zero_state_bytes(const moe_zero *z)
{
    return zero_moment_bytes(z) + (z->lo ? sizeof(uint16_t) * z->sn : 0);
}

void zero_step_traffic(const moe_zero *z, size_t rs_bytes[2], size_t ag_bytes[2])
{
    size_t es = act_es(z->model);
    for (int g = 0; g < 2; g++) {
        size_t S = (size_t)z->comm[g]->size;
        /* a ring sends S - 1 of S slices of every bucket */
        rs_bytes[g] = z->n_group[g] / S * (S - 1) * sizeof(real);
        ag_bytes[g] = z->n_group[g] / S * (S - 1) * es;
    }
}

int zero_n_buckets(const moe_zero *z) { return z->n_buckets; }

/* ---- moments for checkpoints ---- */

/* n moments of the state's storage (host) to reals, or back */
static void moments_to_real(const moe_zero *z, real *dst, const void *src, size_t n)
{
    if (z->msz == sizeof(real)) {
        memcpy(dst, src, sizeof(real) * n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = (real)bf16_to_f32(((const uint16_t *)src)[i]);
}

static void moments_from_real(const moe_zero *z, void *dst, const real *src, size_t n)
{
    if (z->msz == sizeof(real)) {
        memcpy(dst, src, sizeof(real) * n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        ((uint16_t *)dst)[i] = f32_to_bf16((float)src[i]);
}

int zero_get_moments(moe_zero *z, real *m_host, real *v_host, moe_err *e)
{
    moe_backend *be = z->model->be;
    size_t nb = max_bucket(z);
    char *tmp = be->alloc(be, z->msz * nb, e);
    void *host = tmp ? malloc(z->msz * nb) : NULL;
    int rc = tmp && host ? 0 : -1;
    if (tmp && !host)
        moe_errf(e, "out of memory");
    for (int k = 0; k < 2 && !rc; k++) {
        const char *state = k ? z->v : z->m;
        real *dst = k ? v_host : m_host;
        for (int i = 0; i < z->n_buckets && !rc; i++) {
            const bucket *b = &z->b[i];
            int me = z->comm[b->group]->rank;
            rc = be->copy(be, tmp + z->msz * b->displs[me], state + z->msz * b->state,
                          z->msz * b->counts[me], e) ||
                 gather_bucket(z, b, tmp, z->msz, e) ||
                 be->download(be, host, tmp, z->msz * b->n, e);
            if (!rc)
                moments_to_real(z, dst + b->flat, host, b->n);
        }
    }
    free(host);
    if (tmp)
        be->free(be, tmp);
    return rc ? moe_err_prefix(e, "gathering optimizer moments") : 0;
}

int zero_set_moments(moe_zero *z, const real *m_host, const real *v_host, moe_err *e)
{
    moe_backend *be = z->model->be;
    void *host = malloc(z->msz * max_bucket(z));
    if (!host)
        return moe_errf(e, "out of memory");
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        char *state = k ? z->v : z->m;
        const real *src = k ? v_host : m_host;
        for (int i = 0; i < z->n_buckets && !rc; i++) {
            const bucket *b = &z->b[i];
            int me = z->comm[b->group]->rank;
            size_t n = b->counts[me];
            moments_from_real(z, host, src + b->flat + b->displs[me], n);
            rc = be->upload(be, state + z->msz * b->state, host, z->msz * n, e);
        }
    }
    free(host);
    return rc;
}

/* ---- the state as checkpoint slices ---- */

/* This rank's slice of every bucket, as slices of one kind: the shard's
 * state index of flat element x is b->state + (x - the slice's start). */
static int shard_slices(moe_zero *z, const char *prefix, slice_src src, void *base,
                        ckpt_slice_list *out, moe_err *e)
{
    for (int k = 0; k < z->n_buckets; k++) {
        const bucket *b = &z->b[k];
        int me = z->comm[b->group]->rank;
        if (b->counts[me] &&
            model_flat_slices(z->model, b->flat + b->displs[me], b->counts[me], prefix, src, base,
                              b->state, out, e))
            return -1;
    }
    return 0;
}

int zero_ckpt_master_slices(moe_zero *z, ckpt_slice_list *out, moe_err *e)
{
    moe_model *m = z->model;
    moe_backend *be = m->be;
    if (weights_needed(z, MOE_WEIGHTS_ALL, e)) /* a save reads them, a load writes them */
        return -1;
    /* split masters: the low halves here and the compute copy; else the
     * compute copy is the fp32 master (the cpu backend) */
    if (m->split_master)
        return shard_slices(z, "", SLICE_SRC_SPLIT_SHARD, z->lo, out, e);
    if (be->act_bytes(be, 1) != sizeof(real))
        return moe_errf(e, "the %s backend keeps no fp32 masters to checkpoint", be->name);
    return shard_slices(z, "", SLICE_SRC_FLAT, m->wc, out, e);
}

int zero_ckpt_slices(moe_zero *z, int for_save, ckpt_slice_list *out, moe_err *e)
{
    /* Saving and loading alike, a rank's slices are its shard: every element
     * once over the job, and a load at any EP/DP reads each rank's own part
     * (zero_ckpt_loaded then gathers the compute copy). Moments are stored as
     * the run keeps them; the reader converts stored F32 to bf16 slices and
     * back, so for_save changes nothing here. */
    (void)for_save;
    slice_src src = z->msz == sizeof(real) ? SLICE_SRC_SHARD : SLICE_SRC_SHARD_BF16;
    return zero_ckpt_master_slices(z, out, e) || shard_slices(z, "exp_avg.", src, z->m, out, e) ||
                   shard_slices(z, "exp_avg_sq.", src, z->v, out, e)
               ? -1
               : 0;
}

int zero_ckpt_loaded(moe_zero *z, moe_err *e)
{
    moe_model *m = z->model;
    moe_backend *be = m->be;
    size_t es = act_es(m);
    if (weights_needed(z, MOE_WEIGHTS_ALL, e) || be->sync(be, e))
        return moe_err_prefix(e, "loading the optimizer's shard");
    for (int k = 0; k < z->n_buckets; k++) {
        const bucket *b = &z->b[k];
        if (gather_bucket(z, b, (char *)m->wc + es * b->flat, es, e))
            return moe_err_prefix(e, "gathering loaded %s weights", b->group ? "expert" : "dense");
    }
    return 0;
}

/* moekit: sharded AdamW across data-parallel ranks (see zero.h). */
#include "zero.h"

#include "../model/model_slices.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    moe_comm *c;          /* the ranks that replicate this group */
    size_t n;             /* packed elements */
    int n_seg;
    size_t *seg_off, *seg_n; /* flat segments, packed in order */
    size_t *counts, *displs; /* shard of each member */
    size_t s0, sn;        /* this rank's shard */
    moe_param_span *spans; /* decay spans inside the shard */
    int n_spans;
    real *master, *grad, *m, *v; /* backend memory, sn each */
    act *wc;              /* scratch compute copy the adamw op writes */
} group;

struct moe_zero {
    moe_model *model;
    moe_par *par;
    group g[2];           /* 0: dense over the world, 1: experts over DP */
    real *flat_g, *flat_w, *pack; /* host, n_elems */
};

static int group_init(moe_zero *z, group *g, int experts, moe_comm *c, moe_err *e)
{
    moe_model *m = z->model;
    moe_backend *be = m->be;
    g->c = c;
    g->seg_off = calloc((size_t)m->n_params, sizeof(size_t));
    g->seg_n = calloc((size_t)m->n_params, sizeof(size_t));
    g->counts = calloc((size_t)c->size, sizeof(size_t));
    g->displs = calloc((size_t)c->size, sizeof(size_t));
    g->spans = calloc((size_t)m->n_params, sizeof(moe_param_span));
    if (!g->seg_off || !g->seg_n || !g->counts || !g->displs || !g->spans)
        return moe_errf(e, "out of memory for the optimizer shards");
    size_t packed[m->n_params];
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        if ((p->n_experts > 0) != experts)
            continue;
        packed[i] = g->n;
        /* adjacent tensors of one group form one segment */
        if (g->n_seg && g->seg_off[g->n_seg - 1] + g->seg_n[g->n_seg - 1] == p->offset)
            g->seg_n[g->n_seg - 1] += p->n;
        else {
            g->seg_off[g->n_seg] = p->offset;
            g->seg_n[g->n_seg++] = p->n;
        }
        g->n += p->n;
    }
    size_t S = (size_t)c->size, base = g->n / S, extra = g->n % S, o = 0;
    for (size_t r = 0; r < S; r++) {
        g->counts[r] = base + (r < extra);
        g->displs[r] = o;
        o += g->counts[r];
    }
    g->s0 = g->displs[c->rank];
    g->sn = g->counts[c->rank];
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        if ((p->n_experts > 0) != experts)
            continue;
        size_t a = packed[i], b = packed[i] + p->n;
        size_t lo = a > g->s0 ? a : g->s0, hi = b < g->s0 + g->sn ? b : g->s0 + g->sn;
        if (lo >= hi)
            continue;
        g->spans[g->n_spans++] = (moe_param_span){lo - g->s0, hi - lo, m->spans[i].decay};
    }
    size_t bytes = sizeof(real) * g->sn + 1;
    g->master = be->alloc(be, bytes, e);
    g->grad = g->master ? be->alloc(be, bytes, e) : NULL;
    g->m = g->grad ? be->alloc(be, bytes, e) : NULL;
    g->v = g->m ? be->alloc(be, bytes, e) : NULL;
    g->wc = g->v ? be->alloc(be, be->act_bytes(be, g->sn) + 1, e) : NULL;
    if (!g->wc)
        return moe_err_prefix(e, "optimizer shard of %zu elements", g->sn);
    be->memset0(be, g->m, bytes);
    be->memset0(be, g->v, bytes);
    return 0;
}

static void group_free(moe_backend *be, group *g)
{
    if (g->master) be->free(be, g->master);
    if (g->grad) be->free(be, g->grad);
    if (g->m) be->free(be, g->m);
    if (g->v) be->free(be, g->v);
    if (g->wc) be->free(be, g->wc);
    free(g->seg_off);
    free(g->seg_n);
    free(g->counts);
    free(g->displs);
    free(g->spans);
}

int zero_create(moe_zero **out, moe_model *m, moe_par *p, moe_err *e)
{
    moe_zero *z = calloc(1, sizeof *z);
    if (!z)
        return moe_errf(e, "out of memory");
    z->model = m;
    z->par = p;
    size_t P = m->n_elems;
    z->flat_g = malloc(sizeof(real) * P);
    z->flat_w = malloc(sizeof(real) * P);
    z->pack = malloc(sizeof(real) * P);
    if (!z->flat_g || !z->flat_w || !z->pack) {
        moe_errf(e, "out of host memory for the optimizer's staging (%zu parameters)", P);
        zero_destroy(z);
        return -1;
    }
    if (group_init(z, &z->g[0], 0, p->world, e) || group_init(z, &z->g[1], 1, p->dp, e)) {
        zero_destroy(z);
        return -1;
    }
    *out = z;
    return 0;
}

void zero_destroy(moe_zero *z)
{
    if (!z)
        return;
    for (int i = 0; i < 2; i++)
        group_free(z->model->be, &z->g[i]);
    free(z->flat_g);
    free(z->flat_w);
    free(z->pack);
    free(z);
}

static void pack(const group *g, const real *flat, real *packed)
{
    size_t o = 0;
    for (int s = 0; s < g->n_seg; s++) {
        memcpy(packed + o, flat + g->seg_off[s], sizeof(real) * g->seg_n[s]);
        o += g->seg_n[s];
    }
}

static void unpack(const group *g, const real *packed, real *flat)
{
    size_t o = 0;
    for (int s = 0; s < g->n_seg; s++) {
        memcpy(flat + g->seg_off[s], packed + o, sizeof(real) * g->seg_n[s]);
        o += g->seg_n[s];
    }
}

int zero_step(moe_zero *z, moe_adamw_hyper h, double clip, double *norm_out, moe_err *e)
{
    moe_model *m = z->model;
    moe_backend *be = m->be;
    if (model_get_host(m, m->grad, z->flat_g, e) || model_get_masters(m, z->flat_w, e))
        return -1;
    /* 1. each rank ends with the reduced gradient of its shards */
    double sq = 0;
    for (int i = 0; i < 2; i++) {
        group *g = &z->g[i];
        pack(g, z->flat_g, z->pack);
        real *shard = z->flat_g; /* flat_g is packed already: reuse it for the shard */
        if (comm_reduce_scatter_sum(g->c, z->pack, shard, g->counts, MOE_DT_REAL, e))
            return moe_err_prefix(e, "reducing %s gradients", i ? "expert" : "dense");
        if (be->upload(be, g->grad, shard, sizeof(real) * g->sn, e))
            return -1;
        sq += be->sum_squares(be, g->grad, g->sn);
        if (i == 0 && model_get_host(m, m->grad, z->flat_g, e))
            return -1; /* the expert group packs from the flat gradients again */
    }
    /* 2. the global norm: every element lives in exactly one shard */
    if (comm_allreduce_sum(z->par->world, &sq, 1, MOE_DT_DOUBLE, e))
        return moe_err_prefix(e, "gradient norm");
    double norm = sqrt(sq);
    *norm_out = norm;
    if (!isfinite(norm))
        return 0; /* every rank sees the same norm: the caller stops them all */
    double scale = 1;
    if (clip > 0 && norm > clip)
        scale = clip / (norm + 1e-6);
    h.grad_scale = (real)scale;
    /* 3. update the shards, 4. gather the new weights */
    for (int i = 0; i < 2; i++) {
        group *g = &z->g[i];
        pack(g, z->flat_w, z->pack);
        if (be->upload(be, g->master, z->pack + g->s0, sizeof(real) * g->sn, e))
            return -1;
        be->adamw(be, g->master, g->wc, g->grad, g->m, g->v, g->spans, g->n_spans, &h);
        if (be->download(be, z->flat_g, g->master, sizeof(real) * g->sn, e))
            return -1;
        if (comm_allgatherv(g->c, z->flat_g, g->sn, z->pack, g->counts, g->displs, MOE_DT_REAL,
                            e))
            return moe_err_prefix(e, "gathering updated %s weights", i ? "expert" : "dense");
        unpack(g, z->pack, z->flat_w);
    }
    return model_set_masters(m, z->flat_w, e);
}

size_t zero_moment_bytes(const moe_zero *z)
{
    return 2 * sizeof(real) * (z->g[0].sn + z->g[1].sn);
}

size_t zero_unsharded_moment_bytes(const moe_zero *z)
{
    return 2 * sizeof(real) * (z->g[0].n + z->g[1].n);
}

int zero_get_moments(moe_zero *z, real *m_host, real *v_host, moe_err *e)
{
    moe_backend *be = z->model->be;
    for (int k = 0; k < 2; k++) {
        real *dst = k ? v_host : m_host;
        for (int i = 0; i < 2; i++) {
            group *g = &z->g[i];
            if (be->download(be, z->flat_g, k ? g->v : g->m, sizeof(real) * g->sn, e) ||
                comm_allgatherv(g->c, z->flat_g, g->sn, z->pack, g->counts, g->displs,
                                MOE_DT_REAL, e))
                return moe_err_prefix(e, "gathering optimizer moments");
            unpack(g, z->pack, dst);
        }
    }
    return 0;
}

int zero_set_moments(moe_zero *z, const real *m_host, const real *v_host, moe_err *e)
{
    moe_backend *be = z->model->be;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 2; i++) {
            group *g = &z->g[i];
            pack(g, k ? v_host : m_host, z->pack);
            if (be->upload(be, k ? g->v : g->m, z->pack + g->s0, sizeof(real) * g->sn, e))
                return -1;
        }
    }
    return 0;
}

int zero_ckpt_slices(moe_zero *z, int for_save, ckpt_slice_list *out, moe_err *e)
{
    moe_model *m = z->model;
    /* saving, each rank writes the masters of its shards (every element once
     * over the job); loading, it needs every tensor it holds */
    if (!for_save && model_all_slices(m, "", SLICE_SRC_MASTERS, NULL, out, e))
        return -1;
    for (int i = 0; i < 2; i++) {
        group *g = &z->g[i];
        if ((for_save && model_packed_slices(m, i, g->s0, g->sn, "", SLICE_SRC_MASTERS, NULL, out, e)) ||
            model_packed_slices(m, i, g->s0, g->sn, "exp_avg.", SLICE_SRC_SHARD, g->m, out, e) ||
            model_packed_slices(m, i, g->s0, g->sn, "exp_avg_sq.", SLICE_SRC_SHARD, g->v, out, e))
            return -1;
    }
    return 0;
}

/* moekit: the model's state as checkpoint slices (model_slices.h). */
#include "model_slices.h"

#include <stdio.h>
#include <string.h>

#include "params.h"

static int masters_get(const ckpt_slice *s, uint64_t first, uint64_t n, void *host, moe_err *e)
{
    moe_model *m = s->owner;
    moe_backend *be = m->be;
    size_t at = s->at + (size_t)first;
    if (m->split_master)
        return be->masters_download(be, host, (const uint16_t *)m->master + at,
                                    (const char *)m->wc + be->act_bytes(be, at), (size_t)n, e);
    return be->download(be, host, (const real *)m->master + at, sizeof(real) * (size_t)n, e);
}

static int masters_put(const ckpt_slice *s, uint64_t first, uint64_t n, const void *host,
                       moe_err *e)
{
    moe_model *m = s->owner;
    moe_backend *be = m->be;
    size_t at = s->at + (size_t)first;
    char *wc = (char *)m->wc + be->act_bytes(be, at);
    if (m->split_master)
        return be->masters_upload(be, (uint16_t *)m->master + at, wc, host, (size_t)n, e);
    real *master = (real *)m->master + at;
    if (be->upload(be, master, host, sizeof(real) * (size_t)n, e))
        return -1;
    be->weights_from_master(be, wc, master, (size_t)n);
    return 0;
}

/* Split masters of a sharded optimizer: the low halves in a shard buffer
 * (base, from at), the high halves the compute copy (base2, the slice's
 * first element). */
static int split_get(const ckpt_slice *s, uint64_t first, uint64_t n, void *host, moe_err *e)
{
    moe_backend *be = s->owner;
    return be->masters_download(be, host, (const uint16_t *)s->base + s->at + first,
                                (const char *)s->base2 + be->act_bytes(be, (size_t)first),
                                (size_t)n, e);
}

static int split_put(const ckpt_slice *s, uint64_t first, uint64_t n, const void *host,
                     moe_err *e)
{
    moe_backend *be = s->owner;
    return be->masters_upload(be, (uint16_t *)s->base + s->at + first,
                              (char *)s->base2 + be->act_bytes(be, (size_t)first), host,
                              (size_t)n, e);
}

static int bf16_get(const ckpt_slice *s, uint64_t first, uint64_t n, void *host, moe_err *e)
{
    moe_backend *be = s->owner;
    return be->download(be, host, (const uint16_t *)s->base + s->at + first,
                        sizeof(uint16_t) * (size_t)n, e);
}

static int bf16_put(const ckpt_slice *s, uint64_t first, uint64_t n, const void *host, moe_err *e)
{
    moe_backend *be = s->owner;
    return be->upload(be, (uint16_t *)s->base + s->at + first, host, sizeof(uint16_t) * (size_t)n,
                      e);
}

static int host_get(const ckpt_slice *s, uint64_t first, uint64_t n, void *host, moe_err *e)
{
    memcpy(host, (const real *)s->base + s->at + first, sizeof(real) * (size_t)n);
    return 0;
}

static int host_put(const ckpt_slice *s, uint64_t first, uint64_t n, const void *host, moe_err *e)
{
    memcpy((real *)s->base + s->at + first, host, sizeof(real) * (size_t)n);
    return 0;
}

static int real_get(const ckpt_slice *s, uint64_t first, uint64_t n, void *host, moe_err *e)
{
    moe_backend *be = s->owner;
    return be->download(be, host, (const real *)s->base + s->at + first,
                        sizeof(real) * (size_t)n, e);
}

static int real_put(const ckpt_slice *s, uint64_t first, uint64_t n, const void *host, moe_err *e)
{
    moe_backend *be = s->owner;
    return be->upload(be, (real *)s->base + s->at + first, host, sizeof(real) * (size_t)n, e);
}

size_t model_packed_elems(const moe_model *m, int experts)
{
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        if ((m->params[i].n_experts > 0) == experts)
            n += m->params[i].n;
    return n;
}

/* Where a slice's data is: the source, its buffer, and the buffer index of
 * the tensor's local element a. */
typedef struct {
    slice_src src;
    void *base;
    size_t at_a;
} slice_data;

static void slice_bind(moe_model *m, const moe_param *p, size_t a, const slice_data *d,
                       ckpt_slice *s)
{
    moe_backend *be = m->be;
    s->dtype = ST_F32;
    s->owner = be;
    s->base = d->base;
    s->at = d->at_a;
    switch (d->src) {
    case SLICE_SRC_MASTERS:
        s->owner = m;
        s->get = masters_get;
        s->put = masters_put;
        s->at = p->offset + a;
        break;
    case SLICE_SRC_SPLIT_SHARD:
        s->base2 = (char *)m->wc + be->act_bytes(be, p->offset + a);
        s->get = split_get;
        s->put = split_put;
        break;
    case SLICE_SRC_HOST:
        s->get = host_get;
        s->put = host_put;
        break;
    case SLICE_SRC_FLAT_BF16:
    case SLICE_SRC_SHARD_BF16:
        s->dtype = ST_BF16;
        s->get = bf16_get;
        s->put = bf16_put;
        break;
    default:
        s->get = real_get;
        s->put = real_put;
    }
}

/* Local elements [a, b) of tensor p, one slice per expert; d->at_a is the
 * buffer index of element a. */
static int tensor_slices(moe_model *m, const moe_param *p, size_t a, size_t b, const char *prefix,
                         slice_data d, ckpt_slice_list *out, moe_err *e)
{
    size_t per = p->n_experts > 0 ? params_matrix_elems(p) : p->n;
    while (a < b) {
        size_t x = a / per, in = a % per, k = per - in < b - a ? per - in : b - a;
        ckpt_slice s = {0};
        char name[160];
        model_param_name(m, p, (int)x, name, sizeof name);
        if (snprintf(s.name, sizeof s.name, "%s%s", prefix, name) >= (int)sizeof s.name)
            return moe_errf(e, "tensor name %s%s too long", prefix, name);
        s.ndim = p->ndim;
        for (int dd = 0; dd < p->ndim; dd++)
            s.shape[dd] = p->shape[dd];
        s.start = in;
        s.count = k;
        slice_bind(m, p, a, &d, &s);
        if (ckpt_slices_add(out, &s, e))
            return -1;
        a += k;
        d.at_a += k;
    }
    return 0;
}

static int is_flat(slice_src src)
{
    return src == SLICE_SRC_MASTERS || src == SLICE_SRC_FLAT || src == SLICE_SRC_FLAT_BF16 ||
           src == SLICE_SRC_HOST;
}

int model_flat_slices(moe_model *m, size_t flat, size_t n, const char *prefix, slice_src src,
                      void *base, size_t base_at, ckpt_slice_list *out, moe_err *e)
{
    _Static_assert(sizeof(real) == 4, "slices store reals as F32");
    size_t hi = flat + n;
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        size_t a = flat > p->offset ? flat : p->offset;
        size_t b = hi < p->offset + p->n ? hi : p->offset + p->n;
        if (a >= b)
            continue;
        slice_data d = {src, base, is_flat(src) ? a : base_at + (a - flat)};
        if (tensor_slices(m, p, a - p->offset, b - p->offset, prefix, d, out, e))
            return -1;
    }
    return 0;
}

int model_packed_slices(moe_model *m, int experts, size_t lo, size_t n, const char *prefix,
                        slice_src src, void *base, ckpt_slice_list *out, moe_err *e)
{
    _Static_assert(sizeof(real) == 4, "slices store reals as F32");
    size_t pos = 0, hi = lo + n;
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        if ((p->n_experts > 0) != experts)
            continue;
        size_t a = lo > pos ? lo : pos, b = hi < pos + p->n ? hi : pos + p->n;
        slice_data d = {src, base, is_flat(src) ? p->offset + (a - pos) : a - lo};
        if (a < b && tensor_slices(m, p, a - pos, b - pos, prefix, d, out, e))
            return -1;
        pos += p->n;
    }
    return 0;
}

int model_all_slices(moe_model *m, const char *prefix, slice_src src, void *base,
                     ckpt_slice_list *out, moe_err *e)
{
    for (int experts = 0; experts < 2; experts++)
        if (model_packed_slices(m, experts, 0, model_packed_elems(m, experts), prefix, src, base,
                                out, e))
            return -1;
    return 0;
}

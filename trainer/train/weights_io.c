#include "weights_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/params.h"

/* Hugging Face tensors of the model: one per matrix (per expert for expert
 * tensors). Calls fn for each with its name, shape and element offset. */
typedef int (*each_fn)(void *ctx, const char *name, int ndim, const int64_t *shape, size_t offset,
                       size_t n, moe_err *e);

static int foreach_tensor(const moe_model *m, each_fn fn, void *ctx, moe_err *e)
{
    char name[192];
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        int nx = p->n_experts > 0 ? p->n_experts : 1;
        size_t per = params_matrix_elems(p);
        for (int x = 0; x < nx; x++) {
            model_param_name(m, p, x, name, sizeof name);
            if (fn(ctx, name, p->ndim, p->shape, p->offset + (size_t)x * per, per, e))
                return -1;
        }
    }
    return 0;
}

typedef struct {
    st_tensor *t;
    char (*names)[256];
    int n, cap;
    const char *prefix;
    const real *host;
} write_ctx;

static int collect(void *ctx_, const char *name, int ndim, const int64_t *shape, size_t offset,
                   size_t n, moe_err *e)
{
    write_ctx *c = ctx_;
    if (c->n >= c->cap)
        return moe_errf(e, "internal: tensor table overflow");
    snprintf(c->names[c->n], sizeof c->names[c->n], "%s%s", c->prefix, name);
    st_tensor *t = &c->t[c->n++];
    memset(t, 0, sizeof *t);
    t->name = c->names[c->n - 1];
    t->dtype = ST_F32;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->data = c->host + offset;
    t->data_is_f32 = 0;
    return 0;
}

static int count_tensors(const moe_model *m)
{
    int n = 0;
    for (int i = 0; i < m->n_params; i++)
        n += m->params[i].n_experts > 0 ? m->params[i].n_experts : 1;
    return n;
}

int weights_write(const moe_model *m, const char *path, int n_buffers, const char *const *prefix,
                  const real *const *host, const st_meta *meta, int n_meta, moe_err *e)
{
    _Static_assert(sizeof(real) == sizeof(float), "checkpoints store the fp32 masters as written");
    int per = count_tensors(m), cap = per * n_buffers;
    write_ctx c = {calloc((size_t)cap, sizeof(st_tensor)), calloc((size_t)cap, 256), 0, cap, 0, 0};
    if (!c.t || !c.names) {
        free(c.t);
        free(c.names);
        return moe_errf(e, "out of memory writing %s", path);
    }
    int rc = 0;
    for (int b = 0; b < n_buffers && !rc; b++) {
        c.prefix = prefix[b];
        c.host = host[b];
        rc = foreach_tensor(m, collect, &c, e);
    }
    if (!rc)
        rc = st_write(path, c.t, c.n, meta, n_meta, e);
    free(c.t);
    free(c.names);
    return rc;
}

static int hf_read(void *src, const char *name, int ndim, const int64_t *shape, float *dst,
                   moe_err *e)
{
    return hf_dir_read_f32(src, name, ndim, shape, dst, e);
}
static int hf_count(void *src) { return hf_dir_count(src); }
static int st_read(void *src, const char *name, int ndim, const int64_t *shape, float *dst,
                   moe_err *e)
{
    return st_read_f32(src, name, ndim, shape, dst, e);
}
static int st_cnt(void *src) { return st_count(src); }

weights_source weights_source_hf(hf_dir *d, const char *path)
{
    return (weights_source){d, hf_read, hf_count, path};
}

weights_source weights_source_st(st_file *f, const char *path)
{
    return (weights_source){f, st_read, st_cnt, path};
}

typedef struct {
    weights_source *src;
    const char *prefix;
    real *host;
    int found;
} read_ctx;

static int read_one(void *ctx_, const char *name, int ndim, const int64_t *shape, size_t offset,
                    size_t n, moe_err *e)
{
    read_ctx *c = ctx_;
    char full[320];
    snprintf(full, sizeof full, "%s%s", c->prefix, name);
    if (c->src->read_f32(c->src->src, full, ndim, shape, c->host + offset, e))
        return moe_err_prefix(e, "%s", c->src->what);
    c->found++;
    return 0;
}

int weights_read(const moe_model *m, weights_source src, const char *prefix, int exact, real *host,
                 moe_err *e)
{
    read_ctx c = {&src, prefix, host, 0};
    if (foreach_tensor(m, read_one, &c, e))
        return -1;
    if (exact && src.count(src.src) != c.found)
        return moe_errf(e,
                        "%s holds %d tensors but this model has %d: it was written for another "
                        "model shape",
                        src.what, src.count(src.src), c.found);
    return 0;
}

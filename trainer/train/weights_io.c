#include "weights_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/shard_read.h"
#include "../config/hf_config.h"
#include "../model/dims_config.h"
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

int weights_cfg_matches(const moe_model_cfg *a, const moe_model_cfg *b, const char *path,
                        moe_err *e)
{
#define SAME(field, key)                                                                           \
    if (a->field != b->field)                                                                      \
        return moe_errf(e, "%s has %s = %g but the config says model.%s = %g", path, key,          \
                        (double)a->field, #field, (double)b->field);
    SAME(hidden_size, "hidden_size");
    SAME(num_layers, "num_hidden_layers");
    SAME(num_heads, "num_attention_heads");
    SAME(num_kv_heads, "num_key_value_heads");
    SAME(num_experts, "num_local_experts");
    SAME(top_k, "num_experts_per_tok");
    SAME(intermediate_size, "intermediate_size");
    SAME(vocab_size, "vocab_size");
#undef SAME
    int hda = a->head_dim ? a->head_dim : a->hidden_size / a->num_heads;
    int hdb = b->head_dim ? b->head_dim : b->hidden_size / b->num_heads;
    if (hda != hdb)
        return moe_errf(e, "%s has head_dim = %d but the config says %d", path, hda, hdb);
    return 0;
}

typedef struct {
    const shard_set *s;
    const char *dir;
    int found;
} check_ctx;

static int check_one(void *ctx_, const char *name, int ndim, const int64_t *shape, size_t offset,
                     size_t n, moe_err *e)
{
    check_ctx *c = ctx_;
    const shard_tensor *t = shard_set_find(c->s, name);
    if (!t)
        return moe_errf(e, "%s: no tensor %s, which its config.json implies", c->dir, name);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->shape[d] == shape[d];
    if (!same) {
        char a[64] = "", b[64] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", (long long)t->shape[d]);
        for (int d = 0; d < ndim; d++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)shape[d]);
        return moe_errf(e, "%s: %s is [%s] but its config.json implies [%s]: the weights and "
                           "config.json disagree", c->dir, name, a, b);
    }
    c->found++;
    return 0;
}

static int is_optimizer_tensor(const char *name)
{
    return !strncmp(name, "exp_avg.", 8) || !strncmp(name, "exp_avg_sq.", 11);
}

/* Hugging Face tensors a model of cfg's shape with `layers` layers has. */
static int tensors_of(const moe_model_cfg *cfg, int layers, long long *out, moe_err *e)
{
    moe_model_cfg c = *cfg;
    c.num_layers = layers;
    moe_model m;
    memset(&m, 0, sizeof m);
    m.d = model_dims_from_config(&c);
    m.ep_size = 1;
    m.E_local = m.d.E;
    if (params_layout(&m, e))
        return -1;
    *out = 0;
    for (int i = 0; i < m.n_params; i++)
        *out += m.params[i].n_experts > 0 ? m.params[i].n_experts : 1;
    free(m.params);
    free(m.spans);
    return 0;
}

/* The count of tensors config.json implies against the count the
 * safetensors headers hold, before the model's layout is made: that layout
 * grows with num_hidden_layers, and a config.json claiming millions of
 * layers made it gigabytes before a single tensor was compared. The
 * headers' tensors are bounded by the files themselves. */
static int check_tensor_count(const shard_set *s, const moe_model_cfg *cfg, const char *dir, int exact,
                              moe_err *e)
{
    long long one, two;
    if (tensors_of(cfg, 1, &one, e) || tensors_of(cfg, 2, &two, e))
        return -1;
    long long per_layer = two - one, implied = one + per_layer * (cfg->num_layers - 1), held = 0;
    for (int i = 0; i < shard_set_count(s); i++)
        held += !is_optimizer_tensor(shard_set_tensor(s, i)->name);
    if (held < implied || (exact && held != implied))
        return moe_errf(e, "%s holds %lld model tensors but its config.json (%d layers of %lld, %d "
                        "experts) implies %lld: the weights and config.json disagree", dir, held,
                        cfg->num_layers, per_layer, cfg->num_experts, implied);
    return 0;
}

int weights_check(const char *dir, const moe_model_cfg *want, moe_model_cfg *got, int exact,
                  moe_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    memset(got, 0, sizeof *got);
    if (hf_config_read(path, got, e) || (want && weights_cfg_matches(got, want, path, e)))
        return -1;
    moe_model full;
    memset(&full, 0, sizeof full);
    full.d = model_dims_from_config(got);
    full.ep_size = 1;
    full.E_local = full.d.E;
    shard_set *s = NULL;
    int rc = shard_set_open(dir, &s, e);
    if (!rc)
        rc = check_tensor_count(s, got, dir, exact, e);
    if (!rc)
        rc = params_layout(&full, e);
    check_ctx c = {s, dir, 0};
    if (!rc)
        rc = foreach_tensor(&full, check_one, &c, e);
    if (!rc && exact) {
        int model_tensors = 0;
        for (int i = 0; i < shard_set_count(s); i++)
            model_tensors += !is_optimizer_tensor(shard_set_tensor(s, i)->name);
        if (model_tensors != c.found)
            rc = moe_errf(e, "%s holds %d tensors but this model has %d: it was written for "
                             "another model shape", dir, model_tensors, c.found);
    }
    shard_set_close(s);
    free(full.params);
    free(full.spans);
    return rc;
}

/* moekit: the parameter table: Hugging Face Mixtral names and shapes, and
 * where each tensor lies in the flat buffer. Below the model (model.c and
 * model_init.c call it; it calls neither). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "params.h"

void model_count_params(const moe_dims *d, int64_t *total, int64_t *active)
{
    int64_t C = d->C, attn = C * d->NH * d->HD * 2 + C * d->NKV * d->HD * 2;
    int64_t expert = (int64_t)3 * d->I * C;
    int64_t per_layer = 2 * C + attn + (int64_t)d->E * C + d->E * expert;
    int64_t t = (int64_t)d->V * C * 2 + C + d->L * per_layer;
    *total = t;
    *active = t - (int64_t)d->L * (d->E - d->K) * expert;
}

static moe_param *add_param(moe_model *m, size_t *off, moe_param_kind kind, int layer,
                            int n_experts, const char *name, int64_t rows, int64_t cols)
{
    moe_param *p = &m->params[m->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->layer = layer;
    p->n_experts = n_experts;
    p->ndim = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols > 0 ? cols : 0;
    p->offset = *off;
    p->n = (size_t)rows * (cols > 0 ? cols : 1) * (n_experts > 0 ? n_experts : 1);
    *off += p->n;
    return p;
}

int params_layout(moe_model *m, moe_err *e)
{
    const moe_dims *d = &m->d;
    int max = 3 + d->L * 10;
    m->params = calloc((size_t)max, sizeof *m->params);
    if (!m->params)
        return moe_errf(e, "out of memory for the parameter table");
    size_t off = 0;
    char name[128];
    add_param(m, &off, MOE_P_EMBED, -1, 0, "model.embed_tokens.weight", d->V, d->C);
    for (int l = 0; l < d->L; l++) {
#define LNAME(fmt) (snprintf(name, sizeof name, "model.layers.%d." fmt, l), name)
        add_param(m, &off, MOE_P_LN1, l, 0, LNAME("input_layernorm.weight"), d->C, 0);
        add_param(m, &off, MOE_P_Q, l, 0, LNAME("self_attn.q_proj.weight"), d->NH * d->HD, d->C);
        add_param(m, &off, MOE_P_K, l, 0, LNAME("self_attn.k_proj.weight"), d->NKV * d->HD, d->C);
        add_param(m, &off, MOE_P_V, l, 0, LNAME("self_attn.v_proj.weight"), d->NKV * d->HD, d->C);
        add_param(m, &off, MOE_P_O, l, 0, LNAME("self_attn.o_proj.weight"), d->C, d->NH * d->HD);
        add_param(m, &off, MOE_P_LN2, l, 0, LNAME("post_attention_layernorm.weight"), d->C, 0);
        add_param(m, &off, MOE_P_GATE, l, 0, LNAME("block_sparse_moe.gate.weight"), d->E, d->C);
        add_param(m, &off, MOE_P_W1, l, m->E_local, LNAME("block_sparse_moe.experts.%%d.w1.weight"),
                  d->I, d->C);
        add_param(m, &off, MOE_P_W3, l, m->E_local, LNAME("block_sparse_moe.experts.%%d.w3.weight"),
                  d->I, d->C);
        add_param(m, &off, MOE_P_W2, l, m->E_local, LNAME("block_sparse_moe.experts.%%d.w2.weight"),
                  d->C, d->I);
#undef LNAME
    }
    add_param(m, &off, MOE_P_NORM, -1, 0, "model.norm.weight", d->C, 0);
    add_param(m, &off, MOE_P_HEAD, -1, 0, "lm_head.weight", d->V, d->C);
    m->n_elems = off;
    m->spans = calloc((size_t)m->n_params, sizeof *m->spans);
    if (!m->spans)
        return moe_errf(e, "out of memory for the parameter table");
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        m->spans[i].offset = p->offset;
        m->spans[i].n = p->n;
        /* no weight decay on the RMSNorm gains, as is usual for transformers */
        m->spans[i].decay = p->ndim == 2;
    }
    return 0;
}

const moe_param *params_find(const moe_model *m, moe_param_kind kind, int layer)
{
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].kind == kind && m->params[i].layer == layer)
            return &m->params[i];
    return NULL;
}

void model_param_name(const moe_model *m, const moe_param *p, int x, char *out, size_t n)
{
    if (p->n_experts > 0) {
        /* the pattern holds the layer already and %d for the expert */
        snprintf(out, n, p->name, m->e0 + x);
    } else {
        snprintf(out, n, "%s", p->name);
    }
}

size_t params_matrix_elems(const moe_param *p)
{
    return (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
}

/* moekit: validation of a whole configuration: every key's range, then the
 * rules that tie keys together. A failing rule names each key involved and,
 * when the loader knows it, where that key was set. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../data/data.h" /* MOE_TOK_VOCAB: the tokenizer the model must cover */
#include "config_scale.h"
#include "config_schema.h"
#include "runtime_defaults.h"
#include "../../common/layout.h"

typedef struct {
    const moe_config *cfg;
    const char *const *origin; /* per schema row, or NULL */
    moe_err *e;
} rule_ctx;

/* Append " [a from x.cfg:3; b from the built-in default]" for the keys. */
static void add_origins(const rule_ctx *r, const char *const *keys, int n)
{
    if (!r->origin || !r->e)
        return;
    char buf[MOE_ERR_LEN];
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        const config_key *k = config_key_find(keys[i]);
        const char *where = k ? r->origin[k - config_keys] : NULL;
        used += (size_t)snprintf(buf + used, used < sizeof buf ? sizeof buf - used : 0,
                                 "%s%s from %s", i ? "; " : " [", keys[i],
                                 where ? where : "the built-in default");
        if (used >= sizeof buf)
            break;
    }
    size_t len = strlen(r->e->msg);
    snprintf(r->e->msg + len, sizeof r->e->msg - len, "%s]", buf);
}

__attribute__((format(printf, 4, 5))) static int violation(const rule_ctx *r, const char *key_a,
                                                           const char *key_b, const char *fmt,
                                                           ...)
{
    if (r->e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->e->msg, sizeof r->e->msg, fmt, ap);
        va_end(ap);
    }
    const char *keys[2] = {key_a, key_b};
    add_origins(r, keys, key_b ? 2 : 1);
    return -1;
}

static int check_model(const rule_ctx *r)
{
    const moe_model_cfg *m = &r->cfg->model;
    /* every id the genomic tokenizer emits must have an embedding row */
    if (m->vocab_size < MOE_TOK_VOCAB)
        return violation(r, "model.vocab_size", NULL,
                         "model.vocab_size = %d is smaller than the genomic tokenizer's %d "
                         "byte-level ids (EOS 0, PAD 1, BOS 2, UNK 3, the bases as bytes)",
                         m->vocab_size, MOE_TOK_VOCAB);
    if (m->num_heads % m->num_kv_heads)
        return violation(r, "model.num_kv_heads", "model.num_heads",
                         "model.num_kv_heads = %d must divide model.num_heads = %d "
                         "(each key/value head serves a whole group of query heads)",
                         m->num_kv_heads, m->num_heads);
    int head_dim = m->head_dim;
    if (head_dim == 0) {
        if (m->hidden_size % m->num_heads)
            return violation(r, "model.hidden_size", "model.num_heads",
                             "model.head_dim = 0 means hidden_size / num_heads, but "
                             "model.hidden_size = %d is not divisible by model.num_heads = %d; "
                             "set model.head_dim or change the sizes",
                             m->hidden_size, m->num_heads);
        head_dim = m->hidden_size / m->num_heads;
    }
    if (head_dim % 2)
        return violation(r, m->head_dim ? "model.head_dim" : "model.hidden_size",
                         m->head_dim ? NULL : "model.num_heads",
                         "the head width is %d; RoPE rotates pairs of dimensions, so it must "
                         "be even",
                         head_dim);
    if (m->top_k > m->num_experts)
        return violation(r, "model.top_k", "model.num_experts",
                         "model.top_k = %d must not exceed model.num_experts = %d", m->top_k,
                         m->num_experts);
    return 0;
}

static int check_training(const rule_ctx *r)
{
    const moe_config *c = r->cfg;
    if (c->train.seq_length > c->model.max_position_embeddings)
        return violation(r, "train.seq_length", "model.max_position_embeddings",
                         "train.seq_length = %d exceeds model.max_position_embeddings = %d",
                         c->train.seq_length, c->model.max_position_embeddings);
    /* scheduler.warmup_steps > train.steps is allowed: the trainer clamps
     * it to train.steps with a note, so a quick run needs one override */
    if (c->logger.tensorboard && !c->logger.run_dir[0])
        return violation(r, "logger.tensorboard", "logger.run_dir",
                         "logger.tensorboard is true but logger.run_dir is empty: name the "
                         "directory for the event files");
    if (c->checkpoint.resume_from_checkpoint && !c->checkpoint.ckpt_dir[0])
        return violation(r, "checkpoint.resume_from_checkpoint", "checkpoint.ckpt_dir",
                         "checkpoint.resume_from_checkpoint is true but checkpoint.ckpt_dir is "
                         "empty: name the directory to resume from");
    return 0;
}

static int check_parallel(const rule_ctx *r)
{
    const moe_config *c = r->cfg;
    if (layout_rule(0, c->parallel.ep, c->parallel.dp, c->model.num_experts, NULL) ==
        MOE_LAYOUT_EP_SPLITS_EXPERTS)
        return violation(r, "parallel.ep", "model.num_experts",
                         "parallel.ep = %d must divide model.num_experts = %d "
                         "(every rank of an expert-parallel group holds the same number of "
                         "experts)",
                         c->parallel.ep, c->model.num_experts);
    moe_err scratch; /* the message names its keys */
    return config_scale_check(c, c->parallel.ep, c->parallel.dp, r->e ? r->e : &scratch);
}

static int check_runtime(const rule_ctx *r)
{
    const moe_runtime_cfg *rt = &r->cfg->runtime;
    int mask;
    moe_err scratch;
    if (config_fp8_gemms_mask(rt->fp8_gemms, &mask, r->e ? r->e : &scratch)) {
        const char *keys[1] = {"runtime.fp8_gemms"};
        add_origins(r, keys, 1);
        return -1;
    }
    if (rt->fp8_chunk_rows % MOE_CHUNK_ROWS_ALIGN)
        return violation(r, "runtime.fp8_chunk_rows", NULL,
                         "runtime.fp8_chunk_rows = %d must be a multiple of 128 (the chunks "
                         "cut no 1x128 scale block along the tokens)",
                         rt->fp8_chunk_rows);
    if (rt->expert_chunk_rows % MOE_CHUNK_ROWS_ALIGN)
        return violation(r, "runtime.expert_chunk_rows", NULL,
                         "runtime.expert_chunk_rows = %d must be a multiple of 128 (the chunks "
                         "cut no 1x128 scale block along the tokens)",
                         rt->expert_chunk_rows);
    return 0;
}

int config_validate_traced(const moe_config *cfg, const char *const *origin, moe_err *e)
{
    rule_ctx r = {cfg, origin, e};
    for (size_t i = 0; i < config_key_count; i++)
        if (config_key_check(&config_keys[i], cfg, e)) {
            const char *keys[1] = {config_keys[i].path};
            add_origins(&r, keys, 1);
            return -1;
        }
    if (check_model(&r) || check_training(&r) || check_parallel(&r) || check_runtime(&r))
        return -1;
    return 0;
}

int config_validate(const moe_config *cfg, moe_err *e)
{
    return config_validate_traced(cfg, NULL, e);
}

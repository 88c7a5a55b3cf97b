#include "hf_config.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config_scale.h"
#include "../ckpt/fsio.h"
#include "../ckpt/json.h"

/* MixtralConfig's defaults for keys a config.json may leave out. */
#define HF_DEFAULT_MAX_POSITIONS (4096 * 32)
#define HF_DEFAULT_RMS_NORM_EPS 1e-5
#define HF_DEFAULT_ROPE_THETA 1e6
#define HF_DEFAULT_ROUTER_AUX_LOSS_COEF 0.001
#define HF_DEFAULT_INITIALIZER_RANGE 0.02

typedef struct {
    const char *path;
    moe_err *e;
} ctx;

/* "path: line L column C: what" for a value, "path: what" without one. */
static int fail(const ctx *c, const json_value *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(const ctx *c, const json_value *at, const char *fmt, ...)
{
    char what[MOE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (at)
        return moe_errf(c->e, "%s: line %d column %d: %s", c->path, at->line, at->column, what);
    return moe_errf(c->e, "%s: %s", c->path, what);
}

static int is_absent(const json_value *v) { return !v || v->type == JSON_NULL; }

/* An integer in min..max; absent/null gives dflt, or an error when
 * required. max is the config schema's limit for the same model.* key
 * (config_scale.h): a config.json claiming more is refused here, before
 * anything is sized by it. */
static int get_int(const ctx *c, const json_value *root, const char *key, int required, int dflt, int min,
                   int max, const char *model_key, int *out)
{
    const json_value *v = json_get(root, key);
    if (is_absent(v)) {
        if (required)
            return fail(c, NULL, "missing \"%s\" (required for a Mixtral model)", key);
        *out = dflt;
        return 0;
    }
    if (v->type != JSON_NUMBER || !v->num.is_integer)
        return fail(c, v, "\"%s\" must be an integer, got %s", key,
                    v->type == JSON_NUMBER ? "a fractional number" : json_type_name(v->type));
    if (v->num.integer < min || v->num.integer > max)
        return fail(c, v, "\"%s\" = %lld is out of range (%d..%d, the limit of %s)", key,
                    (long long)v->num.integer, min, max, model_key);
    *out = (int)v->num.integer;
    return 0;
}

/* A number > 0 (positive) or >= 0; absent/null gives dflt. */
static int get_double(const ctx *c, const json_value *v, const char *key, double dflt, int positive, double *out)
{
    if (is_absent(v)) {
        *out = dflt;
        return 0;
    }
    if (v->type != JSON_NUMBER)
        return fail(c, v, "\"%s\" must be a number, got %s", key, json_type_name(v->type));
    if (positive ? !(v->num.value > 0) : !(v->num.value >= 0))
        return fail(c, v, "\"%s\" = %g must be %s", key, v->num.value, positive ? "positive" : "non-negative");
    *out = v->num.value;
    return 0;
}

static int get_bool(const ctx *c, const json_value *root, const char *key, int dflt, int *out)
{
    const json_value *v = json_get(root, key);
    if (is_absent(v)) {
        *out = dflt;
        return 0;
    }
    if (v->type != JSON_BOOL)
        return fail(c, v, "\"%s\" must be true or false, got %s", key, json_type_name(v->type));
    *out = v->boolean;
    return 0;
}

/* rope_parameters (5.x) or rope_scaling (4.x, normally null): only plain
 * RoPE; its rope_theta, if any, goes to *theta. */
static int read_rope_block(const ctx *c, const json_value *root, const char *key, double *theta, int *has_theta)
{
    const json_value *v = json_get(root, key);
    if (is_absent(v))
        return 0;
    if (v->type != JSON_OBJECT)
        return fail(c, v, "\"%s\" must be an object or null, got %s", key, json_type_name(v->type));
    const json_value *type = json_get(v, "rope_type");
    if (!type)
        type = json_get(v, "type"); /* the older spelling */
    if (type && type->type != JSON_STRING)
        return fail(c, type, "\"%s\".rope_type must be a string, got %s", key, json_type_name(type->type));
    if (type && strcmp(type->str.s, "default") != 0)
        return fail(c, type, "\"%s\" has rope_type \"%.60s\": moekit implements only plain RoPE (\"default\")", key,
                    type->str.s);
    const json_value *prf = json_get(v, "partial_rotary_factor");
    if (!is_absent(prf) && (prf->type != JSON_NUMBER || prf->num.value != 1.0))
        return fail(c, prf, "\"%s\".partial_rotary_factor must be 1 (moekit rotates the whole head)", key);
    const json_value *t = json_get(v, "rope_theta");
    if (!is_absent(t)) {
        if (get_double(c, t, "rope_theta", 0, 1, theta) != 0)
            return -1;
        *has_theta = 1;
    }
    return 0;
}

static int read_rope_theta(const ctx *c, const json_value *root, double *out)
{
    double top = 0, inner = 0, legacy = 0;
    int has_top = 0, has_inner = 0, has_legacy = 0;
    const json_value *v = json_get(root, "rope_theta");
    if (!is_absent(v)) {
        if (get_double(c, v, "rope_theta", 0, 1, &top) != 0)
            return -1;
        has_top = 1;
    }
    if (read_rope_block(c, root, "rope_parameters", &inner, &has_inner) != 0 ||
        read_rope_block(c, root, "rope_scaling", &legacy, &has_legacy) != 0)
        return -1;
    double found[3] = {inner, legacy, top};
    int has[3] = {has_inner, has_legacy, has_top};
    const char *where[3] = {"rope_parameters.rope_theta", "rope_scaling.rope_theta", "rope_theta"};
    int first = -1;
    for (int i = 0; i < 3; i++) {
        if (!has[i])
            continue;
        if (first < 0)
            first = i;
        else if (found[i] != found[first])
            return fail(c, NULL, "%s = %g and %s = %g disagree", where[first], found[first], where[i], found[i]);
    }
    *out = first < 0 ? HF_DEFAULT_ROPE_THETA : found[first];
    return 0;
}

/* What moekit's model cannot represent, refused by name. */
static int check_unsupported(const ctx *c, const json_value *root)
{
    const json_value *v = json_get(root, "model_type");
    if (!v)
        return fail(c, NULL, "missing \"model_type\" (expected \"mixtral\")");
    if (v->type != JSON_STRING || strcmp(v->str.s, "mixtral") != 0)
        return fail(c, v, "\"model_type\" is %s%.60s%s; moekit reads only \"mixtral\"",
                    v->type == JSON_STRING ? "\"" : "", v->type == JSON_STRING ? v->str.s : json_type_name(v->type),
                    v->type == JSON_STRING ? "\"" : "");
    v = json_get(root, "sliding_window");
    if (!is_absent(v))
        return fail(c, v, "\"sliding_window\" is set; moekit attends over the whole sequence (it must be null)");
    int tied = 0;
    if (get_bool(c, root, "tie_word_embeddings", 0, &tied) != 0)
        return -1;
    if (tied)
        return fail(c, json_get(root, "tie_word_embeddings"),
                    "\"tie_word_embeddings\" is true; moekit's LM head is a separate matrix (it must be false)");
    v = json_get(root, "hidden_act");
    if (!is_absent(v) && (v->type != JSON_STRING || (strcmp(v->str.s, "silu") && strcmp(v->str.s, "swish"))))
        return fail(c, v, "\"hidden_act\" must be \"silu\" (moekit's experts are SwiGLU)");
    v = json_get(root, "quantization_config");
    if (!is_absent(v))
        return fail(c, v, "\"quantization_config\" is set; moekit loads only unquantized weights");
    return 0;
}

int hf_config_read(const char *path, moe_model_cfg *out, moe_err *e)
{
    ctx c = {path, e};
    json_doc *doc;
    if (json_parse_file(path, &(json_limits){16 << 20, 32}, &doc, e) != 0)
        return -1;
    const json_value *root = json_root(doc);
    moe_model_cfg m = *out;
    int rc = -1;
    if (root->type != JSON_OBJECT) {
        fail(&c, root, "expected a JSON object, got %s", json_type_name(root->type));
        goto done;
    }
    if (check_unsupported(&c, root) != 0)
        goto done;
    if (get_int(&c, root, "hidden_size", 1, 0, 1, MOE_MAX_HIDDEN, "model.hidden_size", &m.hidden_size) != 0 ||
        get_int(&c, root, "intermediate_size", 1, 0, 1, MOE_MAX_INTERMEDIATE, "model.intermediate_size",
                &m.intermediate_size) != 0 ||
        get_int(&c, root, "num_hidden_layers", 1, 0, 1, MOE_MAX_LAYERS, "model.num_layers", &m.num_layers) != 0 ||
        get_int(&c, root, "num_attention_heads", 1, 0, 1, MOE_MAX_HEADS, "model.num_heads", &m.num_heads) != 0 ||
        get_int(&c, root, "num_key_value_heads", 0, m.num_heads, 1, MOE_MAX_HEADS, "model.num_kv_heads",
                &m.num_kv_heads) != 0 ||
        get_int(&c, root, "num_local_experts", 1, 0, 1, MOE_MAX_EXPERTS, "model.num_experts", &m.num_experts) != 0 ||
        get_int(&c, root, "num_experts_per_tok", 1, 0, 1, MOE_MAX_EXPERTS, "model.top_k", &m.top_k) != 0 ||
        get_int(&c, root, "vocab_size", 1, 0, 1, MOE_MAX_VOCAB, "model.vocab_size", &m.vocab_size) != 0 ||
        get_int(&c, root, "max_position_embeddings", 0, HF_DEFAULT_MAX_POSITIONS, 1, MOE_MAX_POSITIONS,
                "model.max_position_embeddings", &m.max_position_embeddings) != 0)
        goto done;
    if (m.num_heads % m.num_kv_heads != 0) {
        fail(&c, json_get(root, "num_key_value_heads"), "\"num_key_value_heads\" = %d does not divide \"num_attention_heads\" = %d",
             m.num_kv_heads, m.num_heads);
        goto done;
    }
    if (m.top_k > m.num_experts) {
        fail(&c, json_get(root, "num_experts_per_tok"), "\"num_experts_per_tok\" = %d is more than \"num_local_experts\" = %d",
             m.top_k, m.num_experts);
        goto done;
    }
    if (is_absent(json_get(root, "head_dim")) && m.hidden_size % m.num_heads != 0) {
        fail(&c, NULL, "no \"head_dim\", and \"hidden_size\" = %d is not a multiple of \"num_attention_heads\" = %d",
             m.hidden_size, m.num_heads);
        goto done;
    }
    if (get_int(&c, root, "head_dim", 0, m.hidden_size / m.num_heads, 1, MOE_MAX_HEAD_DIM, "model.head_dim",
                &m.head_dim) != 0 ||
        get_double(&c, json_get(root, "rms_norm_eps"), "rms_norm_eps", HF_DEFAULT_RMS_NORM_EPS, 1, &m.rms_norm_eps) != 0 ||
        get_double(&c, json_get(root, "router_aux_loss_coef"), "router_aux_loss_coef", HF_DEFAULT_ROUTER_AUX_LOSS_COEF, 0,
                   &m.router_aux_loss_coef) != 0 ||
        get_double(&c, json_get(root, "initializer_range"), "initializer_range", HF_DEFAULT_INITIALIZER_RANGE, 0,
                   &m.init_std) != 0 ||
        read_rope_theta(&c, root, &m.rope_theta) != 0)
        goto done;
    *out = m;
    rc = 0;
done:
    json_free(doc);
    return rc;
}

static void kv_int(json_writer *w, const char *k, int64_t v) { jw_key(w, k); jw_int(w, v); }
static void kv_double(json_writer *w, const char *k, double v) { jw_key(w, k); jw_double(w, v); }
static void kv_string(json_writer *w, const char *k, const char *v) { jw_key(w, k); jw_string(w, v); }
static void kv_bool(json_writer *w, const char *k, int v) { jw_key(w, k); jw_bool(w, v); }

int hf_config_write(const char *path, const moe_model_cfg *cfg, moe_err *e)
{
    return hf_config_write_as(path, cfg, "float32", e);
}

int hf_config_write_as(const char *path, const moe_model_cfg *cfg, const char *torch_dtype, moe_err *e)
{
    const struct {
        const char *name;
        int v;
    } sizes[] = {
        {"hidden_size", cfg->hidden_size},     {"intermediate_size", cfg->intermediate_size},
        {"num_layers", cfg->num_layers},       {"num_heads", cfg->num_heads},
        {"num_kv_heads", cfg->num_kv_heads},   {"num_experts", cfg->num_experts},
        {"top_k", cfg->top_k},                 {"vocab_size", cfg->vocab_size},
        {"max_position_embeddings", cfg->max_position_embeddings},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i].v <= 0)
            return moe_errf(e, "%s: cannot write: model.%s = %d must be positive", path, sizes[i].name, sizes[i].v);
    if (cfg->head_dim < 0 || (cfg->head_dim == 0 && cfg->hidden_size % cfg->num_heads != 0))
        return moe_errf(e, "%s: cannot write: model.head_dim = %d (hidden_size %d, num_heads %d)", path,
                        cfg->head_dim, cfg->hidden_size, cfg->num_heads);
    if (!(cfg->rope_theta > 0) || !(cfg->rms_norm_eps > 0) || !(cfg->router_aux_loss_coef >= 0) ||
        !(cfg->init_std >= 0) || !isfinite(cfg->rope_theta) || !isfinite(cfg->router_aux_loss_coef) ||
        !isfinite(cfg->init_std))
        return moe_errf(e, "%s: cannot write: rope_theta %g and rms_norm_eps %g must be positive, "
                           "router_aux_loss_coef %g and init_std %g non-negative",
                        path, cfg->rope_theta, cfg->rms_norm_eps, cfg->router_aux_loss_coef, cfg->init_std);
    int head_dim = cfg->head_dim ? cfg->head_dim : cfg->hidden_size / cfg->num_heads;

    /* Keys sorted, as transformers writes them. */
    json_writer w;
    jw_init(&w, 2);
    jw_object_begin(&w);
    jw_key(&w, "architectures");
    jw_array_begin(&w);
    jw_string(&w, "MixtralForCausalLM");
    jw_array_end(&w);
    kv_double(&w, "attention_dropout", 0.0);
    kv_int(&w, "bos_token_id", 2);
    kv_string(&w, "dtype", torch_dtype);
    kv_int(&w, "eos_token_id", 0);
    kv_int(&w, "head_dim", head_dim);
    kv_string(&w, "hidden_act", "silu");
    kv_int(&w, "hidden_size", cfg->hidden_size);
    kv_double(&w, "initializer_range", cfg->init_std);
    kv_int(&w, "intermediate_size", cfg->intermediate_size);
    kv_int(&w, "max_position_embeddings", cfg->max_position_embeddings);
    kv_string(&w, "model_type", "mixtral");
    kv_int(&w, "num_attention_heads", cfg->num_heads);
    kv_int(&w, "num_experts_per_tok", cfg->top_k);
    kv_int(&w, "num_hidden_layers", cfg->num_layers);
    kv_int(&w, "num_key_value_heads", cfg->num_kv_heads);
    kv_int(&w, "num_local_experts", cfg->num_experts);
    kv_bool(&w, "output_router_logits", 0);
    kv_int(&w, "pad_token_id", 1);
    kv_double(&w, "rms_norm_eps", cfg->rms_norm_eps);
    jw_key(&w, "rope_parameters");
    jw_object_begin(&w);
    kv_double(&w, "rope_theta", cfg->rope_theta);
    kv_string(&w, "rope_type", "default");
    jw_object_end(&w);
    kv_double(&w, "rope_theta", cfg->rope_theta);
    kv_double(&w, "router_aux_loss_coef", cfg->router_aux_loss_coef);
    kv_double(&w, "router_jitter_noise", 0.0);
    jw_key(&w, "sliding_window");
    jw_null(&w);
    kv_bool(&w, "tie_word_embeddings", 0);
    kv_string(&w, "torch_dtype", torch_dtype);
    kv_bool(&w, "use_cache", 1);
    kv_int(&w, "vocab_size", cfg->vocab_size);
    jw_object_end(&w);
    jw_raw(&w, "\n", 1);
    return jw_write_file(&w, path, e);
}

/* moekit: Hugging Face model directories from checkpoints (hf_export.h). */
#include "hf_export.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/version.h"
#include "../ckpt/fsio.h"
#include "../ckpt/hashed_file.h"
#include "../ckpt/hf_dir.h"
#include "../ckpt/json.h"
#include "../ckpt/shard_read.h"
#include "../config/hf_config.h"
#include "../data/hf_tokenizer.h"
#include "../numerics/half.h"
#include "weights_io.h"

/* ---- the plan: which tensor goes to which shard ------------------------------ */

typedef struct {
    int *tensor;  /* shard-set indices of the model's tensors, sorted by name */
    int *shard;   /* the shard of each */
    int n, n_shards;
    uint64_t total_bytes;
} export_plan;

static uint64_t numel_of(const shard_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

static int plan_make(const shard_set *s, const hf_export_opts *o, export_plan *p, moe_err *e)
{
    memset(p, 0, sizeof *p);
    int n = shard_set_count(s);
    p->tensor = calloc((size_t)n + 1, sizeof *p->tensor);
    p->shard = calloc((size_t)n + 1, sizeof *p->shard);
    if (!p->tensor || !p->shard)
        return moe_errf(e, "out of memory planning the export");
    uint64_t in_shard = 0;
    for (int i = 0; i < n; i++) {
        const char *name = shard_set_tensor(s, i)->name;
        if (!strncmp(name, "exp_avg.", 8) || !strncmp(name, "exp_avg_sq.", 11))
            continue;
        uint64_t bytes = numel_of(shard_set_tensor(s, i)) * st_dtype_size(o->dtype);
        if (p->n == 0 || (in_shard > 0 && in_shard + bytes > o->max_shard_bytes)) {
            p->n_shards++;
            in_shard = 0;
        }
        in_shard += bytes;
        p->total_bytes += bytes;
        p->tensor[p->n] = i;
        p->shard[p->n++] = p->n_shards - 1;
    }
    if (p->n == 0)
        return moe_errf(e, "no model tensors to export");
    return 0;
}

static void plan_free(export_plan *p)
{
    free(p->tensor);
    free(p->shard);
}

static void shard_file_name(const export_plan *p, int shard, char *out, size_t n)
{
    if (p->n_shards == 1)
        snprintf(out, n, "%s", HF_SINGLE_FILE);
    else
        snprintf(out, n, "model-%05d-of-%05d.safetensors", shard + 1, p->n_shards);
}

/* ---- one shard ---------------------------------------------------------------- */

static int chunk_put(const ckpt_slice *s, uint64_t first, uint64_t n, const void *host,
                     moe_err *e)
{
    memcpy((float *)s->base + first, host, sizeof(float) * (size_t)n);
    return 0;
}

/* Stream tensor t in chunks: read as fp32, convert, write. */
static int write_tensor(shard_set *s, const shard_tensor *t, const hf_export_opts *o,
                        hashed_file *f, moe_err *e)
{
    size_t half = o->staging_bytes / 2;
    float *chunk = (float *)((char *)o->staging + half);
    uint64_t per = half / sizeof(float), numel = numel_of(t);
    ckpt_slice sl = {0};
    snprintf(sl.name, sizeof sl.name, "%s", t->name);
    sl.dtype = ST_F32;
    sl.ndim = t->ndim;
    memcpy(sl.shape, t->shape, sizeof sl.shape);
    sl.put = chunk_put;
    sl.base = chunk;
    ckpt_slice_list one = {&sl, 1, 1};
    for (uint64_t at = 0; at < numel; at += per) {
        uint64_t k = numel - at < per ? numel - at : per;
        sl.start = at;
        sl.count = k;
        if (shard_set_fill(s, &one, o->staging, half, e))
            return -1;
        /* a diverged model is no model to hand on: transformers would load it without a word */
        for (uint64_t i = 0; i < k; i++)
            if (!isfinite(chunk[i]))
                return moe_errf(e, "%s: element %llu is %s: refusing to export weights that are not "
                                "finite (a diverged run? export an earlier checkpoint)", t->name,
                                (unsigned long long)(at + i), isnan(chunk[i]) ? "NaN" : "infinite");
        size_t bytes = (size_t)k * sizeof(float);
        if (o->dtype == ST_BF16) { /* in place: element i's 2 bytes lie below element i's 4 */
            uint16_t *h = (uint16_t *)chunk;
            for (uint64_t i = 0; i < k; i++)
                h[i] = f32_to_bf16(chunk[i]);
            bytes = (size_t)k * 2;
        }
        if (hashed_file_write(f, chunk, bytes, e))
            return -1;
    }
    return 0;
}

static int write_shard(shard_set *s, const export_plan *p, int shard, const char *out,
                       const hf_export_opts *o, moe_err *e)
{
    char name[64], path[4200];
    shard_file_name(p, shard, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", out, name);
    st_tensor *ts = calloc((size_t)p->n, sizeof *ts);
    if (!ts)
        return moe_errf(e, "out of memory");
    int n = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->shard[i] != shard)
            continue;
        const shard_tensor *t = shard_set_tensor(s, p->tensor[i]);
        ts[n] = (st_tensor){.name = t->name, .dtype = o->dtype, .ndim = t->ndim};
        memcpy(ts[n++].shape, t->shape, sizeof t->shape);
    }
    static const st_meta meta[] = {{"format", "pt"}};
    char *hdr = NULL;
    size_t hlen;
    uint64_t data_bytes;
    hashed_file f;
    int rc = st_header_make(path, ts, n, meta, 1, &hdr, &hlen, &data_bytes, e);
    if (!rc && !(rc = hashed_file_create(&f, path, 0, e))) {
        rc = hashed_file_write(&f, hdr, hlen, e);
        for (int i = 0; i < p->n && !rc; i++)
            if (p->shard[i] == shard)
                rc = write_tensor(s, shard_set_tensor(s, p->tensor[i]), o, &f, e);
        rc = rc ? rc : hashed_file_finish(&f, e);
        if (rc)
            hashed_file_abort(&f);
        else
            hashed_file_free(&f);
    }
    free(hdr);
    free(ts);
    return rc;
}

/* The bytes the busiest of `world` ranks moves: each tensor read as fp32
 * and written as o->dtype, shard i on rank i % world. */
static int plan_busiest(const shard_set *s, const export_plan *p, const hf_export_opts *o,
                        int world, uint64_t *busiest, moe_err *e)
{
    uint64_t *per = calloc((size_t)world, sizeof *per);
    if (!per)
        return moe_errf(e, "out of memory planning the export");
    for (int i = 0; i < p->n; i++)
        per[p->shard[i] % world] +=
            numel_of(shard_set_tensor(s, p->tensor[i])) * (sizeof(float) + st_dtype_size(o->dtype));
    *busiest = 0;
    for (int r = 0; r < world; r++)
        if (per[r] > *busiest)
            *busiest = per[r];
    free(per);
    return 0;
}

int hf_export_shards(const char *ckpt, const char *out, const hf_export_opts *o, int rank,
                     int world, uint64_t *busiest, moe_err *e)
{
    if (busiest)
        *busiest = 0;
    shard_set *s;
    if (shard_set_open(ckpt, &s, e))
        return -1;
    export_plan p;
    int rc = plan_make(s, o, &p, e);
    if (!rc && busiest)
        rc = plan_busiest(s, &p, o, world, busiest, e);
    for (int i = rank; i < p.n_shards && !rc; i += world)
        rc = write_shard(s, &p, i, out, o, e);
    plan_free(&p);
    shard_set_close(s);
    return rc;
}

/* ---- the small files ------------------------------------------------------------ */

static int write_json(const char *out, const char *name, json_writer *w, moe_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", out, name);
    jw_raw(w, "\n", 1);
    return jw_write_file(w, path, e);
}

static int write_index(const shard_set *s, const export_plan *p, const char *out, moe_err *e)
{
    json_writer w;
    jw_init(&w, 2);
    jw_object_begin(&w);
    jw_key(&w, "metadata");
    jw_object_begin(&w);
    jw_key(&w, "total_size");
    jw_int(&w, (int64_t)p->total_bytes);
    jw_object_end(&w);
    jw_key(&w, "weight_map");
    jw_object_begin(&w);
    for (int i = 0; i < p->n; i++) {
        char name[64];
        shard_file_name(p, p->shard[i], name, sizeof name);
        jw_key(&w, shard_set_tensor(s, p->tensor[i])->name);
        jw_string(&w, name);
    }
    jw_object_end(&w);
    jw_object_end(&w);
    return write_json(out, HF_INDEX_FILE, &w, e);
}

static int write_generation_config(const char *out, moe_err *e)
{
    json_writer w;
    jw_init(&w, 2);
    jw_object_begin(&w);
    jw_key(&w, "_from_model_config");
    jw_bool(&w, 1);
    jw_key(&w, "bos_token_id");
    jw_int(&w, 2);
    jw_key(&w, "eos_token_id");
    jw_int(&w, 0);
    jw_key(&w, "pad_token_id");
    jw_int(&w, 1);
    jw_object_end(&w);
    return write_json(out, "generation_config.json", &w, e);
}

/* A file of the checkpoint as text ("" when it has none). */
static char *read_optional(const char *ckpt, const char *name)
{
    char path[4200], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", ckpt, name);
    if (access(path, F_OK) != 0 || fsio_read_all(path, (size_t)16 << 20, &text, &len, NULL))
        return strdup("");
    return text;
}

static void card_facts(FILE *f, const char *ckpt)
{
    char *state = read_optional(ckpt, "train_state.json");
    json_doc *doc = NULL;
    const json_value *root = NULL;
    if (state[0] && json_parse(state, strlen(state), NULL, &doc, NULL) == 0)
        root = json_root(doc);
    static const struct {
        const char *key, *label;
    } facts[] = {{"config", "moekit config"}, {"step", "optimizer steps"},
                 {"tokens_seen", "training tokens (targets)"}, {"last_loss", "last training loss"},
                 {"val_loss", "held-out loss (nats/token)"}, {"precision", "training precision"}};
    for (size_t i = 0; i < sizeof facts / sizeof *facts; i++) {
        const json_value *v = root ? json_get(root, facts[i].key) : NULL;
        if (v && v->type == JSON_STRING)
            fprintf(f, "- %s: %s\n", facts[i].label, v->str.s);
        else if (v && v->type == JSON_NUMBER && v->num.is_integer)
            fprintf(f, "- %s: %" PRId64 "\n", facts[i].label, v->num.integer);
        else if (v && v->type == JSON_NUMBER)
            fprintf(f, "- %s: %.6f\n", facts[i].label, v->num.value);
        else
            fprintf(f, "- %s: not recorded\n", facts[i].label);
    }
    json_free(doc);
    free(state);
}

static int write_card(const char *ckpt, const char *out, const moe_model_cfg *mc,
                      const export_plan *p, const hf_export_opts *o, moe_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/README.md", out);
    FILE *f = fopen(path, "w");
    if (!f)
        return moe_err_errno(e, errno, "%s", path);
    char *cfg = read_optional(ckpt, "moekit.cfg");
    fprintf(f, "---\nlibrary_name: transformers\npipeline_tag: text-generation\ntags:\n- moekit\n"
               "- mixtral\n- genomics\n- dna\n---\n\n# A Mixtral-style mixture of experts on "
               "nucleotide sequences\n\nTrained with moekit %s and exported as %s safetensors "
               "(%s).\n\n", MOEKIT_VERSION, o->dtype == ST_BF16 ? "bf16" : "fp32",
            p->n_shards == 1 ? "one file" : "sharded, with an index");
    fprintf(f, "- architecture: MixtralForCausalLM, %d layers, hidden size %d, %d heads (%d "
               "key/value), %d experts of intermediate size %d, %d per token\n",
            mc->num_layers, mc->hidden_size, mc->num_heads, mc->num_kv_heads, mc->num_experts,
            mc->intermediate_size, mc->top_k);
    fprintf(f, "- vocabulary: %d byte-level tokens, <eos>=0 <pad>=1 <bos>=2 <unk>=3, every other "
               "byte its own id, lower case read as upper case\n", mc->vocab_size);
    card_facts(f, ckpt);
    fprintf(f, "\n## Use\n\n```python\nfrom transformers import AutoTokenizer, "
               "MixtralForCausalLM\ntok = AutoTokenizer.from_pretrained(PATH)\nmodel = "
               "MixtralForCausalLM.from_pretrained(PATH)\nids = tok(\"ACGTACGT\", "
               "return_tensors=\"pt\").input_ids\nloss = model(input_ids=ids, labels=ids).loss\n"
               "```\n\nThe data are the files of `data.files` in the configuration below.\n");
    if (cfg[0])
        fprintf(f, "\n## Configuration (moekit.cfg)\n\n```\n%s```\n", cfg);
    free(cfg);
    if (fclose(f) != 0)
        return moe_err_errno(e, errno, "%s", path);
    return 0;
}

/* the integer "step" of dir/name (a JSON object), or -1 */
static int64_t json_step(const char *dir, const char *name)
{
    char *text = read_optional(dir, name);
    json_doc *doc = NULL;
    int64_t step = -1;
    if (text[0] && json_parse(text, strlen(text), NULL, &doc, NULL) == 0) {
        const json_value *v = json_get(json_root(doc), "step");
        if (v && v->type == JSON_NUMBER && v->num.is_integer && v->num.integer >= 0)
            step = v->num.integer;
    }
    json_free(doc);
    free(text);
    return step;
}

int64_t hf_export_source_step(const char *model_dir)
{
    return json_step(model_dir, HF_EXPORT_SOURCE_FILE);
}

/* HF_EXPORT_SOURCE_FILE: the step of the checkpoint exported, so a run can
 * tell an export of its newest checkpoint from an older one (nothing where
 * the source records no step) */
static int write_source(const char *ckpt, const char *out, moe_err *e)
{
    int64_t step = json_step(ckpt, "train_state.json");
    if (step < 0)
        return 0;
    json_writer w;
    jw_init(&w, 2);
    jw_object_begin(&w);
    jw_key(&w, "step");
    jw_int(&w, step);
    jw_key(&w, "checkpoint");
    jw_string(&w, ckpt);
    jw_object_end(&w);
    return write_json(out, HF_EXPORT_SOURCE_FILE, &w, e);
}

int hf_export_finish(const char *ckpt, const char *out, const hf_export_opts *o, moe_err *e)
{
    moe_model_cfg mc;
    shard_set *s;
    if (weights_check(ckpt, NULL, &mc, 0, e) || shard_set_open(ckpt, &s, e))
        return -1;
    export_plan p;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", out);
    int rc = plan_make(s, o, &p, e);
    if (!rc && p.n_shards > 1)
        rc = write_index(s, &p, out, e);
    if (!rc)
        rc = hf_config_write_as(path, &mc, o->dtype == ST_BF16 ? "bfloat16" : "float32", e);
    if (!rc)
        rc = write_generation_config(out, e) ||
             hf_tokenizer_write(out, mc.max_position_embeddings, e) ||
             write_card(ckpt, out, &mc, &p, o, e) || write_source(ckpt, out, e);
    plan_free(&p);
    shard_set_close(s);
    return rc;
}

int hf_export_publish(const char *tmp, const char *final, moe_err *e)
{
    char old[4400], parent[4200];
    snprintf(parent, sizeof parent, "%s", final);
    char *slash = strrchr(parent, '/');
    const char *base = slash ? final + (slash - parent) + 1 : final;
    if (slash)
        *slash = '\0';
    else
        snprintf(parent, sizeof parent, ".");
    snprintf(old, sizeof old, "%s/.old-%s-%d", parent, base, (int)getpid());
    if (fsio_fsync_dir_files(tmp, e))
        return -1;
    int had_old = access(final, F_OK) == 0;
    if (had_old && rename(final, old))
        return moe_err_errno(e, errno, "cannot move the previous %s aside", final);
    if (rename(tmp, final)) {
        int err = errno;
        if (had_old)
            rename(old, final);
        return moe_err_errno(e, err, "cannot rename %s to %s", tmp, final);
    }
    if (fsio_fsync_path(parent[0] ? parent : "/", e))
        return -1;
    if (had_old)
        fsio_rm_rf(old, NULL);
    return 0;
}

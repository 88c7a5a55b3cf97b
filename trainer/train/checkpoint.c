/* moekit: checkpoints of a training run.
 *
 * <ckpt_dir>/step_<N>/ holds
 *   model.safetensors      fp32 masters under the Hugging Face Mixtral names
 *   config.json            so transformers' MixtralForCausalLM.from_pretrained loads the dir
 *   optimizer.safetensors  AdamW moments (exp_avg.<name>, exp_avg_sq.<name>)
 *   train_state.json       step, tokens seen, the data cursor, the seed
 *   moekit.cfg             the effective configuration
 *   MANIFEST               checksums, written last by the crash-safe commit
 * The directory appears by rename only when complete (ckpt_dir.h). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ckpt/ckpt_dir.h"
#include "../ckpt/fsio.h"
#include "../ckpt/hf_config.h"
#include "../ckpt/json.h"
#include "../parallel/layout_io.h"
#include "../parallel/watchdog.h"
#include "trainer.h"
#include "weights_io.h"

static const st_meta ST_FORMAT[] = {{"format", "pt"}};

static int write_state_json(moe_trainer *t, const char *path, moe_err *e)
{
    moe_data_cursor cur = dataset_cursor(t->data);
    char fp[32];
    snprintf(fp, sizeof fp, "%016" PRIx64, cur.fingerprint);
    json_writer w;
    jw_init(&w, 1);
    jw_object_begin(&w);
    jw_key(&w, "format");
    jw_string(&w, "moekit-train-state-1");
    jw_key(&w, "step");
    jw_int(&w, t->step);
    jw_key(&w, "tokens_seen");
    jw_int(&w, (int64_t)t->tokens_seen);
    jw_key(&w, "seed");
    jw_int(&w, (int64_t)t->cfg.train.seed);
    jw_key(&w, "config");
    jw_string(&w, t->cfg.name);
    jw_key(&w, "last_loss");
    jw_double(&w, t->last_loss);
    jw_key(&w, "data_cursor");
    jw_object_begin(&w);
    jw_key(&w, "epoch");
    jw_int(&w, (int64_t)cur.epoch);
    jw_key(&w, "position");
    jw_int(&w, (int64_t)cur.position);
    jw_key(&w, "fingerprint");
    jw_string(&w, fp);
    jw_object_end(&w);
    jw_object_end(&w);
    int rc = jw_finish(&w, e);
    if (!rc)
        rc = fsio_write_all(path, w.buf, w.len, e);
    jw_free(&w);
    return rc;
}

/* The run's weights (and moments) in the full layout, every expert, on
 * every rank. Collective: every rank calls it. */
typedef struct {
    moe_model full;   /* parameter table of the full layout */
    real *w, *m, *v;  /* host, full.n_elems each (m, v NULL without the optimizer) */
} full_state;

static void full_state_free(full_state *fs)
{
    layout_full_free(&fs->full);
    free(fs->w);
    free(fs->m);
    free(fs->v);
    memset(fs, 0, sizeof *fs);
}

static int full_state_gather(moe_trainer *t, full_state *fs, int with_optimizer, moe_err *e)
{
    moe_model *m = t->model;
    memset(fs, 0, sizeof *fs);
    if (layout_full_make(&fs->full, m, e))
        return -1;
    size_t nl = m->n_elems, nf = fs->full.n_elems;
    real *local = malloc(sizeof(real) * nl * 3);
    fs->w = malloc(sizeof(real) * nf);
    if (with_optimizer) {
        fs->m = malloc(sizeof(real) * nf);
        fs->v = malloc(sizeof(real) * nf);
    }
    int rc = -1;
    if (!local || !fs->w || (with_optimizer && (!fs->m || !fs->v))) {
        moe_errf(e, "out of memory gathering the model for a checkpoint");
        goto out;
    }
    if (model_get_masters(m, local, e) ||
        layout_gather_full(&t->par, m, &fs->full, local, fs->w, e))
        goto out;
    if (with_optimizer) {
        real *lm = local + nl, *lv = local + 2 * nl;
        if (t->zero ? zero_get_moments(t->zero, lm, lv, e)
                    : model_get_moments(m, lm, lv, e))
            goto out;
        if (layout_gather_full(&t->par, m, &fs->full, lm, fs->m, e) ||
            layout_gather_full(&t->par, m, &fs->full, lv, fs->v, e))
            goto out;
    }
    rc = 0;
out:
    free(local);
    if (rc)
        full_state_free(fs);
    return rc;
}

static int write_model_files(moe_trainer *t, const char *dir, const full_state *fs, moe_err *e)
{
    char path[4200];
    const char *pfx[] = {""};
    const real *bufs[] = {fs->w};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (weights_write(&fs->full, path, 1, pfx, bufs, ST_FORMAT, 1, e))
        return -1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hf_config_write(path, &t->cfg.model, e))
        return -1;
    if (!fs->m)
        return 0;
    const char *opfx[] = {"exp_avg.", "exp_avg_sq."};
    const real *obufs[] = {fs->m, fs->v};
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (weights_write(&fs->full, path, 2, opfx, obufs, ST_FORMAT, 1, e))
        return -1;
    snprintf(path, sizeof path, "%s/train_state.json", dir);
    if (write_state_json(t, path, e))
        return -1;
    snprintf(path, sizeof path, "%s/moekit.cfg", dir);
    return config_save(&t->cfg, path, e);
}

int trainer_save_checkpoint(moe_trainer *t, moe_err *e)
{
    full_state fs;
    if (full_state_gather(t, &fs, 1, e))
        return moe_err_prefix(e, "saving the checkpoint of step %d", t->step);
    int rc = 0;
    ckpt_txn txn;
    if (t->rank == 0) { /* rank 0 writes for every rank */
        if (ckpt_begin(&txn, t->cfg.checkpoint.ckpt_dir, t->step, e)) {
            rc = moe_err_prefix(e, "checkpoint.ckpt_dir");
        } else {
            rc = write_model_files(t, txn.tmp_dir, &fs, e);
            if (!rc)
                rc = ckpt_commit(&txn, t->cfg.checkpoint.max_checkpoints, e);
            if (rc) {
                ckpt_abort(&txn);
                moe_err_prefix(e, "saving the checkpoint of step %d (the previous one is kept)",
                               t->step);
            }
        }
    }
    full_state_free(&fs);
    watchdog_allow(INFINITY); /* the others wait for rank 0's file system */
    if (comm_agree(t->par.world, rc, "saving a checkpoint", e))
        return -1;
    if (t->rank == 0 && !t->quiet)
        printf("ckpt  %5d | saved %s\n", t->step, txn.final_dir);
    return 0;
}

static int save_final_files(moe_trainer *t, const full_state *fs, moe_err *e);

int trainer_save_final_model(moe_trainer *t, moe_err *e)
{
    full_state fs;
    if (full_state_gather(t, &fs, 0, e))
        return moe_err_prefix(e, "saving the final model");
    int rc = t->rank == 0 ? save_final_files(t, &fs, e) : 0;
    full_state_free(&fs);
    watchdog_allow(INFINITY);
    return comm_agree(t->par.world, rc, "saving the final model", e);
}

static int save_final_files(moe_trainer *t, const full_state *fs, moe_err *e)
{
    /* the final model is a plain HF directory, made complete before it is
     * renamed into place like a checkpoint */
    char tmp[4200], final[4200], old[4300];
    snprintf(final, sizeof final, "%s/final_model", t->cfg.checkpoint.ckpt_dir);
    snprintf(tmp, sizeof tmp, "%s/.tmp-final_model-%d", t->cfg.checkpoint.ckpt_dir, (int)getpid());
    snprintf(old, sizeof old, "%s/.old-final_model-%d", t->cfg.checkpoint.ckpt_dir, (int)getpid());
    if (fsio_rm_rf(tmp, e) || fsio_mkdir_p(tmp, 0755, e))
        return -1;
    int rc = write_model_files(t, tmp, fs, e);
    char p[4300];
    if (!rc) {
        snprintf(p, sizeof p, "%s/model.safetensors", tmp);
        rc = fsio_fsync_path(p, e);
    }
    if (!rc) {
        snprintf(p, sizeof p, "%s/config.json", tmp);
        rc = fsio_fsync_path(p, e) || fsio_fsync_path(tmp, e);
    }
    if (!rc) {
        int had_old = access(final, F_OK) == 0;
        if (had_old && rename(final, old))
            rc = moe_err_errno(e, errno, "cannot move the previous %s aside", final);
        else if (rename(tmp, final))
            rc = moe_err_errno(e, errno, "cannot rename %s to %s", tmp, final);
        else {
            rc = fsio_fsync_path(t->cfg.checkpoint.ckpt_dir, e);
            if (had_old)
                fsio_rm_rf(old, NULL);
        }
    }
    if (rc) {
        fsio_rm_rf(tmp, NULL);
        return moe_err_prefix(e, "saving the final model");
    }
    if (!t->quiet)
        printf("final       | model saved to %s (Hugging Face layout)\n", final);
    return 0;
}

static int model_cfg_matches(const moe_model_cfg *a, const moe_model_cfg *b, const char *path,
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

/* config.json keys and the model.* key each one fills */
typedef struct {
    const char *json, *key;
    size_t offset;
    int is_int;
} hf_field;
#define HF_INT(json, field) {json, "model." #field, offsetof(moe_model_cfg, field), 1}
#define HF_REAL(json, field) {json, "model." #field, offsetof(moe_model_cfg, field), 0}
static const hf_field hf_fields[] = {
    HF_INT("hidden_size", hidden_size),
    HF_INT("num_hidden_layers", num_layers),
    HF_INT("num_attention_heads", num_heads),
    HF_INT("num_key_value_heads", num_kv_heads),
    HF_INT("head_dim", head_dim),
    HF_INT("num_local_experts", num_experts),
    HF_INT("num_experts_per_tok", top_k),
    HF_INT("intermediate_size", intermediate_size),
    HF_INT("vocab_size", vocab_size),
    HF_INT("max_position_embeddings", max_position_embeddings),
    HF_REAL("rope_theta", rope_theta),
    HF_REAL("rms_norm_eps", rms_norm_eps),
    HF_REAL("router_aux_loss_coef", router_aux_loss_coef),
    HF_REAL("initializer_range", init_std),
};
#undef HF_INT
#undef HF_REAL

static double hf_value(const moe_model_cfg *m, const hf_field *f)
{
    const char *p = (const char *)m + f->offset;
    return f->is_int ? *(const int *)(const void *)p : *(const double *)(const void *)p;
}

int trainer_adopt_init_config(moe_config *c, moe_err *e)
{
    if (!c->checkpoint.init_from[0])
        return 0;
    char path[MOE_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", c->checkpoint.init_from);
    moe_model_cfg hf = c->model;
    if (hf_config_read(path, &hf, e))
        return moe_err_prefix(e, "checkpoint.init_from");
    /* head_dim 0 means hidden_size / num_heads: compare the widths */
    if (c->model.head_dim == 0 && c->model.num_heads > 0)
        c->model.head_dim = c->model.hidden_size / c->model.num_heads;
    for (size_t i = 0; i < sizeof hf_fields / sizeof hf_fields[0]; i++) {
        const hf_field *f = &hf_fields[i];
        double theirs = hf_value(&hf, f), ours = hf_value(&c->model, f);
        if (config_model_key_explicit(c, f->key) && theirs != ours)
            return moe_errf(e, "checkpoint.init_from: %s has %s = %.10g but the config sets "
                               "%s = %.10g (leave %s out to take the checkpoint's)",
                            path, f->json, theirs, f->key, ours, f->key);
    }
    c->model = hf;
    if (config_validate(c, e))
        return moe_err_prefix(e, "with the architecture of %s", path);
    return 0;
}

typedef struct {
    int64_t step, tokens_seen;
    moe_data_cursor cursor;
} train_state;

static int read_state_json(const char *path, train_state *st, moe_err *e)
{
    json_doc *doc;
    if (json_parse_file(path, NULL, &doc, e))
        return -1;
    const json_value *root = json_root(doc), *step = json_get(root, "step"),
                     *tok = json_get(root, "tokens_seen"), *cur = json_get(root, "data_cursor");
    const json_value *ep = json_get(cur, "epoch"), *pos = json_get(cur, "position"),
                     *fp = json_get(cur, "fingerprint");
    int rc = 0;
    if (!step || step->type != JSON_NUMBER || !step->num.is_integer || step->num.integer < 0 ||
        !tok || tok->type != JSON_NUMBER || !ep || ep->type != JSON_NUMBER || !pos ||
        pos->type != JSON_NUMBER || !fp || fp->type != JSON_STRING) {
        rc = moe_errf(e, "%s: missing or malformed step, tokens_seen or data_cursor", path);
    } else if (step->num.integer > INT_MAX) {
        /* the trainer counts steps in an int, as train.steps does */
        rc = moe_errf(e, "%s: step %lld is out of range (0..%d)", path,
                      (long long)step->num.integer, INT_MAX);
    } else {
        st->cursor = (moe_data_cursor){.epoch = (uint64_t)ep->num.integer,
                                       .position = (uint64_t)pos->num.integer,
                                       .fingerprint = strtoull(fp->str.s, NULL, 16)};
        st->step = step->num.integer;
        st->tokens_seen = tok->num.integer;
    }
    json_free(doc);
    return rc;
}

/* Rank 0's part of loading: the files into full-layout buffers. */
static int read_files(moe_trainer *t, const char *dir, int weights_only, full_state *fs,
                      train_state *st, moe_err *e)
{
    char path[4200];
    if (!weights_only && ckpt_verify(dir, e))
        return -1;
    moe_model_cfg hc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hf_config_read(path, &hc, e) || model_cfg_matches(&hc, &t->cfg.model, path, e))
        return -1;
    hf_dir *hd = NULL;
    int rc = hf_dir_open(dir, &hd, e);
    if (!rc)
        rc = weights_read(&fs->full, weights_source_hf(hd, dir), "", 1, fs->w, e);
    if (hd)
        hf_dir_close(hd);
    if (!rc && !weights_only) {
        st_file *f = NULL;
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        rc = st_open(path, &f, e);
        if (!rc) {
            weights_source src = weights_source_st(f, path);
            rc = weights_read(&fs->full, src, "exp_avg.", 0, fs->m, e) ||
                 weights_read(&fs->full, src, "exp_avg_sq.", 0, fs->v, e);
            st_close(f);
        }
        if (!rc) {
            snprintf(path, sizeof path, "%s/train_state.json", dir);
            rc = read_state_json(path, st, e);
        }
    }
    return rc;
}

/* Rank 0 reads; every rank gets the full buffers and keeps its part, so a
 * checkpoint saved at one EP/DP resumes at any other. */
int trainer_load_checkpoint(moe_trainer *t, const char *dir, int weights_only, moe_err *e)
{
    moe_model *m = t->model;
    full_state fs;
    memset(&fs, 0, sizeof fs);
    train_state st;
    memset(&st, 0, sizeof st);
    int rc = layout_full_make(&fs.full, m, e);
    size_t nf = fs.full.n_elems;
    real *local = rc ? NULL : malloc(sizeof(real) * m->n_elems * 3);
    if (!rc) {
        fs.w = malloc(sizeof(real) * nf);
        fs.m = malloc(sizeof(real) * nf);
        fs.v = malloc(sizeof(real) * nf);
        if (!local || !fs.w || !fs.m || !fs.v)
            rc = moe_errf(e, "out of memory loading %s", dir);
    }
    int failed = rc;
    if (!failed && t->rank == 0)
        failed = read_files(t, dir, weights_only, &fs, &st, e);
    watchdog_allow(INFINITY);
    rc = comm_agree(t->par.world, failed, "reading the checkpoint", e);
    size_t bytes = sizeof(real) * nf;
    if (!rc)
        rc = comm_broadcast(t->par.world, fs.w, bytes, 0, e);
    if (!rc && !weights_only)
        rc = comm_broadcast(t->par.world, fs.m, bytes, 0, e) ||
             comm_broadcast(t->par.world, fs.v, bytes, 0, e) ||
             comm_broadcast(t->par.world, &st, sizeof st, 0, e);
    if (!rc) {
        layout_slice_local(m, &fs.full, fs.w, local);
        rc = model_set_masters(m, local, e);
    }
    if (!rc && !weights_only) {
        real *lm = local + m->n_elems, *lv = local + 2 * m->n_elems;
        layout_slice_local(m, &fs.full, fs.m, lm);
        layout_slice_local(m, &fs.full, fs.v, lv);
        rc = t->zero ? zero_set_moments(t->zero, lm, lv, e)
                     : model_set_moments(m, lm, lv, e);
        if (!rc) {
            t->step = (int)st.step;
            t->tokens_seen = (uint64_t)st.tokens_seen;
            if (dataset_seek(t->data, st.cursor, e))
                rc = moe_err_prefix(e, "%s/train_state.json: data cursor", dir);
        }
    }
    free(local);
    full_state_free(&fs);
    if (rc)
        return moe_err_prefix(e, "loading %s", dir);
    if (weights_only && !t->quiet && t->rank == 0)
        printf("moe-train: initialised the weights from %s\n", dir);
    return 0;
}

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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ckpt/ckpt_dir.h"
#include "../ckpt/fsio.h"
#include "../ckpt/hf_config.h"
#include "../ckpt/json.h"
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

static int write_model_files(moe_trainer *t, const char *dir, real *host, int with_optimizer,
                             moe_err *e)
{
    moe_model *m = t->model;
    char path[4200];
    if (model_get_host(m, m->master, host, e))
        return -1;
    const char *pfx[] = {""};
    const real *bufs[] = {host};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (weights_write(m, path, 1, pfx, bufs, ST_FORMAT, 1, e))
        return -1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hf_config_write(path, &t->cfg.model, e))
        return -1;
    if (!with_optimizer)
        return 0;
    real *mom = malloc(sizeof(real) * m->n_elems * 2);
    if (!mom)
        return moe_errf(e, "out of memory saving the optimizer state");
    int rc = model_get_host(m, m->m, mom, e) || model_get_host(m, m->v, mom + m->n_elems, e);
    if (!rc) {
        const char *opfx[] = {"exp_avg.", "exp_avg_sq."};
        const real *obufs[] = {mom, mom + m->n_elems};
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        rc = weights_write(m, path, 2, opfx, obufs, ST_FORMAT, 1, e);
    }
    free(mom);
    if (rc)
        return -1;
    snprintf(path, sizeof path, "%s/train_state.json", dir);
    if (write_state_json(t, path, e))
        return -1;
    snprintf(path, sizeof path, "%s/moekit.cfg", dir);
    return config_save(&t->cfg, path, e);
}

int trainer_save_checkpoint(moe_trainer *t, moe_err *e)
{
    if (t->rank != 0)
        return 0;
    ckpt_txn txn;
    if (ckpt_begin(&txn, t->cfg.checkpoint.ckpt_dir, t->step, e))
        return moe_err_prefix(e, "checkpoint.ckpt_dir");
    real *host = malloc(sizeof(real) * t->model->n_elems);
    int rc = host ? write_model_files(t, txn.tmp_dir, host, 1, e)
                  : moe_errf(e, "out of memory saving a checkpoint");
    free(host);
    if (!rc)
        rc = ckpt_commit(&txn, t->cfg.checkpoint.max_checkpoints, e);
    if (rc) {
        ckpt_abort(&txn);
        return moe_err_prefix(e, "saving the checkpoint of step %d (the previous one is kept)",
                              t->step);
    }
    if (!t->quiet)
        printf("ckpt  %5d | saved %s\n", t->step, txn.final_dir);
    return 0;
}

int trainer_save_final_model(moe_trainer *t, moe_err *e)
{
    if (t->rank != 0)
        return 0;
    /* the final model is a plain HF directory, made complete before it is
     * renamed into place like a checkpoint */
    char tmp[4200], final[4200], old[4300];
    snprintf(final, sizeof final, "%s/final_model", t->cfg.checkpoint.ckpt_dir);
    snprintf(tmp, sizeof tmp, "%s/.tmp-final_model-%d", t->cfg.checkpoint.ckpt_dir, (int)getpid());
    snprintf(old, sizeof old, "%s/.old-final_model-%d", t->cfg.checkpoint.ckpt_dir, (int)getpid());
    if (fsio_rm_rf(tmp, e) || fsio_mkdir_p(tmp, 0755, e))
        return -1;
    real *host = malloc(sizeof(real) * t->model->n_elems);
    int rc = host ? write_model_files(t, tmp, host, 0, e) : moe_errf(e, "out of memory");
    free(host);
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

static int read_state_json(moe_trainer *t, const char *path, moe_err *e)
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
    } else {
        moe_data_cursor c = {.epoch = (uint64_t)ep->num.integer,
                             .position = (uint64_t)pos->num.integer,
                             .fingerprint = strtoull(fp->str.s, NULL, 16)};
        t->step = (int)step->num.integer;
        t->tokens_seen = (uint64_t)tok->num.integer;
        if (dataset_seek(t->data, c, e))
            rc = moe_err_prefix(e, "%s: data cursor", path);
    }
    json_free(doc);
    return rc;
}

int trainer_load_checkpoint(moe_trainer *t, const char *dir, int weights_only, moe_err *e)
{
    moe_model *m = t->model;
    char path[4200];
    if (!weights_only && ckpt_verify(dir, e))
        return -1;
    moe_model_cfg hc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hf_config_read(path, &hc, e) || model_cfg_matches(&hc, &t->cfg.model, path, e))
        return -1;
    real *host = malloc(sizeof(real) * m->n_elems);
    if (!host)
        return moe_errf(e, "out of memory loading %s", dir);
    hf_dir *hd = NULL;
    int rc = hf_dir_open(dir, &hd, e);
    if (!rc)
        rc = weights_read(m, weights_source_hf(hd, dir), "", 1, host, e);
    if (hd)
        hf_dir_close(hd);
    if (!rc)
        rc = model_set_host(m, m->master, host, e);
    if (!rc)
        model_sync_weights(m);
    if (!rc && !weights_only) {
        st_file *f = NULL;
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        rc = st_open(path, &f, e);
        if (!rc) {
            weights_source src = weights_source_st(f, path);
            rc = weights_read(m, src, "exp_avg.", 0, host, e) || model_set_host(m, m->m, host, e) ||
                 weights_read(m, src, "exp_avg_sq.", 0, host, e) ||
                 model_set_host(m, m->v, host, e);
            st_close(f);
        }
        if (!rc) {
            snprintf(path, sizeof path, "%s/train_state.json", dir);
            rc = read_state_json(t, path, e);
        }
    }
    free(host);
    if (rc)
        return moe_err_prefix(e, "loading %s", dir);
    if (weights_only && !t->quiet && t->rank == 0)
        printf("moe-train: initialised the weights from %s\n", dir);
    return 0;
}

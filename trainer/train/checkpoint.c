/* moekit: checkpoints of a training run.
 *
 * <ckpt_dir>/step_<N>/ holds
 *   rank-0000R-of-0000W.safetensors  what rank R owns, written by R in parallel
 *                          with the others: its share of the fp32 masters
 *                          (Hugging Face names) and its shards of the AdamW
 *                          moments (exp_avg.<name>, exp_avg_sq.<name>), each a
 *                          whole tensor or a piece "<name>@<first element>"
 *   checkpoint.index.json  every rank file (size, SHA-256, per-block SHA-256)
 *                          and its pieces (tensor, dtype, full shape, element
 *                          range, byte offset); written last, by rank 0
 *   config.json            the model's Hugging Face config
 *   train_state.json       step, tokens seen, the data cursor, the seed, losses
 *   moekit.cfg             the effective configuration
 *   MANIFEST               sha256sum -c list, written by the crash-safe commit
 * The directory appears by rename only when complete (ckpt_dir.h). State
 * moves between the device and the files through one staging buffer per
 * rank (checkpoint.staging_mb, pinned where the backend pins): no rank
 * holds more than its own state and that buffer. A resume at any EP/DP
 * reads each rank's slices straight from the files (shard_read.h). The
 * Hugging Face model (final_model, `moe-train export`) is an export of a
 * checkpoint (hf_export.h). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ckpt/ckpt_dir.h"
#include "../ckpt/fsio.h"
#include "../config/hf_config.h"
#include "../ckpt/json.h"
#include "../ckpt/shard_read.h"
#include "../ckpt/shard_write.h"
#include "../model/model_slices.h"
#include "ckpt_allowance.h"
#include "ckpt_io.h"
#include "hf_export.h"
#include "trainer.h"
#include "weights_io.h"

/* Block size of the per-block digests: a resume reading a slice rounds out
 * to whole blocks, so small enough to read little beyond a slice, large
 * enough to keep the index small (557 GB -> 531k digests, 36 MB). */
#define CKPT_BLOCK_BYTES ((uint64_t)1 << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

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
    jw_key(&w, "precision");
    jw_string(&w, t->precision ? t->precision : "?");
    jw_key(&w, "last_loss");
    jw_double(&w, t->last_loss);
    if (t->last_val_loss > 0) {
        jw_key(&w, "val_loss");
        jw_double(&w, t->last_val_loss);
    }
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
    return jw_write_file(&w, path, e);
}

/* What this rank saves or loads: the optimizer's slices when it shards the
 * state, else the model's masters and moments whole. */
static int state_slices(moe_trainer *t, int for_save, int weights_only, ckpt_slice_list *l,
                        moe_err *e)
{
    moe_model *m = t->model;
    if (t->zero)
        return weights_only ? zero_ckpt_master_slices(t->zero, l, e)
                            : zero_ckpt_slices(t->zero, for_save, l, e);
    if (weights_only)
        return model_all_slices(m, "", SLICE_SRC_MASTERS, NULL, l, e);
    slice_src moments = m->moments_bf16 ? SLICE_SRC_FLAT_BF16 : SLICE_SRC_FLAT;
    return model_all_slices(m, "", SLICE_SRC_MASTERS, NULL, l, e) ||
           model_all_slices(m, "exp_avg.", moments, m->m, l, e) ||
           model_all_slices(m, "exp_avg_sq.", moments, m->v, l, e);
}

/* Bytes of the tensor data of a slice list. */
static uint64_t slices_bytes(const ckpt_slice_list *l)
{
    uint64_t n = 0;
    for (int i = 0; i < l->n; i++)
        n += l->v[i].count * st_dtype_size(l->v[i].dtype);
    return n;
}

/* The most any rank moves in this save or load: each rank knows only its
 * own slices (`mine`), so the ranks exchange their counts (one number each,
 * before any file is touched: a plain, watched collective). A rank whose
 * slices could not be listed offers 0 and reports its failure at the next
 * agreement. */
static int busiest_rank_bytes(moe_trainer *t, uint64_t mine, uint64_t *most, moe_err *e)
{
    int64_t *all = calloc((size_t)t->world, sizeof *all), v = (int64_t)mine;
    *most = 0;
    if (!all)
        return moe_errf(e, "out of memory");
    int rc = comm_allgather(t->par.world, &v, all, 1, MOE_DT_INT64, e);
    for (int r = 0; !rc && r < t->world; r++)
        if ((uint64_t)all[r] > *most)
            *most = (uint64_t)all[r];
    free(all);
    return rc;
}

/* This rank's file (the slices l) into dir; its index record into *record. */
static int write_rank_file(moe_trainer *t, const char *dir, const ckpt_slice_list *l,
                           json_writer *record, moe_err *e)
{
    char name[64];
    snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", t->rank, t->world);
    return shard_write(dir, name, l, CKPT_BLOCK_BYTES, t->ckpt->staging, t->ckpt->staging_bytes,
                       record, e);
}

/* Every rank's record, in rank order, on every rank (*texts: malloc'd,
 * one after another; lens[r] bytes each). */
static int gather_records(moe_trainer *t, const json_writer *rec, char **texts, size_t *lens,
                          moe_err *e)
{
    int W = t->world;
    int64_t mine = (int64_t)rec->len, *all = calloc((size_t)W, sizeof *all);
    size_t *displs = calloc((size_t)W, sizeof *displs);
    *texts = NULL;
    int rc = !all || !displs ? moe_errf(e, "out of memory") : 0;
    if (!rc)
        rc = comm_allgather(t->par.world, &mine, all, 1, MOE_DT_INT64, e);
    size_t total = 0;
    for (int r = 0; !rc && r < W; r++) {
        lens[r] = (size_t)all[r];
        displs[r] = total;
        total += lens[r];
    }
    if (!rc && !(*texts = malloc(total + 1)))
        rc = moe_errf(e, "out of memory for the checkpoint index");
    if (!rc)
        rc = comm_allgatherv(t->par.world, rec->buf, rec->len, *texts, lens, displs, MOE_DT_BYTE, e);
    free(all);
    free(displs);
    return rc;
}

/* Rank 0: the index from the records, the ranks' digests for MANIFEST. */
static int write_index(moe_trainer *t, const char *dir, const char *texts, const size_t *lens,
                       ckpt_hashed *pre, moe_err *e)
{
    const char *p = texts;
    for (int r = 0; r < t->world; r++) {
        json_doc *doc;
        if (json_parse(p, lens[r], NULL, &doc, e)) /* our own records: checked all the same */
            return moe_err_prefix(e, "rank %d's checkpoint record", r);
        const json_value *root = json_root(doc), *f = json_get(root, "file"),
                         *sz = json_get(root, "size"), *h = json_get(root, "sha256");
        pre[r].name = strdup(f && f->type == JSON_STRING ? f->str.s : "");
        snprintf(pre[r].hex, sizeof pre[r].hex, "%s", h && h->type == JSON_STRING ? h->str.s : "");
        pre[r].size = sz && sz->type == JSON_NUMBER ? (uint64_t)sz->num.integer : 0;
        json_free(doc);
        if (!pre[r].name)
            return moe_errf(e, "out of memory");
        p += lens[r];
    }
    return shard_index_write(dir, t->par.layout, CKPT_BLOCK_BYTES, texts, lens, t->world, e);
}

static int write_small_files(moe_trainer *t, const char *dir, moe_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hf_config_write(path, &t->cfg.model, e))
        return -1;
    snprintf(path, sizeof path, "%s/train_state.json", dir);
    if (write_state_json(t, path, e))
        return -1;
    snprintf(path, sizeof path, "%s/moekit.cfg", dir);
    return config_save(&t->cfg, path, e);
}

/* Rank 0, once every rank's file is on disk: index, small files, commit. */
static int commit_on_rank0(moe_trainer *t, ckpt_txn *txn, const char *texts, const size_t *lens,
                           uint64_t *bytes, moe_err *e)
{
    ckpt_hashed *pre = calloc((size_t)t->world, sizeof *pre);
    int rc = pre ? 0 : moe_errf(e, "out of memory");
    if (!rc)
        rc = write_index(t, txn->tmp_dir, texts, lens, pre, e) ||
             write_small_files(t, txn->tmp_dir, e) ||
             ckpt_commit_hashed(txn, t->cfg.checkpoint.max_checkpoints, pre, t->world, e);
    for (int r = 0; pre && r < t->world; r++) {
        *bytes += pre[r].size;
        free((char *)pre[r].name);
    }
    free(pre);
    return rc;
}

/* Rank 0 opens the transaction; every rank learns its temp directory. */
static int begin_everywhere(moe_trainer *t, ckpt_txn *txn, char *tmp, moe_err *e)
{
    struct {
        int32_t failed;
        char dir[4096];
    } b;
    memset(&b, 0, sizeof b);
    if (t->rank == 0) {
        if (ckpt_begin(txn, t->cfg.checkpoint.ckpt_dir, t->step, e)) {
            moe_err_prefix(e, "checkpoint.ckpt_dir");
            b.failed = 1;
        } else {
            snprintf(b.dir, sizeof b.dir, "%s", txn->tmp_dir);
        }
    }
    /* rank 0 only makes directories and sweeps stale temp ones: no bulk bytes,
     * the allowance's parallel.timeout_s covers it */
    ckpt_allow(&t->cfg, 0);
    if (comm_agree(t->par.world, b.failed, "starting a checkpoint", e) ||
        comm_broadcast(t->par.world, &b, sizeof b, 0, e))
        return -1;
    memcpy(tmp, b.dir, sizeof b.dir);
    return 0;
}

int trainer_save_checkpoint(moe_trainer *t, moe_err *e)
{
    double t0 = now_s();
    ckpt_io_peak_reset();
    ckpt_txn txn;
    char tmp[4096];
    memset(&txn, 0, sizeof txn);
    ckpt_slice_list l = {0};
    moe_err mine;
    int failed = ckpt_io_staging(t, &mine) || state_slices(t, 1, 0, &l, &mine);
    uint64_t most;
    if (busiest_rank_bytes(t, failed ? 0 : slices_bytes(&l), &most, e) ||
        begin_everywhere(t, &txn, tmp, e)) {
        ckpt_slices_free(&l);
        return moe_err_prefix(e, "saving the checkpoint of step %d", t->step);
    }
    json_writer rec;
    jw_init(&rec, 0);
    if (failed)
        *e = mine;
    else
        failed = write_rank_file(t, tmp, &l, &rec, e) || jw_finish(&rec, e);
    ckpt_slices_free(&l);
    /* waits for the slowest writer: the largest rank file */
    ckpt_allow(&t->cfg, most);
    int rc = comm_agree(t->par.world, failed, "writing the checkpoint files", e);
    char *texts = NULL;
    size_t *lens = calloc((size_t)t->world, sizeof *lens);
    if (!rc)
        rc = lens ? gather_records(t, &rec, &texts, lens, e) : moe_errf(e, "out of memory");
    failed = rc;
    uint64_t bytes = 0, index_bytes = 0;
    for (int r = 0; !rc && r < t->world; r++)
        index_bytes += lens[r];
    if (!failed && t->rank == 0)
        failed = commit_on_rank0(t, &txn, texts, lens, &bytes, e);
    if (t->rank == 0 && txn.tmp_dir[0])
        ckpt_abort(&txn);
    jw_free(&rec);
    free(texts);
    free(lens);
    /* waits for rank 0's commit: the index is the ranks' records one after
     * another (every rank holds them: the same count everywhere), written and
     * read back for its SHA-256; the small files and the fsyncs are in the
     * allowance's parallel.timeout_s */
    if (!rc)
        ckpt_allow(&t->cfg, 2 * index_bytes);
    if (rc || comm_agree(t->par.world, failed, "saving a checkpoint", e))
        return moe_err_prefix(e, "saving the checkpoint of step %d (the previous one is kept)",
                              t->step);
    if (comm_broadcast(t->par.world, txn.final_dir, sizeof txn.final_dir, 0, e))
        return -1;
    snprintf(t->ckpt->last_saved, sizeof t->ckpt->last_saved, "%s", txn.final_dir);
    t->ckpt->last_step = t->step;
    ckpt_io_report(t, "saved", txn.final_dir, now_s() - t0, bytes);
    return 0;
}

int trainer_save_final_model(moe_trainer *t, moe_err *e)
{
    /* the export reads the run's last checkpoint: save one unless this step's is there */
    if ((!t->ckpt->last_saved[0] || t->ckpt->last_step != t->step) &&
        trainer_save_checkpoint(t, e))
        return -1;
    return ckpt_io_final_model(t, e);
}

/* ---- loading -------------------------------------------------------------------- */

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

/* This rank's part: its slices l, from whichever files hold them. */
static int load_local(moe_trainer *t, const char *dir, const ckpt_slice_list *l,
                      int weights_only, train_state *st, uint64_t *bytes_read, moe_err *e)
{
    moe_model_cfg hc;
    if (weights_check(dir, &t->cfg.model, &hc, weights_only, e) || ckpt_io_staging(t, e))
        return -1;
    shard_set *s = NULL;
    int rc = shard_set_open(dir, &s, e) ||
             shard_set_fill(s, l, t->ckpt->staging, t->ckpt->staging_bytes, e);
    *bytes_read = s ? shard_set_bytes_read(s) : 0;
    shard_set_close(s);
    if (!rc && !weights_only) {
        char path[4200];
        snprintf(path, sizeof path, "%s/train_state.json", dir);
        rc = read_state_json(path, st, e);
    }
    return rc;
}

/* Every rank reads what it holds, nothing else: a checkpoint saved at one
 * EP/DP resumes at any other, and no rank sees the whole model. */
int trainer_load_checkpoint(moe_trainer *t, const char *dir, int weights_only, moe_err *e)
{
    double t0 = now_s();
    train_state st;
    memset(&st, 0, sizeof st);
    uint64_t bytes = 0, most;
    ckpt_slice_list l = {0};
    int failed = state_slices(t, 0, weights_only, &l, e);
    /* a slice is read in whole digest blocks (at most one more at each end,
     * in each file it spans: a bound from the layout the run does not know
     * before it reads the index, so the allowance's parallel.timeout_s
     * covers slices cut over many files) */
    uint64_t mine = failed ? 0 : slices_bytes(&l) + (uint64_t)l.n * 2 * CKPT_BLOCK_BYTES;
    moe_err ex;
    if (busiest_rank_bytes(t, mine, &most, &ex)) {
        ckpt_slices_free(&l);
        if (!failed)
            *e = ex;
        return moe_err_prefix(e, "loading %s", dir);
    }
    if (!failed)
        failed = load_local(t, dir, &l, weights_only, &st, &bytes, e);
    ckpt_slices_free(&l);
    /* waits for the slowest reader */
    ckpt_allow(&t->cfg, most);
    int rc = comm_agree(t->par.world, failed, "reading the checkpoint", e);
    if (!rc && t->zero) /* each rank loaded its shard of the weights */
        rc = zero_ckpt_loaded(t->zero, e);
    if (!rc && !weights_only) {
        t->step = (int)st.step;
        t->tokens_seen = (uint64_t)st.tokens_seen;
        if (dataset_seek(t->data, st.cursor, e))
            rc = moe_err_prefix(e, "%s/train_state.json: data cursor", dir);
    }
    if (!rc)
        rc = comm_allreduce_sum(t->par.world, &bytes, 1, MOE_DT_INT64, e);
    if (rc)
        return moe_err_prefix(e, "loading %s", dir);
    ckpt_io_report(t, "read", dir, now_s() - t0, bytes);
    if (weights_only && !t->quiet && t->rank == 0)
        printf("moe-train: initialised the weights from %s\n", dir);
    return 0;
}

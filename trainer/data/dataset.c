/* Opening a dataset: resolve data.files, read every record into one token
 * array (BOS, bases, EOS per record), split each record into its training
 * and validation regions, and precompute what the start-up summary and the
 * resume check need. */
#include "data_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Absolute; else relative to the current directory when it exists there;
 * else relative to the data directory. */
static int resolve_path(const char *name, const char *data_dir, int index, char *out, size_t cap,
                        moe_err *e)
{
    if (name[0] == '\0')
        return moe_errf(e, "data.files[%d] is an empty string", index);
    if (name[0] == '/' || access(name, F_OK) == 0) {
        if ((size_t)snprintf(out, cap, "%s", name) >= cap)
            return moe_errf(e, "data.files[%d] '%s': path too long", index, name);
        return 0;
    }
    if ((size_t)snprintf(out, cap, "%s/%s", data_dir, name) >= cap)
        return moe_errf(e, "data.files[%d] '%s': path too long under data dir %s", index, name,
                        data_dir);
    if (access(out, F_OK) == 0)
        return 0;
    return moe_errf(e, "data.files[%d] '%s': not found (looked in the current directory and in the "
                    "data dir %s)", index, name, data_dir);
}

static int reserve_tokens(moe_dataset *ds, uint64_t need, const char *path, moe_err *e)
{
    if (need <= ds->tokens_cap)
        return 0;
    uint64_t cap = ds->tokens_cap ? ds->tokens_cap : (1u << 20);
    while (cap < need)
        cap *= 2;
    uint8_t *p = realloc(ds->tokens, cap);
    if (!p)
        return moe_errf(e, "%s: out of memory holding %" PRIu64 " tokens", path, need);
    ds->tokens = p;
    ds->tokens_cap = cap;
    return 0;
}

/* fasta_read callback: append the record's tokens and lay out its windows. */
static int add_record(const moe_fasta_record *rec, void *ctx, moe_err *e)
{
    moe_dataset *ds = ctx;
    uint64_t start = ds->n_tokens, len = (uint64_t)rec->len + 2;
    if (reserve_tokens(ds, start + len, rec->path, e) < 0)
        return -1;
    uint8_t *t = ds->tokens + start;
    t[0] = MOE_TOK_BOS;
    tok_encode(rec->seq, t + 1, rec->len);
    t[len - 1] = MOE_TOK_EOS;
    ds->n_tokens += len;
    ds->bases += rec->len;
    ds->n_records++;

    uint64_t n_val = layout_val_windows(len, ds->seq_length, ds->val_fraction);
    uint64_t val_len = n_val ? n_val * (uint64_t)ds->seq_length + 1 : 0;
    if (split_add_region(&ds->train, start, len - val_len, ds->seq_length, e) < 0)
        return -1;
    if (n_val && split_add_region(&ds->val, start + len - val_len, val_len, ds->seq_length, e) < 0)
        return -1;
    return 0;
}

static double val_entropy(moe_dataset *ds)
{
    uint64_t counts[MOE_TOK_VOCAB] = {0}, total = 0;
    size_t T = (size_t)ds->seq_length;
    int32_t *in = malloc(T * sizeof *in), *tg = malloc(T * sizeof *tg);
    double h = NAN;
    if (!in || !tg)
        goto out;
    for (uint64_t id = 0; id < ds->val.n_windows; id++) {
        dataset_write_window(ds, &ds->val, id, 0, in, tg);
        for (size_t t = 0; t < T; t++)
            if (tg[t] >= 0) {
                counts[tg[t]]++;
                total++;
            }
    }
    if (total == 0)
        goto out;
    h = 0;
    for (int k = 0; k < MOE_TOK_VOCAB; k++)
        if (counts[k]) {
            double p = (double)counts[k] / (double)total;
            h -= p * log(p);
        }
out:
    free(in);
    free(tg);
    return h;
}

/* Identifies what positions in the order mean: the tokens, the window
 * layout, the seed and whether it shuffles. Augmentation and masking are
 * left out: changing them on resume is a legitimate choice. */
static uint64_t fingerprint(const moe_dataset *ds)
{
    uint64_t h = rng_hash3((uint64_t)ds->seq_length, (uint64_t)ds->stride, ds->seed);
    h = rng_hash3(h, (uint64_t)ds->shuffle, ds->train.n_windows);
    h = rng_hash3(h, ds->val.n_windows, ds->n_tokens);
    uint64_t i = 0, word;
    for (; i + 8 <= ds->n_tokens; i += 8) {
        memcpy(&word, ds->tokens + i, 8);
        h = rng_mix64(h ^ word) + i;
    }
    for (; i < ds->n_tokens; i++)
        h = rng_mix64(h ^ ds->tokens[i]);
    return h ? h : 1; /* 0 means "unchecked" in a cursor */
}

static int check_settings(const moe_data_cfg *dc, int seq_length, int dp_rank, int dp_size,
                          moe_err *e)
{
    if (seq_length < 1)
        return moe_errf(e, "train.seq_length = %d: must be at least 1", seq_length);
    if (dc->stride < 0)
        return moe_errf(e, "data.stride = %d: must be >= 0 (0 means train.seq_length)", dc->stride);
    if (!(dc->val_fraction >= 0 && dc->val_fraction < 1))
        return moe_errf(e, "data.val_fraction = %g: must be in [0, 1)", dc->val_fraction);
    if (!(dc->reverse_complement >= 0 && dc->reverse_complement <= 1))
        return moe_errf(e, "data.reverse_complement = %g: a probability, must be in [0, 1]",
                        dc->reverse_complement);
    if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size)
        return moe_errf(e, "data-parallel rank %d of %d: need dp_size >= 1 and 0 <= rank < dp_size",
                        dp_rank, dp_size);
    if (dc->n_files < 1)
        return moe_errf(e, "data.files is empty: name at least one FASTA file");
    if (dc->n_files > MOE_MAX_FILES)
        return moe_errf(e, "data.files has %d entries: at most %d", dc->n_files, MOE_MAX_FILES);
    return 0;
}

int dataset_open(moe_dataset **out, const moe_data_cfg *dc, int seq_length, uint64_t seed,
                 int dp_rank, int dp_size, const char *data_dir, moe_err *e)
{
    *out = NULL;
    if (check_settings(dc, seq_length, dp_rank, dp_size, e) < 0)
        return -1;
    if (!data_dir)
        data_dir = getenv("MOE_DATA_DIR");
    if (!data_dir || !*data_dir)
        data_dir = MOE_DATA_DIR_DEFAULT;

    moe_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return moe_errf(e, "out of memory for the dataset");
    ds->seq_length = seq_length;
    ds->window = seq_length + 1;
    ds->stride = dc->stride ? dc->stride : seq_length;
    ds->seed = seed;
    ds->dp_rank = dp_rank;
    ds->dp_size = dp_size;
    ds->shuffle = dc->shuffle != 0;
    ds->mask_degenerate = dc->mask_degenerate_bases != 0;
    ds->rc_prob = dc->reverse_complement;
    ds->val_fraction = dc->val_fraction;
    ds->n_files = dc->n_files;
    ds->train.stride = ds->stride;
    ds->val.stride = seq_length; /* validation windows do not overlap */
    ds->scratch = malloc((size_t)ds->window);
    if (!ds->scratch) {
        moe_errf(e, "out of memory for a window of %d tokens", ds->window);
        goto fail;
    }

    for (int f = 0; f < dc->n_files; f++) {
        char path[MOE_PATH_MAX + 512];
        if (resolve_path(dc->files[f], data_dir, f, path, sizeof path, e) < 0)
            goto fail;
        if (fasta_read(path, add_record, ds, e) < 0) {
            moe_err_prefix(e, "data.files[%d]", f);
            goto fail;
        }
    }
    ds->val_entropy = val_entropy(ds);
    ds->fingerprint = fingerprint(ds);
    *out = ds;
    return 0;
fail:
    dataset_close(ds);
    return -1;
}

void dataset_close(moe_dataset *ds)
{
    if (!ds)
        return;
    free(ds->tokens);
    split_free(&ds->train);
    split_free(&ds->val);
    free(ds->perm);
    free(ds->scratch);
    free(ds);
}

void dataset_stats(const moe_dataset *ds, moe_data_stats *st)
{
    st->n_files = ds->n_files;
    st->n_records = ds->n_records;
    st->bases = ds->bases;
    st->train_windows = ds->train.n_windows;
    st->val_windows = ds->val.n_windows;
    st->train_tokens = ds->train.n_tokens;
    st->val_tokens = ds->val.n_tokens;
}

double dataset_val_unigram_entropy(const moe_dataset *ds)
{
    return ds->val_entropy;
}

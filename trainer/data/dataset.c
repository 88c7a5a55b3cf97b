/* Opening a dataset: its parts (parts.c), the split of every record into
 * training and validation regions (layout.c), and what the start-up summary
 * and the resume check need. */
#include "data_internal.h"
#include "../../common/install_dirs.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Validation window i of the whole dataset: parts in order. */
static const data_split *val_window(const moe_dataset *ds, uint64_t *id)
{
    int d = 0;
    while (*id >= ds->parts[d].val.n_windows) {
        *id -= ds->parts[d].val.n_windows;
        d++;
    }
    return &ds->parts[d].val;
}

/* Over every validation window; from a source that reads on demand (a
 * token store), over at most
 * VAL_ENTROPY_WINDOWS of them spread evenly (start-up must not read a large
 * corpus), VAL_ENTROPY_PACKED packed ones (each walks the record entries
 * between its held-out records: 1 / val_fraction entries a record). */
#define VAL_ENTROPY_WINDOWS 1024
#define VAL_ENTROPY_PACKED 64

static double val_entropy(moe_dataset *ds)
{
    int on_demand = 0; /* a source that would read its corpus for all of them */
    for (int d = 0; d < ds->n_parts; d++)
        on_demand |= ds->parts[d].src->reads_on_demand;
    uint64_t counts[MOE_TOK_VOCAB] = {0}, total = 0, n = ds->val_windows;
    uint64_t most = ds->pack ? VAL_ENTROPY_PACKED : VAL_ENTROPY_WINDOWS;
    uint64_t take = !on_demand || n < most ? n : most;
    size_t T = (size_t)ds->seq_length;
    int32_t *in = malloc(T * sizeof *in), *tg = malloc(T * sizeof *tg);
    double h = NAN;
    if (!in || !tg)
        goto out;
    for (uint64_t k = 0; k < take; k++) {
        uint64_t id = take == n ? k : (uint64_t)((double)k * (double)n / (double)take);
        const data_split *s = val_window(ds, &id);
        dataset_write_window(ds, s, id, 0, in, tg);
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

/* A blend weight in the fingerprint: weight x 1e9 as it always was, its
 * bits where that would not fit 64 bits (the conversion would be undefined). */
uint64_t fingerprint_weight_word(double weight)
{
    if (weight * 1e9 < 18446744073709551615.0)
        return (uint64_t)(weight * 1e9);
    uint64_t bits;
    memcpy(&bits, &weight, sizeof bits);
    return bits;
}

/* Identifies what positions in the order mean: the tokens, the window
 * layout, the seed and whether it shuffles. Augmentation and masking are
 * left out: changing them on resume is a legitimate choice. */
static uint64_t fingerprint(const moe_dataset *ds)
{
    uint64_t h = rng_hash3((uint64_t)ds->seq_length, (uint64_t)ds->stride, ds->seed);
    h = rng_hash3(h, (uint64_t)ds->shuffle, ds->train_windows);
    if (ds->pack) /* padded layouts keep the fingerprints they always had */
        h = rng_hash3(h, 0x5041434b4544ull /* "PACKED" */, ds->train_tokens);
    h = rng_hash3(h, ds->val_windows, ds->parts[0].n_tokens);
    for (int d = 0; d < ds->n_parts; d++) {
        const data_part *p = &ds->parts[d];
        h = p->src->fingerprint(p, h, ds->n_parts); /* a store: its checksum; FASTA: the tokens */
    }
    return h ? h : 1; /* 0 means "unchecked" in a cursor */
}

static void explain_no_val(moe_dataset *ds)
{
    uint64_t records = 0;
    for (int d = 0; d < ds->n_parts; d++)
        records += ds->parts[d].n_records;
    if (ds->val_windows)
        ds->no_val[0] = '\0';
    else if (!(ds->val_fraction > 0))
        snprintf(ds->no_val, sizeof ds->no_val, "data.val_fraction = 0");
    else
        snprintf(ds->no_val, sizeof ds->no_val, "%" PRIu64 " record(s): a record gives a held-out "
                 "tail only from 2 x (train.seq_length + 1) = %d tokens, and shorter ones are held "
                 "out whole only in a corpus of at least %d records", records, 2 * ds->window,
                 HOLDOUT_MIN_RECORDS);
}

const char *dataset_no_val_reason(const moe_dataset *ds)
{
    return ds->no_val[0] ? ds->no_val : NULL;
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
    if (dc->store[0] && dc->n_blend)
        return moe_errf(e, "data.store and data.blend are both set: name one store, or a blend");
    if (dc->pack < MOE_PACK_AUTO || dc->pack > MOE_PACK_PADDED)
        return moe_errf(e, "data.pack = %d: must be auto, packed or padded", (int)dc->pack);
    if (dc->n_files < 1 && !dc->store[0] && !dc->n_blend)
        return moe_errf(e, "data.files is empty: name at least one FASTA file (or set data.store)");
    for (int i = 0; i < dc->n_blend; i++)
        if (!(dc->blend[i].weight > 0) || !isfinite(dc->blend[i].weight))
            return moe_errf(e, "data.blend[%d].weight = %g: must be finite and > 0", i,
                            dc->blend[i].weight);
    return 0;
}

int dataset_open(moe_dataset **out, const moe_data_cfg *dc, int seq_length, uint64_t seed,
                 int dp_rank, int dp_size, const char *data_dir, moe_err *e)
{
    *out = NULL;
    if (check_settings(dc, seq_length, dp_rank, dp_size, e) < 0)
        return -1;
    char installed[4096];
    if (!data_dir)
        data_dir = getenv("MOE_DATA_DIR");
    if ((!data_dir || !*data_dir) && moe_install_path(MOE_INSTALL_DATA, installed,
                                                      sizeof installed) == 0)
        data_dir = installed;
    if (!data_dir || !*data_dir)
        data_dir = "data";

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
    /* auto: as the sources say (stores and blends packed, data.files padded) */
    ds->pack = dc->pack == MOE_PACK_PACKED ||
               (dc->pack == MOE_PACK_AUTO && seq_sources_pack_by_default(dc));
    ds->scratch = malloc((size_t)ds->window);
    if (!ds->scratch) {
        moe_errf(e, "out of memory for a window of %d tokens", ds->window);
        goto fail;
    }
    if (parts_open(ds, dc, data_dir, e) < 0)
        goto fail;
    for (int d = 0; d < ds->n_parts; d++) {
        const data_part *p = &ds->parts[d];
        ds->train_windows += p->train.n_windows;
        ds->val_windows += p->val.n_windows;
        ds->train_tokens += p->train.n_tokens;
        ds->val_tokens += p->val.n_tokens;
        if (dc->n_blend && p->train.n_windows == 0) {
            moe_errf(e, "data.blend[%d].store %s: no training window", d, dc->blend[d].store);
            goto fail;
        }
    }
    if (dc->n_blend) {
        if (!(ds->blend = malloc(sizeof *ds->blend)) ||
            blend_build(ds->blend, ds->parts, ds->n_parts, e) < 0)
            goto fail;
    }
    explain_no_val(ds);
    ds->val_entropy = val_entropy(ds);
    for (int d = 0; d < ds->n_parts; d++) /* what the sample read stays out of the RSS too */
        ds->parts[d].src->release_index(&ds->parts[d]);
    if (dataset_failed(ds, e))
        goto fail;
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
    parts_close(ds);
    free(ds->blend);
    free(ds->scratch);
    free(ds);
}

void dataset_stats(const moe_dataset *ds, moe_data_stats *st)
{
    memset(st, 0, sizeof *st);
    for (int d = 0; d < ds->n_parts; d++) {
        st->n_files += ds->parts[d].n_files;
        st->n_records += ds->parts[d].n_records;
        st->bases += ds->parts[d].n_bases;
    }
    st->train_windows = ds->train_windows;
    st->val_windows = ds->val_windows;
    st->train_tokens = ds->train_tokens;
    st->val_tokens = ds->val_tokens;
}

double dataset_val_unigram_entropy(const moe_dataset *ds)
{
    return ds->val_entropy;
}

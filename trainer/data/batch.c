/* Batches: the epoch order (seeded shuffle), the data-parallel slice of each
 * global batch (its windows written by window.c), and the cursor that
 * resumes all of it. */
#include "data_internal.h"

#include <inttypes.h>
#include <stdlib.h>

uint64_t dataset_order(moe_dataset *ds, data_part *p, uint64_t epoch, uint64_t i, moe_err *e)
{
    if (!ds->shuffle)
        return i;
    return order_at(&p->order, ds->seed, epoch, i, e);
}

static int check_batch(const moe_dataset *ds, int B, const char *what, moe_err *e)
{
    if (B < 1)
        return moe_errf(e, "%s: batch of %d windows: need at least 1", what, B);
    return 0;
}

uint64_t dataset_train_batches_per_epoch(const moe_dataset *ds, int B)
{
    if (B < 1)
        return 0;
    return ds->train_windows / ((uint64_t)ds->dp_size * (uint64_t)B);
}

/* Global draw i of a blend: which part, and that part's window. The part's
 * own epochs follow from how many of its windows came before. */
static int blend_window(moe_dataset *ds, uint64_t i, data_part **part, uint64_t *epoch,
                        uint64_t *id, moe_err *e)
{
    const data_blend *b = ds->blend;
    uint64_t k = i % BLEND_PERIOD, d = b->part[k];
    uint64_t nth = (i / BLEND_PERIOD) * b->quota[d] + b->rank[k];
    data_part *p = &ds->parts[d];
    *part = p;
    *epoch = nth / p->train.n_windows;
    *id = dataset_order(ds, p, *epoch, nth % p->train.n_windows, e);
    return *id == UINT64_MAX ? -1 : 0;
}

static int train_window(moe_dataset *ds, uint64_t i, int32_t *in, int32_t *tg, moe_err *e)
{
    data_part *p = &ds->parts[0];
    uint64_t epoch = ds->cur.epoch, id;
    if (ds->blend) {
        if (blend_window(ds, i, &p, &epoch, &id, e) < 0)
            return -1;
    } else if ((id = dataset_order(ds, p, epoch, i, e)) == UINT64_MAX) {
        return -1;
    }
    /* the part's index joins the hash for blends only: a single source draws
     * what it always drew */
    uint64_t salt = ds->blend ? (uint64_t)(p - ds->parts) << 48 : 0;
    int rc = ds->rc_prob > 0 &&
             rng_unit(rng_hash3(ds->seed ^ RNG_DOMAIN_REVCOMP ^ salt, epoch, id)) < ds->rc_prob;
    dataset_write_window(ds, &p->train, id, rc, in, tg);
    return 0;
}

int dataset_next_train(moe_dataset *ds, int B, int32_t *inputs, int32_t *targets, moe_err *e)
{
    if (check_batch(ds, B, "training data", e) < 0)
        return -1;
    uint64_t global = (uint64_t)ds->dp_size * (uint64_t)B, n = ds->train_windows;
    if (global > n)
        return moe_errf(e, "training data: one step takes %" PRIu64 " windows (micro-batch %d x %d "
                        "data-parallel ranks) but the training split has only %" PRIu64
                        " windows of %d tokens: use a smaller train.micro_batch_size, "
                        "train.seq_length or data.stride, or more data", global, B, ds->dp_size, n,
                        ds->seq_length);
    /* drop the tail: every rank rolls over together (a blend has no epochs of
     * its own: each store rolls over inside the draws) */
    if (!ds->blend && ds->cur.position + global > n) {
        ds->cur.epoch++;
        ds->cur.position = 0;
    }
    uint64_t first = ds->cur.position + (uint64_t)ds->dp_rank * (uint64_t)B;
    size_t T = (size_t)ds->seq_length;
    for (int b = 0; b < B; b++)
        if (train_window(ds, first + (uint64_t)b, inputs + (size_t)b * T, targets + (size_t)b * T,
                         e) < 0)
            return -1;
    if (dataset_failed(ds, e))
        return -1;
    ds->cur.position += global;
    return 0;
}

int dataset_val_batches(const moe_dataset *ds, int B)
{
    if (B < 1)
        return 0;
    return (int)((ds->val_windows + (uint64_t)B - 1) / (uint64_t)B);
}

int dataset_val_batch(moe_dataset *ds, int i, int B, int32_t *inputs, int32_t *targets, moe_err *e)
{
    if (check_batch(ds, B, "validation data", e) < 0)
        return -1;
    if (i < 0)
        return moe_errf(e, "validation data: batch index %d: must be >= 0", i);
    if (ds->val_windows == 0)
        return moe_errf(e, "validation data: none (%s)", dataset_no_val_reason(ds));
    uint64_t nb = (uint64_t)dataset_val_batches(ds, B);
    uint64_t first = ((uint64_t)i % nb) * (uint64_t)B;
    size_t T = (size_t)ds->seq_length;
    for (int b = 0; b < B; b++) {
        int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        uint64_t id = first + (uint64_t)b;
        if (id < ds->val_windows) {
            int d = 0;
            while (id >= ds->parts[d].val.n_windows) /* parts in order */
                id -= ds->parts[d++].val.n_windows;
            dataset_write_window(ds, &ds->parts[d].val, id, 0, in, tg);
        } else { /* fill the last batch with rows the loss ignores */
            for (size_t t = 0; t < T; t++) {
                in[t] = MOE_TOK_PAD;
                tg[t] = -1;
            }
        }
    }
    if (dataset_failed(ds, e))
        return -1;
    return 0;
}

int dataset_packed(const moe_dataset *ds)
{
    return ds->pack;
}

moe_data_cursor dataset_cursor(const moe_dataset *ds)
{
    moe_data_cursor c = ds->cur;
    c.fingerprint = ds->fingerprint;
    return c;
}

int dataset_seek(moe_dataset *ds, moe_data_cursor c, moe_err *e)
{
    if (c.fingerprint && c.fingerprint != ds->fingerprint)
        return moe_errf(e, "data cursor (epoch %" PRIu64 ", position %" PRIu64 ") was saved for "
                        "other data or settings (fingerprint %016" PRIx64 ", these files give %016"
                        PRIx64 "): resume with the same data.files (or data.store, data.blend), train.seq_length, data.stride, "
                        "data.val_fraction, data.shuffle and train.seed", c.epoch, c.position,
                        c.fingerprint, ds->fingerprint);
    if (!ds->blend && c.position > ds->train_windows)
        return moe_errf(e, "data cursor position %" PRIu64 " is past the end of an epoch of %" PRIu64
                        " training windows", c.position, ds->train_windows);
    ds->cur.epoch = c.epoch;
    ds->cur.position = c.position;
    return 0;
}

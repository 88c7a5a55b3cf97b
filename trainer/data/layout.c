/* Where windows start: per region, every stride tokens, plus one padded
 * window for the end; how much of each record is held out; and finding a
 * window from its id without a table per window or per record. */
#include "data_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>

uint64_t layout_window_count(uint64_t len, int seq_length, int stride)
{
    uint64_t T = (uint64_t)seq_length, S = (uint64_t)stride, W = T + 1;
    if (len < 2)
        return 0; /* no target */
    uint64_t n_full = len >= W ? (len - W) / S + 1 : 0;
    /* position of the last target a full window predicts (0: none) */
    uint64_t last = n_full ? (n_full - 1) * S + T : 0;
    /* a padded window for the rest, if it starts where it has a target
     * (with stride > seq_length the tail may fall in a skipped gap) */
    if (last < len - 1 && n_full * S <= len - 2)
        n_full++;
    return n_full;
}

uint64_t layout_val_windows(uint64_t len, int seq_length, double val_fraction)
{
    uint64_t T = (uint64_t)seq_length, W = T + 1;
    if (val_fraction <= 0 || len < 2 * W)
        return 0; /* tiny records train only */
    uint64_t n = (uint64_t)llround(val_fraction * (double)(len - 1) / (double)T);
    if (n < 1)
        n = 1;
    /* leave at least one full training window: len - n T - 1 >= W */
    uint64_t most = (len - 1 - W) / T;
    return n < most ? n : most;
}

void part_fail(data_part *p, const moe_err *e)
{
    if (!atomic_exchange(&p->failed, 1)) /* the first failure is the one reported */
        p->err = *e;
}

void part_record(data_part *p, uint64_t r, uint64_t *offset, uint64_t *length)
{
    moe_err e;
    if (p->failed || p->src->record(p, r, offset, length, &e) < 0) {
        if (!p->failed) /* the source filled e */
            part_fail(p, &e);
        *offset = *length = 0;
    }
}

static double holdout_draw(uint64_t r)
{
    return rng_unit(rng_hash3(RNG_DOMAIN_HOLDOUT, r, 0));
}

static int too_short_for_tail(const data_part *p, uint64_t len)
{
    return len < 2 * ((uint64_t)p->seq_length + 1);
}

int layout_held_out_whole(const data_part *p, uint64_t r, uint64_t len)
{
    if (!(p->val_fraction > 0) || !too_short_for_tail(p, len))
        return 0;
    return r == p->forced_val || holdout_draw(r) < p->val_fraction;
}

void layout_plan_holdout(data_part *p)
{
    p->forced_val = UINT64_MAX;
    if (!(p->val_fraction > 0) || p->n_records < HOLDOUT_MIN_RECORDS)
        return;
    uint64_t best = UINT64_MAX, start, len;
    double best_draw = 2;
    /* stops at the first record that validates: a full pass only for a
     * corpus that would otherwise have no held-out data */
    for (uint64_t r = 0; r < p->n_records && !p->failed; r++) {
        part_record(p, r, &start, &len);
        if (!too_short_for_tail(p, len) || holdout_draw(r) < p->val_fraction)
            return;
        if (holdout_draw(r) < best_draw) {
            best_draw = holdout_draw(r);
            best = r;
        }
    }
    p->forced_val = best;
}

void split_region(const data_split *s, uint64_t r, uint64_t *tok_start, uint64_t *len)
{
    data_part *p = s->part;
    uint64_t start, n;
    part_record(p, r, &start, &n);
    uint64_t n_val = layout_val_windows(n, p->seq_length, p->val_fraction);
    uint64_t val_len = n_val ? n_val * (uint64_t)p->seq_length + 1 : 0;
    if (layout_held_out_whole(p, r, n))
        val_len = n;
    if (s->is_val) {
        *tok_start = start + n - val_len;
        *len = val_len;
    } else {
        *tok_start = start;
        *len = n - val_len;
    }
}

static uint64_t region_windows(const data_split *s, uint64_t r, uint64_t *tok_start, uint64_t *len)
{
    split_region(s, r, tok_start, len);
    return layout_window_count(*len, s->part->seq_length, s->stride);
}

/* Block b's records: their windows and tokens in this split. */
static void tally_block(const data_split *s, size_t b, uint64_t *windows, uint64_t *tokens)
{
    uint64_t r0 = (uint64_t)b * LAYOUT_BLOCK, r1 = r0 + LAYOUT_BLOCK, w = 0, t = 0;
    if (r1 > s->part->n_records)
        r1 = s->part->n_records;
    for (uint64_t r = r0; r < r1; r++) {
        uint64_t start, len;
        if (s->packed)
            split_region(s, r, &start, &len);
        else
            w += region_windows(s, r, &start, &len);
        t += len;
    }
    *windows = w;
    *tokens = t;
}

/* Blocks of records are independent, so they are tallied on every thread
 * (one pass reads each record's index entries: ~35 ns a record on one
 * thread, 35 s at 10^9 records), then block_first is their running sum. */
#define LAYOUT_PARALLEL_BLOCKS 4096

int split_build(data_split *s, data_part *part, int is_val, int stride, int packed, moe_err *e)
{
    s->part = part;
    s->is_val = is_val;
    s->stride = stride;
    s->packed = packed;
    s->n_windows = s->n_tokens = 0;
    s->n_blocks = (size_t)((part->n_records + LAYOUT_BLOCK - 1) / LAYOUT_BLOCK);
    s->block_first = malloc((s->n_blocks ? s->n_blocks : 1) * sizeof *s->block_first);
    if (!s->block_first)
        return moe_errf(e, "out of memory for the window layout of %llu records",
                        (unsigned long long)part->n_records);
    uint64_t windows = 0, tokens = 0;
    long long n_blocks = (long long)s->n_blocks;
#pragma omp parallel for schedule(static) reduction(+ : windows, tokens) \
    if (n_blocks >= LAYOUT_PARALLEL_BLOCKS)
    for (long long b = 0; b < n_blocks; b++) {
        uint64_t w, t;
        tally_block(s, (size_t)b, &w, &t);
        s->block_first[b] = packed ? t : w; /* the block's count, until the sum below */
        windows += w;
        tokens += t;
    }
    /* each block's first window id (packed: its first token of the stream) */
    uint64_t run = 0;
    for (size_t b = 0; b < s->n_blocks; b++) {
        uint64_t n = s->block_first[b];
        s->block_first[b] = run;
        run += n;
    }
    s->n_tokens = tokens;
    /* packed, the stream is one region: windows every stride, the last one padded */
    s->n_windows = packed ? layout_window_count(tokens, part->seq_length, stride) : windows;
    if (part->failed) {
        *e = part->err;
        return -1;
    }
    return 0;
}

void split_window(const data_split *s, uint64_t id, int seq_length, uint64_t *tok_start,
                  uint64_t *n_real)
{
    /* the last block whose first window is <= id */
    size_t lo = 0, hi = s->n_blocks;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->block_first[mid] <= id)
            lo = mid;
        else
            hi = mid;
    }
    uint64_t first = s->block_first[lo], r = (uint64_t)lo * LAYOUT_BLOCK, start = 0, len = 0, n;
    for (;; r++) {
        if (r >= s->part->n_records) { /* only a store damaged since the layout was built */
            moe_err pe;
            moe_errf(&pe, "window %" PRIu64 " past the last record", id);
            part_fail(s->part, &pe);
            *tok_start = *n_real = 0;
            return;
        }
        n = region_windows(s, r, &start, &len);
        if (id < first + n)
            break;
        first += n;
    }
    uint64_t offset = (id - first) * (uint64_t)s->stride;
    uint64_t rest = len - offset, W = (uint64_t)seq_length + 1;
    *tok_start = start + offset;
    *n_real = rest < W ? rest : W;
}

/* The last block whose first entry is <= key. */
static size_t find_block(const data_split *s, uint64_t key)
{
    size_t lo = 0, hi = s->n_blocks;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->block_first[mid] <= key)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

uint64_t split_packed_read(const data_split *s, uint64_t offset, uint64_t n, uint8_t *out)
{
    data_part *p = s->part;
    if (offset >= s->n_tokens || s->n_blocks == 0)
        return 0;
    size_t b = find_block(s, offset);
    uint64_t at = s->block_first[b], got = 0, start, len;
    for (uint64_t r = (uint64_t)b * LAYOUT_BLOCK; r < p->n_records && got < n; r++) {
        /* a block with none of this split's tokens (a sparse held-out split) is
         * stepped over whole */
        size_t rb = (size_t)(r / LAYOUT_BLOCK);
        if (r % LAYOUT_BLOCK == 0 && rb + 1 < s->n_blocks &&
            s->block_first[rb + 1] == s->block_first[rb]) {
            r += LAYOUT_BLOCK - 1;
            continue;
        }
        split_region(s, r, &start, &len);
        if (p->failed)
            return 0;
        if (at + len <= offset) { /* still before the window */
            at += len;
            continue;
        }
        uint64_t skip = offset > at ? offset - at : 0, take = len - skip;
        if (take > n - got)
            take = n - got;
        moe_err re;
        if (p->src->read(p, start + skip, (size_t)take, out + got, &re) < (size_t)take) {
            part_fail(p, &re);
            return 0;
        }
        got += take;
        at += len;
    }
    return got;
}

void split_free(data_split *s)
{
    free(s->block_first);
    s->block_first = NULL;
    s->n_blocks = 0;
}

/* Where windows start: per region, every stride tokens, plus one padded
 * window for the end; and how much of each record is held out. */
#include "data_internal.h"

#include <math.h>
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

int split_add_region(data_split *s, uint64_t tok_start, uint64_t len, int seq_length, moe_err *e)
{
    if (s->n_regions == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        data_region *p = realloc(s->regions, cap * sizeof *p);
        if (!p)
            return moe_errf(e, "out of memory for %zu data regions", cap);
        s->regions = p;
        s->cap = cap;
    }
    data_region *r = &s->regions[s->n_regions++];
    r->tok_start = tok_start;
    r->len = len;
    r->first_window = s->n_windows;
    r->n_windows = layout_window_count(len, seq_length, s->stride);
    s->n_windows += r->n_windows;
    s->n_tokens += len;
    return 0;
}

void split_window(const data_split *s, uint64_t id, int seq_length, uint64_t *tok_start,
                  uint64_t *n_real)
{
    /* the last region whose first window is <= id */
    size_t lo = 0, hi = s->n_regions;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->regions[mid].first_window <= id)
            lo = mid;
        else
            hi = mid;
    }
    const data_region *r = &s->regions[lo];
    uint64_t offset = (id - r->first_window) * (uint64_t)s->stride;
    uint64_t rest = r->len - offset, W = (uint64_t)seq_length + 1;
    *tok_start = r->tok_start + offset;
    *n_real = rest < W ? rest : W;
}

void split_free(data_split *s)
{
    free(s->regions);
    s->regions = NULL;
    s->n_regions = s->cap = 0;
}

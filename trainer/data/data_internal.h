/* moekit data module internals: shared by its sources and its unit test,
 * not by the rest of the trainer (which uses data.h only). */
#ifndef MOE_DATA_INTERNAL_H
#define MOE_DATA_INTERNAL_H

#include "data.h"

/* ---- random numbers: splitmix64 seeding, xoshiro256** streams, and a
 * counter-based hash for per-item draws that do not depend on call order. */

typedef struct {
    uint64_t s[4];
} moe_xoshiro;

uint64_t rng_mix64(uint64_t x);                     /* splitmix64 finaliser */
uint64_t rng_hash3(uint64_t a, uint64_t b, uint64_t c);
double rng_unit(uint64_t bits);                     /* [0, 1) from 53 high bits */
void xoshiro_seed(moe_xoshiro *x, uint64_t seed);
uint64_t xoshiro_next(moe_xoshiro *x);
uint64_t xoshiro_below(moe_xoshiro *x, uint64_t n); /* uniform in [0, n), n >= 1 */

/* Domain tags so that the shuffle and the augmentation draw unrelated
 * numbers from the same train.seed. */
#define RNG_DOMAIN_SHUFFLE 0x53485546464c4531ull /* "SHUFFLE1" */
#define RNG_DOMAIN_REVCOMP 0x5245564341554731ull /* "REVCAUG1" */

/* ---- window layout ------------------------------------------------------
 * A region is a run of tokens inside one record (its training part or its
 * validation part). Windows are numbered across the regions of a split. */

typedef struct {
    uint64_t tok_start;    /* offset of the region's first token in the token array */
    uint64_t len;          /* tokens in the region */
    uint64_t first_window; /* id of the region's first window */
    uint64_t n_windows;
} data_region;

typedef struct {
    data_region *regions;
    size_t n_regions, cap;
    uint64_t n_windows, n_tokens;
    int stride;
} data_split;

/* Windows of seq_length + 1 tokens starting every stride tokens in a region
 * of len tokens, counting the padded window that covers the end. */
uint64_t layout_window_count(uint64_t len, int seq_length, int stride);
/* How many validation windows a record of len tokens gives up. */
uint64_t layout_val_windows(uint64_t len, int seq_length, double val_fraction);
/* Append a region (len >= 2) to a split. */
int split_add_region(data_split *s, uint64_t tok_start, uint64_t len, int seq_length, moe_err *e);
/* Where window id of the split starts in the token array, and how many of
 * its seq_length + 1 tokens are real (the rest is PAD). */
void split_window(const data_split *s, uint64_t id, int seq_length, uint64_t *tok_start,
                  uint64_t *n_real);
void split_free(data_split *s);

/* ---- the dataset -------------------------------------------------------- */

struct moe_dataset {
    int seq_length, window, stride; /* window = seq_length + 1 */
    uint64_t seed;
    int dp_rank, dp_size;
    int shuffle, mask_degenerate;
    double rc_prob, val_fraction;

    uint8_t *tokens;   /* every record: BOS, bases, EOS */
    uint64_t n_tokens, tokens_cap;
    int n_files, n_records;
    uint64_t bases;
    data_split train, val;
    double val_entropy;
    uint64_t fingerprint;

    moe_data_cursor cur;
    uint64_t *perm;    /* the current epoch's order of training windows (shuffle only) */
    uint64_t perm_epoch;
    int perm_ready;
    uint8_t *scratch;  /* one window */
};

/* Write window id of split s as one row: inputs[T], targets[T]. */
void dataset_write_window(moe_dataset *ds, const data_split *s, uint64_t id, int reverse_complement,
                          int32_t *inputs, int32_t *targets);
/* Reverse-complement the base tokens of w[0..n) in place; special tokens
 * keep their positions. */
void reverse_complement_bases(uint8_t *w, size_t n);
/* The i-th training window (0-based) of epoch `epoch`'s order. */
uint64_t dataset_order(moe_dataset *ds, uint64_t epoch, uint64_t i);

#endif

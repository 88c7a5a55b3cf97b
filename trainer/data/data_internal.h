/* moekit data module internals: shared by its sources and its unit test,
 * not by the rest of the trainer (which uses data.h only). */
#ifndef MOE_DATA_INTERNAL_H
#define MOE_DATA_INTERNAL_H

#include "data.h"
#include "seq_source.h"
#include "store.h"

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
/* The record-level held-out split: a fixed key, not train.seed, so runs
 * with different seeds are scored on the same held-out records. */
#define RNG_DOMAIN_HOLDOUT 0x484f4c444f555431ull /* "HOLDOUT1" */

/* ---- window layout ------------------------------------------------------
 * Every record gives each split one region: its training part, or its
 * held-out tail (layout_val_windows). Windows are numbered across the
 * regions of a split in record order. Nothing is stored per window or per
 * record: a split keeps the first window id of every LAYOUT_BLOCK-th record,
 * and a window is found by a binary search over those and a short walk over
 * the records of one block, computed from the record index (the store's
 * index.bin, mapped, or the records read from data.files: part_record). */

#define LAYOUT_BLOCK 64

typedef struct data_part data_part;

typedef struct {
    data_part *part;
    int is_val;
    int stride;
    int packed;            /* the regions are one stream cut into windows (data.pack) */
    /* for every block b: the first window id of record b * LAYOUT_BLOCK, or
     * packed, where its region starts in the stream */
    uint64_t *block_first;
    size_t n_blocks;
    uint64_t n_windows, n_tokens; /* n_tokens: the regions' tokens (packed: the stream's) */
} data_split;

/* Windows of seq_length + 1 tokens starting every stride tokens in a region
 * of len tokens, counting the padded window that covers the end. */
uint64_t layout_window_count(uint64_t len, int seq_length, int stride);
/* How many validation windows a record of len tokens gives up from its
 * tail (records of at least two windows). */
uint64_t layout_val_windows(uint64_t len, int seq_length, double val_fraction);
/* Records too short for a tail are held out whole: record r with
 * probability val_fraction (a hash of r under RNG_DOMAIN_HOLDOUT). When
 * that holds out nothing and no record has a tail, a part of at least
 * HOLDOUT_MIN_RECORDS records holds out the short record of the smallest
 * hash, so every corpus of more than a handful of records validates. */
#define HOLDOUT_MIN_RECORDS 8
int layout_held_out_whole(const data_part *p, uint64_t r, uint64_t len);
/* Choose the part's forced held-out record, if it needs one (above). */
void layout_plan_holdout(data_part *p);
/* The region record r gives split s (len 0: none). */
void split_region(const data_split *s, uint64_t r, uint64_t *tok_start, uint64_t *len);
/* Count the windows of every record of the part (packed: the stream's) and
 * keep the block starts. */
int split_build(data_split *s, data_part *part, int is_val, int stride, int packed, moe_err *e);
/* Copy at most n tokens of a packed split's stream from offset on, region
 * after region (a store's through pread); returns how many there were (the
 * stream may end first). 0 with the part failed on a store error. */
uint64_t split_packed_read(const data_split *s, uint64_t offset, uint64_t n, uint8_t *out);
/* Where window id of the split starts in the part's tokens, and how many of
 * its seq_length + 1 tokens are real (the rest is PAD). */
void split_window(const data_split *s, uint64_t id, int seq_length, uint64_t *tok_start,
                  uint64_t *n_real);
void split_free(data_split *s);

/* ---- permutations -------------------------------------------------------
 * The order of an epoch's n training windows, seeded from (seed, epoch):
 * Fisher-Yates over a table while the table stays small (ORDER_TABLE_MAX
 * windows, 16 MiB; every existing run's order), else a keyed Feistel
 * bijection with cycle walking, which needs no memory at all. */

#define ORDER_TABLE_MAX (1ull << 21)

typedef struct {
    uint64_t n;
    uint64_t *table;       /* n <= ORDER_TABLE_MAX */
    uint64_t epoch;
    int ready;
    uint64_t key, half_bits; /* the Feistel form */
} data_order;

uint64_t order_at(data_order *o, uint64_t seed, uint64_t epoch, uint64_t i, moe_err *e);
void order_free(data_order *o);

/* ---- the dataset -------------------------------------------------------- */

/* One source of windows: the records of data.files read into memory, or
 * one mapped token store (data.store, or one entry of data.blend); src says
 * which (seq_source.h) and reads its tokens and records. */
struct data_part {
    const uint8_t *tokens;
    uint64_t n_tokens;
    uint64_t n_records, n_bases;
    uint64_t n_files;
    int seq_length;
    double val_fraction, weight;
    uint64_t forced_val;   /* the record held out whole when no other is (UINT64_MAX: none) */
    data_split train, val;
    data_order order;
    const seq_source_ops *src; /* set before its open; NULL for a part not reached */
    void *src_state;       /* the source's own (a store, records in memory) */
    /* a damaged store entry: err says which (the first failure writes it:
     * split_build reads records from several threads); the dataset fails */
    atomic_int failed;
    moe_err err;
};

/* Mark the part failed, keeping the first failure's message (split_build
 * reads records from several threads). */
void part_fail(data_part *p, const moe_err *e);
/* Record r of the part: where its tokens start and how many. A store's
 * entry is read on demand; a damaged one marks the part failed and gives
 * an empty record (the caller that asked for a batch reports it). */
void part_record(data_part *p, uint64_t r, uint64_t *offset, uint64_t *length);

/* data.blend: a fixed pattern of BLEND_PERIOD draws that takes each part's
 * share (weights rounded to 1/BLEND_PERIOD, largest remainders first),
 * interleaved greedily so every prefix stays close to the weights. */
#define BLEND_PERIOD 4096

typedef struct {
    uint16_t part[BLEND_PERIOD];
    uint32_t rank[BLEND_PERIOD]; /* draws of that part earlier in the period */
    uint32_t quota[256];         /* draws per period of each part */
} data_blend;

int blend_build(data_blend *b, const data_part *parts, int n_parts, moe_err *e);

struct moe_dataset {
    int seq_length, window, stride; /* window = seq_length + 1 */
    uint64_t seed;
    int dp_rank, dp_size;
    int shuffle, mask_degenerate;
    int pack;              /* packed windows (data.pack resolved) */
    double rc_prob, val_fraction;

    data_part *parts;
    int n_parts;
    data_blend *blend;     /* NULL unless data.blend */
    uint64_t train_windows, val_windows, train_tokens, val_tokens;
    double val_entropy;
    uint64_t fingerprint;
    char no_val[320];      /* why there is no validation window ("" when there is) */

    moe_data_cursor cur;
    uint8_t *scratch;      /* one window */
    int io_failed;         /* a store read failed: io_err says why; every later batch fails */
    moe_err io_err;
};

/* Write window id of split s as one row: inputs[T], targets[T]. */
void dataset_write_window(moe_dataset *ds, const data_split *s, uint64_t id, int reverse_complement,
                          int32_t *inputs, int32_t *targets);
/* 1 (e filled) when a store read or a store entry failed since opening. */
int dataset_failed(const moe_dataset *ds, moe_err *e);
/* Reverse-complement the base tokens of w[0..n) in place; special tokens
 * keep their positions. */
void reverse_complement_bases(uint8_t *w, size_t n);
/* The i-th training window (0-based) of epoch `epoch`'s order of part p. */
uint64_t dataset_order(moe_dataset *ds, data_part *p, uint64_t epoch, uint64_t i, moe_err *e);
/* Parts from data.files (read into memory) or data.store / data.blend. */
int parts_open(moe_dataset *ds, const moe_data_cfg *dc, const char *data_dir, moe_err *e);
void parts_close(moe_dataset *ds);

#endif

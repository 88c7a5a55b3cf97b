/* moekit: genomic training data.
 *
 * FASTA files (plain or gzip) -> byte-level tokens -> fixed-length windows,
 * split per record into training and validation, shuffled per epoch,
 * sharded over data-parallel ranks, with a cursor to resume exactly.
 *
 * Sequence alphabet (what fasta_read accepts on sequence lines):
 *   A C G T U and the IUPAC ambiguity codes R Y K M S W B D H V N, in either
 *   case. Lower case (soft-masked repeats) is upper-cased: the tokenizer is
 *   case-folded, so masking does not double the vocabulary. '-' (alignment
 *   gap) and '*' (end-of-sequence mark) are dropped. Spaces, tabs and CR are
 *   ignored anywhere, so CRLF files read like LF files; a leading UTF-8
 *   byte-order mark is skipped. Lines that start with ';' are comments; blank
 *   lines are skipped. Anything else is an error that names file:line:column
 *   and the byte.
 *
 * Tokens: id = byte value, except ids 0..3, which are the special tokens
 *   below (bytes 0..3 themselves encode as UNK). A record becomes
 *   BOS, its bases, EOS.
 *
 * Windows: seq_length + 1 tokens (T = seq_length): inputs are the first T,
 *   targets the last T. Padded (data.pack = padded): starts every `stride`
 *   tokens (0 = T) inside a record; a window never spans two records. When
 *   the last full window does not reach the end of its region, one more
 *   window covers the rest, padded with PAD. Packed (data.pack = packed; auto
 *   packs stores and blends): a split's regions (below) laid end to end in
 *   record order form one stream, cut into windows every `stride` tokens
 *   the same way; a record longer than the rest of a window goes on in the
 *   next, and only the stream's end is padded. A sequence starts at every
 *   BOS and after every EOS (tok_sequence_starts): attention stays within
 *   it and its positions restart at 0 (tok_segments), as each record run
 *   alone, the part of a record that goes on in the next window counting
 *   from 0 there as every padded window does. Targets that must not count
 *   in the loss are -1: PAD, a target across a sequence boundary (never in
 *   a padded window), and with mask_degenerate_bases every base other than
 *   A/C/G/T (EOS stays a target).
 *
 * Split: a record of L tokens with L >= 2 (T + 1) keeps its last
 *   n_val = max(1, round(val_fraction (L - 1) / T)) windows of T targets for
 *   validation (at most what leaves one full training window). The
 *   validation region is the last n_val T + 1 tokens; training windows are
 *   cut from the tokens before it, so no token position is in both. (The
 *   first token of the validation region is context only: no split predicts
 *   it.) Shorter records, too short to cut a tail from, are held out whole
 *   by a record-level split: record r with probability val_fraction, from a
 *   hash of r under a fixed key (the same records whatever train.seed); a
 *   corpus of at least 8 records where that holds out nothing holds out the
 *   one record of the smallest hash. Validation windows start every T
 *   tokens whatever data.stride is, so every validation target counts once.
 *
 * Order: with data.shuffle, epoch e visits the training windows in a
 *   permutation seeded from (train.seed, e); otherwise in file order.
 *   A global batch is dp_size * B consecutive windows of that order; rank r
 *   takes windows [r B, (r + 1) B) of it. An epoch ends when fewer than
 *   dp_size * B windows remain: the tail is dropped, so every rank changes
 *   epoch on the same step. (With shuffling the dropped windows differ from
 *   epoch to epoch; without it the same tail is always skipped.)
 *
 * Reverse complement: with probability data.reverse_complement a training
 *   window is replaced by its reverse complement, decided by a hash of
 *   (seed, epoch, window id): the same window gets the same choice whatever
 *   the batch size, rank count or resume point. Each sequence of the window
 *   is reversed on its own, and only base positions: BOS, EOS and PAD stay
 *   where they are.
 */
#ifndef MOE_DATA_H
#define MOE_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "data_cfg.h"

/* ---- tokenizer ---------------------------------------------------------- */

#define MOE_TOK_EOS 0
#define MOE_TOK_PAD 1
#define MOE_TOK_BOS 2
#define MOE_TOK_UNK 3
#define MOE_TOK_N_SPECIAL 4
#define MOE_TOK_VOCAB 256

/* Token id of one input byte: upper-cased byte value, UNK for bytes 0..3. */
int tok_encode_byte(unsigned char c);
/* out[i] = tok_encode_byte(in[i]) for n bytes (in == out allowed). */
void tok_encode(const uint8_t *in, uint8_t *out, size_t n);
/* A record as tokens: BOS, its bases, EOS. */
#define MOE_TOK_RECORD_OVERHEAD 2
/* The byte a token stands for, or -1 for special tokens and ids outside
 * [0, 256). */
int tok_decode(int id);
/* "<eos>", "<pad>", "<bos>", "<unk>" for special ids, NULL otherwise. */
const char *tok_special_name(int id);
/* IUPAC complement of a base token (A<->T, C<->G, U->A, R<->Y, K<->M,
 * B<->V, D<->H; S, W, N are their own complement); other ids unchanged. */
int tok_complement(int id);
/* 1 for the tokens A, C, G, T. */
int tok_is_acgt(int id);

/* 1 when token cur, after prev in a row, starts a new sequence of a packed
 * window: a record's BOS, or whatever follows an EOS (a held-out tail
 * starts without BOS, but the record before it ended). */
static inline int tok_sequence_starts(int prev, int cur)
{
    return cur == MOE_TOK_BOS || prev == MOE_TOK_EOS;
}
/* The sequences of B rows of T input tokens: every row starts one, and
 * tok_sequence_starts another. pos[B*T] gets each token's position in its
 * sequence, cu_seqlens[n + 1] (room for B*T + 1) the flat index of each
 * sequence's first token, then B*T; *max_len the longest. Returns n. */
int tok_segments(const int32_t *inputs, int B, int T, int32_t *pos, int32_t *cu_seqlens,
                 int *max_len);

/* ---- FASTA -------------------------------------------------------------- */

typedef struct {
    const char *path;     /* the file being read */
    const char *header;   /* the header line after '>', CR stripped */
    uint64_t index;       /* 0-based record number in the file */
    uint64_t line;        /* line number of the header */
    const uint8_t *seq;   /* upper-cased bases (see the alphabet above) */
    size_t len;           /* number of bases, >= 1 */
} moe_fasta_record;

/* Called once per record; seq is valid only during the call. Return 0 to go
 * on, -1 (with e filled) to stop reading; fasta_read then fails with that
 * message. */
typedef int (*moe_fasta_record_fn)(const moe_fasta_record *rec, void *ctx, moe_err *e);

/* Read a FASTA file, plain or gzip-compressed. Fails on: a file that cannot
 * be opened or read (truncated gzip included), an empty file, a file with no
 * record, a record with no sequence, control or binary bytes, sequence data
 * before the first header, a sequence character outside the alphabet.
 * Messages name path:line[:column] and the offending byte. */
int fasta_read(const char *path, moe_fasta_record_fn fn, void *ctx, moe_err *e);

/* The same reader with bounded memory: a record's bases arrive in pieces
 * (at most about 1 MiB each) as they are parsed. */
typedef struct {
    /* A piece of the current record: seq[0..n); rec->len counts the bases
     * so far, this piece included; rec->seq is NULL. */
    int (*bases)(const moe_fasta_record *rec, const uint8_t *seq, size_t n, void *ctx, moe_err *e);
    /* The record is complete: rec->len is its number of bases, rec->seq NULL. */
    int (*record_end)(const moe_fasta_record *rec, void *ctx, moe_err *e);
    /* Optional, after each chunk: bytes read from the file (compressed bytes
     * for gzip) and text bytes parsed so far. Return -1 to stop (limits). */
    int (*progress)(uint64_t file_bytes, uint64_t text_bytes, void *ctx, moe_err *e);
} moe_fasta_stream;
int fasta_stream(const char *path, const moe_fasta_stream *stream, void *ctx, moe_err *e);

/* ---- dataset ------------------------------------------------------------ */

typedef struct moe_dataset moe_dataset;

/* Where the data stream stands: resume with dataset_seek. The same on every
 * rank (position counts global windows). fingerprint identifies the data
 * and the settings that shape the order; dataset_seek refuses a cursor made
 * from other data (0 skips that check). */
typedef struct {
    uint64_t epoch;
    uint64_t position;    /* windows of this epoch's order already taken, all ranks */
    uint64_t fingerprint;
} moe_data_cursor;

typedef struct {
    uint64_t n_files, n_records;
    uint64_t bases;
    uint64_t train_windows, val_windows;
    uint64_t train_tokens, val_tokens; /* tokens in each split's regions (sum = bases + 2 records) */
} moe_data_stats;

/* Load dc->files and lay out the windows. Paths are absolute, or relative to
 * the current directory when the file exists there, else relative to
 * data_dir; data_dir NULL means $MOE_DATA_DIR, else the data directory
 * installed beside the binary (../share/moekit/data), else this source
 * tree's data/ for a binary built here. seed is train.seed. */
int dataset_open(moe_dataset **out, const moe_data_cfg *dc, int seq_length, uint64_t seed,
                 int dp_rank, int dp_size, const char *data_dir, moe_err *e);
void dataset_close(moe_dataset *ds);

/* The next B training windows of this rank: inputs[B*T] token ids,
 * targets[B*T] (-1 = ignore). Moves to the next epoch when the current one
 * has fewer than dp_size*B windows left. Fails when one global batch is
 * larger than the whole training split. */
int dataset_next_train(moe_dataset *ds, int B, int32_t *inputs, int32_t *targets, moe_err *e);

/* Validation batch i (0-based; wraps modulo dataset_val_batches) of the
 * fixed validation order. The last batch is filled up with PAD rows whose
 * targets are all -1, so one pass over the batches counts every validation
 * target once. The same on every rank: to split evaluation, give ranks
 * different i. Fails when there is no validation data. */
int dataset_val_batch(moe_dataset *ds, int i, int B, int32_t *inputs, int32_t *targets, moe_err *e);
/* Why the dataset has no validation window (for the start-up check), or
 * NULL when it has some. */
const char *dataset_no_val_reason(const moe_dataset *ds);
/* Number of distinct validation batches of B windows (0 without validation). */
int dataset_val_batches(const moe_dataset *ds, int B);
/* Steps (global batches of dp_size*B windows) in one training epoch. */
uint64_t dataset_train_batches_per_epoch(const moe_dataset *ds, int B);

/* 1 when the windows are packed (data.pack): the batches then need
 * tok_segments for the model. */
int dataset_packed(const moe_dataset *ds);

moe_data_cursor dataset_cursor(const moe_dataset *ds);
int dataset_seek(moe_dataset *ds, moe_data_cursor c, moe_err *e);

void dataset_stats(const moe_dataset *ds, moe_data_stats *st);
/* Entropy (nats) of the unigram distribution of the non-ignored validation
 * targets: the loss of a model that learnt base frequencies only. NAN when
 * there is no validation target. */
double dataset_val_unigram_entropy(const moe_dataset *ds);

#endif

/* Unit tests for trainer/data: FASTA reading (fixtures, shipped genomes,
 * every malformed-input error), tokenizer, window layout and contents,
 * split, shuffle, sharding, augmentation and cursor resume. */
#include "../../trainer/data/data.h"
#include "../../trainer/data/data_internal.h"
#include "../check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#ifndef MOE_TEST_DATA_DIR
#define MOE_TEST_DATA_DIR "tests/data/fasta"
#endif

static char tmp_dir[256];

/* ---- helpers ------------------------------------------------------------ */

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp_dir, name);
    return buf[k];
}

static const char *write_file(const char *name, const void *data, size_t len)
{
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, len, f) != len) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(2);
    }
    fclose(f);
    return p;
}

static const char *write_text(const char *name, const char *text)
{
    return write_file(name, text, strlen(text));
}

typedef struct {
    int n;
    char header[8][128];
    char seq[8][256];
    size_t len[8];
    uint64_t line[8];
    uint64_t total;
    int fail_at; /* record index at which the callback fails (-1: never) */
} collected;

static int collect(const moe_fasta_record *rec, void *ctx, moe_err *e)
{
    collected *c = ctx;
    if ((int)rec->index == c->fail_at)
        return moe_errf(e, "callback refused record %d", (int)rec->index);
    if (c->n < 8) {
        snprintf(c->header[c->n], sizeof c->header[c->n], "%s", rec->header);
        size_t n = rec->len < 255 ? rec->len : 255;
        memcpy(c->seq[c->n], rec->seq, n);
        c->seq[c->n][n] = '\0';
        c->len[c->n] = rec->len;
        c->line[c->n] = rec->line;
    }
    c->n++;
    c->total += rec->len;
    return 0;
}

static int read_collect(const char *path, collected *c, moe_err *e)
{
    memset(c, 0, sizeof *c);
    c->fail_at = -1;
    e->msg[0] = '\0';
    return fasta_read(path, collect, c, e);
}

/* fasta_read fails and the message contains every given fragment. */
#define CHECK_FASTA_FAILS(path, ...)                                                  \
    do {                                                                              \
        collected c_;                                                                 \
        moe_err e_;                                                                   \
        CHECK(read_collect((path), &c_, &e_) == -1);                                  \
        const char *frags_[] = {__VA_ARGS__};                                         \
        for (size_t k_ = 0; k_ < sizeof frags_ / sizeof *frags_; k_++)                \
            CHECK_MSG(strstr(e_.msg, frags_[k_]) != NULL, "'%s' not in: %s",          \
                      frags_[k_], e_.msg);                                            \
    } while (0)

/* Open a dataset or fail the test here (later checks would use NULL). */
#define OPEN(ds, ...)                                                                 \
    do {                                                                              \
        moe_err oe_;                                                                  \
        if (dataset_open(&(ds), __VA_ARGS__, &oe_) != 0) {                            \
            CHECK_MSG(0, "dataset_open: %s", oe_.msg);                                \
            return;                                                                   \
        }                                                                             \
    } while (0)

/* data.files of the configs the tests build (a config holds pointers to
 * its paths): slot i, kept until the next set_file(i, ...) */
static char file_slots[4][4096];
static const char *file_list[4] = {file_slots[0], file_slots[1], file_slots[2], file_slots[3]};

static void set_file(int i, const char *path)
{
    snprintf(file_slots[i], sizeof file_slots[i], "%s", path);
}

static moe_data_cfg data_cfg(const char *file)
{
    moe_data_cfg dc;
    memset(&dc, 0, sizeof dc);
    dc.n_files = 1;
    set_file(0, file);
    dc.files = file_list;
    return dc;
}

/* A FASTA file of random ACGT records of the given lengths. */
static const char *write_random_fasta(const char *name, const int *lens, int n, uint64_t seed)
{
    moe_xoshiro rng;
    xoshiro_seed(&rng, seed);
    size_t cap = 64;
    for (int r = 0; r < n; r++)
        cap += (size_t)lens[r] + (size_t)lens[r] / 60 + 64;
    char *buf = malloc(cap), *p = buf;
    for (int r = 0; r < n; r++) {
        p += sprintf(p, ">random%d\n", r);
        for (int i = 0; i < lens[r]; i++) {
            *p++ = "ACGT"[xoshiro_below(&rng, 4)];
            if (i % 60 == 59 || i == lens[r] - 1)
                *p++ = '\n';
        }
    }
    const char *path = write_file(name, buf, (size_t)(p - buf));
    free(buf);
    return path;
}

/* Which window of the split a row of inputs is (its inputs are unique in
 * random data), or -1. */
static int64_t find_window(moe_dataset *ds, const data_split *s, const int32_t *row)
{
    int T = ds->seq_length;
    int32_t *in = malloc((size_t)T * sizeof *in), *tg = malloc((size_t)T * sizeof *tg);
    int64_t found = -1;
    for (uint64_t id = 0; id < s->n_windows && found < 0; id++) {
        dataset_write_window(ds, s, id, 0, in, tg);
        if (memcmp(in, row, (size_t)T * sizeof *in) == 0)
            found = (int64_t)id;
    }
    free(in);
    free(tg);
    return found;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- tokenizer ---------------------------------------------------------- */

static void test_tokenizer(void)
{
    CHECK(MOE_TOK_EOS == 0 && MOE_TOK_PAD == 1 && MOE_TOK_BOS == 2 && MOE_TOK_UNK == 3);
    CHECK(tok_encode_byte('A') == 65);
    CHECK(tok_encode_byte('a') == 65); /* case-folded: soft masking adds no tokens */
    CHECK(tok_encode_byte('n') == 'N');
    CHECK(tok_encode_byte('T') == 'T');
    CHECK(tok_encode_byte(0) == MOE_TOK_UNK);
    CHECK(tok_encode_byte(3) == MOE_TOK_UNK);
    CHECK(tok_encode_byte(4) == 4);
    CHECK(tok_encode_byte(255) == 255);
    CHECK(tok_decode('G') == 'G');
    CHECK(tok_decode(MOE_TOK_EOS) == -1 && tok_decode(MOE_TOK_BOS) == -1);
    CHECK(tok_decode(256) == -1 && tok_decode(-5) == -1);
    CHECK(strcmp(tok_special_name(MOE_TOK_PAD), "<pad>") == 0);
    CHECK(strcmp(tok_special_name(MOE_TOK_EOS), "<eos>") == 0);
    CHECK(tok_special_name('A') == NULL);
    const char *from = "ACGTURYKMSWBDHVN", *to = "TGCAAYRMKSWVHDBN";
    for (int i = 0; from[i]; i++) {
        CHECK_MSG(tok_complement(from[i]) == to[i], "complement of %c", from[i]);
        if (from[i] != 'U')
            CHECK(tok_complement(tok_complement(from[i])) == from[i]);
    }
    CHECK(tok_complement(MOE_TOK_BOS) == MOE_TOK_BOS);
    CHECK(tok_is_acgt('A') && tok_is_acgt('T') && !tok_is_acgt('N') && !tok_is_acgt('U'));
    CHECK(!tok_is_acgt(MOE_TOK_EOS));
}

/* ---- FASTA -------------------------------------------------------------- */

static void check_mixed_fixture(const char *path)
{
    collected c;
    moe_err e;
    CHECK_MSG(read_collect(path, &c, &e) == 0, "%s", e.msg);
    CHECK(c.n == 2);
    CHECK(strcmp(c.header[0], "rec1 first record") == 0);
    CHECK_MSG(strcmp(c.seq[0], "ACGTACGTNNRYKMSWBDHV") == 0, "%s", c.seq[0]);
    CHECK(c.len[0] == 20);
    CHECK(c.line[0] == 4);
    CHECK_MSG(strcmp(c.header[1], "rec2 second") == 0, "'%s'", c.header[1]);
    CHECK(strcmp(c.seq[1], "GGCCAATT") == 0);
    CHECK(c.line[1] == 8);
}

static void test_fasta_fixtures(void)
{
    check_mixed_fixture(MOE_TEST_DATA_DIR "/mixed.fa");
    check_mixed_fixture(MOE_TEST_DATA_DIR "/mixed_crlf.fa");
    check_mixed_fixture(MOE_TEST_DATA_DIR "/mixed.fa.gz");

    /* no final newline; a comment between records; one base per line */
    collected c;
    moe_err e;
    const char *p = write_text("nonl.fa", ">a\nAC\nG\n;note\n>b\nT");
    CHECK_MSG(read_collect(p, &c, &e) == 0, "%s", e.msg);
    CHECK(c.n == 2 && strcmp(c.seq[0], "ACG") == 0 && strcmp(c.seq[1], "T") == 0);
    CHECK(c.line[1] == 5);

    /* a UTF-8 byte-order mark is skipped; columns count from after it */
    p = write_text("bom.fa", "\xef\xbb\xbf" ">bom\nACGT\n");
    CHECK_MSG(read_collect(p, &c, &e) == 0, "%s", e.msg);
    CHECK(c.n == 1 && strcmp(c.header[0], "bom") == 0 && strcmp(c.seq[0], "ACGT") == 0);
    CHECK_FASTA_FAILS(write_text("bomseq.fa", "\xef\xbb\xbf" "ACGT\n"), "bomseq.fa:1:1:", "'A'");

    /* a header longer than the stored limit is cut, not an error */
    char big[3000];
    memset(big, 'x', sizeof big);
    big[0] = '>';
    memcpy(big + sizeof big - 6, "\nACG\n", 5);
    big[sizeof big - 1] = '\n';
    p = write_file("longhdr.fa", big, sizeof big);
    CHECK_MSG(read_collect(p, &c, &e) == 0, "%s", e.msg);
    CHECK(c.n == 1 && strcmp(c.seq[0], "ACG") == 0);

    /* a callback's error stops reading and is passed on */
    memset(&c, 0, sizeof c);
    c.fail_at = 1;
    CHECK(fasta_read(MOE_TEST_DATA_DIR "/mixed.fa", collect, &c, &e) == -1);
    CHECK(strstr(e.msg, "callback refused record 1") != NULL);
    CHECK(c.n == 1);
}

static void test_fasta_genomes(void)
{
    collected c;
    moe_err e;
    CHECK_MSG(read_collect(MOE_DATA_DIR_DEFAULT "/lambda_virus.fa.gz", &c, &e) == 0, "%s", e.msg);
    CHECK(c.n == 1);
    CHECK(c.len[0] == 48502);
    CHECK(strstr(c.header[0], "NC_001416") != NULL);
    CHECK(strncmp(c.seq[0], "GGGCGGCGACCTCGCGGGTTTTCGC", 25) == 0);

    double t0 = now_s();
    CHECK_MSG(read_collect(MOE_DATA_DIR_DEFAULT "/ecoli_536.fna.gz", &c, &e) == 0, "%s", e.msg);
    double dt = now_s() - t0;
    CHECK(c.n == 1);
    CHECK(c.len[0] == 4938920);
    CHECK(strstr(c.header[0], "NC_008253") != NULL);
    CHECK(strncmp(c.seq[0], "AGCTTTTCATTCTGACTGCAACGGG", 25) == 0);
    /* well under a second in an optimised build; sanitisers slow it down */
#if defined(__SANITIZE_ADDRESS__)
    CHECK_MSG(dt < 5.0, "E. coli read in %.2f s", dt);
#else
    CHECK_MSG(dt < 1.0, "E. coli read in %.2f s", dt);
#endif
    fprintf(stderr, "  E. coli 536 (4.94 Mbp gzip) read in %.3f s\n", dt);
}

static void test_fasta_errors(void)
{
    CHECK_FASTA_FAILS(tmp_path("missing.fa"), "missing.fa", "cannot open", "No such file");
    CHECK_FASTA_FAILS(tmp_dir, "is a directory");
    /* A FIFO nobody writes would block the run forever (before the check it hung here). */
    const char *fifo = tmp_path("pipe.fa");
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_FASTA_FAILS(fifo, "pipe.fa: is a FIFO (named pipe), not a regular file");
    unlink(fifo);
    CHECK_FASTA_FAILS(write_text("empty.fa", ""), "empty.fa: empty file");
    CHECK_FASTA_FAILS(write_text("blank.fa", "\n\n;only a comment\n   \n"), "blank.fa",
                      "no FASTA records");
    CHECK_FASTA_FAILS(write_text("hdronly.fa", ">lonely\n"), "hdronly.fa:1:", "'lonely'",
                      "no sequence");
    CHECK_FASTA_FAILS(write_text("hdreof.fa", ">a\nACGT\n>empty one"), "hdreof.fa:3:", "'empty one'",
                      "no sequence");
    CHECK_FASTA_FAILS(write_text("twohdr.fa", ">a\nAC\n>b\n\n>c\nGT\n"), "twohdr.fa:3:", "'b'",
                      "no sequence");
    CHECK_FASTA_FAILS(write_text("gaponly.fa", ">g\n----\n"), "gaponly.fa:1:", "no sequence");
    CHECK_FASTA_FAILS(write_text("noheader.fa", "\nACGT\n>a\nAC\n"), "noheader.fa:2:1:", "'A' (0x41)",
                      "before the first '>' header");
    CHECK_FASTA_FAILS(write_text("gapfirst.fa", "--\n>a\nAC\n"), "gapfirst.fa:1:1:", "'-'",
                      "before the first");
    CHECK_FASTA_FAILS(write_text("badchar.fa", ">r1\nACGT\nACGJT\n"), "badchar.fa:3:4:", "'J' (0x4a)",
                      "'r1'", "not a nucleotide code");
    CHECK_FASTA_FAILS(write_text("digits.fa", ">r\n1 acgt\n"), "digits.fa:2:1:", "'1' (0x31)");
    CHECK_FASTA_FAILS(write_text("utf8.fa", ">r\nAC\xc3\xa9\n"), "utf8.fa:2:3:", "byte 0xc3");
    CHECK_FASTA_FAILS(write_text("ctrl.fa", ">r\nAC\x01GT\n"), "ctrl.fa:2:3:", "control byte 0x01");
    CHECK_FASTA_FAILS(write_text("ctrlhdr.fa", ">r\x1b[0m\nACGT\n"), "ctrlhdr.fa:1:3:",
                      "control byte 0x1b");
    static const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0};
    CHECK_FASTA_FAILS(write_file("elf.fa", elf, sizeof elf), "elf.fa:1:1:", "control byte 0x7f",
                      "binary");
    static const unsigned char nul[] = {'>', 'x', '\n', 'A', 0, 'C', '\n'};
    CHECK_FASTA_FAILS(write_file("nul.fa", nul, sizeof nul), "nul.fa:2:2:", "control byte 0x00");

    /* a gzip file cut short: the reader must not take it for a short genome */
    FILE *src = fopen(MOE_DATA_DIR_DEFAULT "/lambda_virus.fa.gz", "rb");
    CHECK(src != NULL);
    if (src) {
        unsigned char buf[6000];
        size_t n = fread(buf, 1, sizeof buf, src);
        fclose(src);
        CHECK(n == sizeof buf);
        CHECK_FASTA_FAILS(write_file("cut.fa.gz", buf, n), "cut.fa.gz", "read error",
                          "unexpected end of file");
    }
    /* a gzip member whose data are corrupt */
    gzFile gz = gzopen(tmp_path("corrupt.fa.gz"), "wb");
    CHECK(gz != NULL);
    if (gz) {
        for (int i = 0; i < 2000; i++)
            gzputs(gz, ">x\nACGTTGCAACGTTGCA\n");
        gzclose(gz);
        FILE *f = fopen(tmp_path("corrupt.fa.gz"), "r+b");
        fseek(f, 40, SEEK_SET);
        fwrite("\xff\xff\xff\xff\xff\xff\xff\xff", 1, 8, f);
        fclose(f);
        CHECK_FASTA_FAILS(tmp_path("corrupt.fa.gz"), "corrupt.fa.gz", "read error");
    }
    /* a gzip file that decompresses to nothing is empty too */
    gz = gzopen(tmp_path("empty.fa.gz"), "wb");
    if (gz)
        gzclose(gz);
    CHECK_FASTA_FAILS(tmp_path("empty.fa.gz"), "empty.fa.gz: empty file");
}

/* ---- layout ------------------------------------------------------------- */

static void test_layout_counts(void)
{
    /* T = 4, W = 5 */
    CHECK(layout_window_count(0, 4, 4) == 0);
    CHECK(layout_window_count(1, 4, 4) == 0);
    CHECK(layout_window_count(2, 4, 4) == 1);  /* one target, padded */
    CHECK(layout_window_count(5, 4, 4) == 1);  /* exactly one window */
    CHECK(layout_window_count(6, 4, 4) == 2);  /* one more target: padded window */
    CHECK(layout_window_count(9, 4, 4) == 2);  /* windows at 0 and 4 share token 4 */
    CHECK(layout_window_count(10, 4, 4) == 3);
    CHECK(layout_window_count(9, 4, 2) == 3);  /* starts 0, 2, 4 */
    CHECK(layout_window_count(10, 4, 2) == 4); /* and a padded one at 6 */
    CHECK(layout_window_count(12, 4, 1) == 8); /* starts 0..7 */
    /* stride > seq_length: tokens 5 and 6 are never targets */
    CHECK(layout_window_count(10, 4, 7) == 2); /* padded window at 7: targets 8, 9 */
    CHECK(layout_window_count(9, 4, 7) == 2);  /* padded window at 7: target 8 */
    CHECK(layout_window_count(8, 4, 7) == 1);  /* a window at 7 would have no target */
    CHECK(layout_window_count(12, 4, 7) == 2); /* two full windows, nothing left */

    /* validation share: len tokens, T = 10 */
    CHECK(layout_val_windows(1000, 10, 0.0) == 0);
    CHECK(layout_val_windows(21, 10, 0.5) == 0);  /* < 2 windows of 11: training only */
    CHECK(layout_val_windows(22, 10, 0.5) == 1);
    CHECK(layout_val_windows(1001, 10, 0.1) == 10);
    CHECK(layout_val_windows(1001, 10, 0.001) == 1); /* at least one */
    CHECK(layout_val_windows(1001, 10, 0.99) == 98); /* keeps a full training window */
}

/* ---- windows ------------------------------------------------------------ */

static void test_window_contents(void)
{
    /* one record: BOS ACGTACGTAC EOS = 12 tokens; T = 4, stride 2 */
    const char *p = write_text("win.fa", ">w\nACGTACGTAC\n");
    moe_data_cfg dc = data_cfg(p);
    dc.stride = 2;
    moe_dataset *ds;
    moe_err e;
    OPEN(ds, &dc, 4, 1, 0, 1, NULL);
    const int tok[12] = {MOE_TOK_BOS, 'A', 'C', 'G', 'T', 'A', 'C', 'G', 'T', 'A', 'C', MOE_TOK_EOS};
    moe_data_stats st;
    dataset_stats(ds, &st);
    CHECK(st.n_files == 1 && st.n_records == 1 && st.bases == 10);
    CHECK(st.train_windows == 5); /* starts 0, 2, 4, 6 full; 8 padded */
    CHECK(st.val_windows == 0);
    CHECK(st.train_tokens == 12 && st.val_tokens == 0);
    CHECK(dataset_train_batches_per_epoch(ds, 2) == 2);

    int32_t in[5 * 4], tg[5 * 4];
    CHECK(dataset_next_train(ds, 5, in, tg, &e) == 0);
    for (int w = 0; w < 5; w++)
        for (int t = 0; t < 4; t++) {
            int pos = 2 * w + t;
            CHECK_MSG(in[w * 4 + t] == (pos < 12 ? tok[pos] : MOE_TOK_PAD), "w%d t%d", w, t);
            CHECK_MSG(tg[w * 4 + t] == (pos + 1 < 12 ? tok[pos + 1] : -1), "w%d t%d", w, t);
        }
    /* the padded window starts at 8: inputs T A C EOS, targets A C EOS -1 */
    CHECK(in[16] == 'T' && in[19] == MOE_TOK_EOS && tg[18] == MOE_TOK_EOS && tg[19] == -1);
    CHECK(in[0] == MOE_TOK_BOS);
    dataset_close(ds);

    /* stride 0 means seq_length: windows at 0, 4, 8 */
    dc.stride = 0;
    OPEN(ds, &dc, 4, 1, 0, 1, NULL);
    dataset_stats(ds, &st);
    CHECK(st.train_windows == 3);
    CHECK(dataset_next_train(ds, 3, in, tg, &e) == 0);
    CHECK(in[4] == 'T' && in[8] == 'T' && tg[9] == 'C' && tg[10] == MOE_TOK_EOS && tg[11] == -1);
    CHECK(in[11] == MOE_TOK_EOS);
    dataset_close(ds);
}

static void test_degenerate_mask(void)
{
    const char *p = write_text("degen.fa", ">d\nACNRT\nsw\n");
    moe_data_cfg dc = data_cfg(p);
    moe_dataset *ds;
    moe_err e;
    int32_t in[8], tg[8];
    /* tokens: BOS A C N R T S W EOS (9): one window of T = 8 */
    for (int mask = 0; mask <= 1; mask++) {
        dc.mask_degenerate_bases = mask;
        OPEN(ds, &dc, 8, 1, 0, 1, NULL);
        CHECK(dataset_next_train(ds, 1, in, tg, &e) == 0);
        const int want_in[8] = {MOE_TOK_BOS, 'A', 'C', 'N', 'R', 'T', 'S', 'W'};
        const int want_tg[8] = {'A', 'C', mask ? -1 : 'N', mask ? -1 : 'R', 'T', mask ? -1 : 'S',
                                mask ? -1 : 'W', MOE_TOK_EOS};
        for (int t = 0; t < 8; t++) {
            CHECK_MSG(in[t] == want_in[t], "mask %d t %d: %d", mask, t, in[t]);
            CHECK_MSG(tg[t] == want_tg[t], "mask %d t %d: %d", mask, t, tg[t]);
        }
        dataset_close(ds);
    }
}

/* ---- split -------------------------------------------------------------- */

static void test_split(void)
{
    moe_data_cfg dc = data_cfg("lambda_virus.fa.gz");
    dc.val_fraction = 0.1;
    dc.stride = 64;
    moe_dataset *ds;
    OPEN(ds, &dc, 128, 7, 0, 1, MOE_DATA_DIR_DEFAULT);
    moe_data_stats st;
    dataset_stats(ds, &st);
    CHECK(st.n_records == 1 && st.bases == 48502);
    CHECK(st.train_tokens + st.val_tokens == 48502 + 2);
    /* round(0.1 * 48503 / 128) = 38 windows of 128 targets, plus the context token */
    CHECK(st.val_windows == 38);
    CHECK(st.val_tokens == 38 * 128 + 1);
    CHECK_NEAR((double)st.val_tokens / 48504.0, 0.1, 0.005);
    CHECK(st.train_windows == layout_window_count(st.train_tokens, 128, 64));

    /* every training window ends before the first validation token */
    uint64_t val_lo = UINT64_MAX, train_hi = 0, start, n_real;
    for (uint64_t id = 0; id < ds->parts[0].val.n_windows; id++) {
        split_window(&ds->parts[0].val, id, 128, &start, &n_real);
        CHECK(n_real == 129);
        if (start < val_lo)
            val_lo = start;
    }
    for (uint64_t id = 0; id < ds->parts[0].train.n_windows; id++) {
        split_window(&ds->parts[0].train, id, 128, &start, &n_real);
        if (start + n_real > train_hi)
            train_hi = start + n_real;
    }
    CHECK_MSG(train_hi <= val_lo, "train ends at %llu, validation starts at %llu",
              (unsigned long long)train_hi, (unsigned long long)val_lo);
    CHECK(val_lo == st.train_tokens);
    /* validation windows tile the end: consecutive, the last one ends with EOS */
    split_window(&ds->parts[0].val, ds->parts[0].val.n_windows - 1, 128, &start, &n_real);
    CHECK(start + n_real == 48504);
    CHECK(ds->parts[0].tokens[start + n_real - 1] == MOE_TOK_EOS);
    dataset_close(ds);
}

static void test_split_tiny_records(void)
{
    /* T = 8: a record needs 2 x 9 = 18 tokens (16 bases) to give up validation */
    const char *p = write_text("tiny.fa", ">small\nACGTACGTACGTACG\n>big\nACGTACGTACGTACGT\n");
    moe_data_cfg dc = data_cfg(p);
    dc.val_fraction = 0.5;
    moe_dataset *ds;
    OPEN(ds, &dc, 8, 1, 0, 1, NULL);
    moe_data_stats st;
    dataset_stats(ds, &st);
    CHECK(st.n_records == 2);
    /* "big" gives a tail; "small" is held out whole or trains whole, by its draw */
    int small_out = layout_held_out_whole(&ds->parts[0], 0, 17);
    uint64_t small_windows = small_out ? layout_window_count(17, 8, 8) : 0; /* 2 */
    CHECK(st.val_windows == 1 + small_windows);
    CHECK(st.val_tokens == 9 + (small_out ? 17u : 0u));
    CHECK(st.train_tokens == (small_out ? 0u : 17u) + 9);
    uint64_t start, n_real;
    split_window(&ds->parts[0].val, small_windows, 8, &start, &n_real);
    CHECK(start == 17 + 9);
    dataset_close(ds);
}

/* Records too short for a held-out tail: whole records held out, the same
 * ones whatever train.seed, each wholly in one split; a corpus of a handful
 * holds out one; fewer have none and say why. */
static void test_short_records_hold_out(void)
{
    int lens[200];
    for (int r = 0; r < 200; r++)
        lens[r] = 5 + r % 7; /* all shorter than 2 x 17 tokens at T = 16 */
    const char *p = write_random_fasta("short.fa", lens, 200, 3);
    moe_data_cfg dc = data_cfg(p);
    dc.val_fraction = 0.1;
    moe_dataset *ds, *other;
    OPEN(ds, &dc, 16, 1, 0, 1, NULL);
    OPEN(other, &dc, 16, 99, 0, 1, NULL);
    moe_data_stats st, st2;
    dataset_stats(ds, &st);
    dataset_stats(other, &st2);
    CHECK_MSG(st.val_windows >= 8 && st.val_windows <= 36, "%llu of 200 records held out",
              (unsigned long long)st.val_windows);
    CHECK(st.val_windows + st.train_windows == 200 && st.val_windows == st2.val_windows &&
          st.val_tokens == st2.val_tokens);
    CHECK(dataset_no_val_reason(ds) == NULL);
    for (uint64_t r = 0; r < 200; r++) { /* each record wholly in one split */
        uint64_t ts, tl, vs, vl;
        split_region(&ds->parts[0].train, r, &ts, &tl);
        split_region(&ds->parts[0].val, r, &vs, &vl);
        CHECK((tl == 0) != (vl == 0) && tl + vl == (uint64_t)lens[r] + 2);
    }
    dataset_close(ds);
    dataset_close(other);

    /* a handful: one record held out even at a tiny fraction */
    const char *hand = write_random_fasta("hand.fa", lens, HOLDOUT_MIN_RECORDS, 4);
    dc = data_cfg(hand);
    dc.val_fraction = 1e-6;
    OPEN(ds, &dc, 16, 1, 0, 1, NULL);
    dataset_stats(ds, &st);
    CHECK(st.val_windows == 1 && st.train_windows == HOLDOUT_MIN_RECORDS - 1);
    int32_t in[16], tg[16];
    moe_err e;
    CHECK(dataset_val_batch(ds, 0, 1, in, tg, &e) == 0 && in[0] == MOE_TOK_BOS);
    dataset_close(ds);

    /* fewer: no held-out data, and the reason says what would give some */
    const char *few = write_random_fasta("few.fa", lens, HOLDOUT_MIN_RECORDS - 1, 4);
    dc = data_cfg(few);
    dc.val_fraction = 1e-6;
    OPEN(ds, &dc, 16, 1, 0, 1, NULL);
    dataset_stats(ds, &st);
    CHECK(st.val_windows == 0 && dataset_no_val_reason(ds) != NULL);
    CHECK(dataset_val_batch(ds, 0, 1, in, tg, &e) == -1);
    CHECK_MSG(strstr(e.msg, "7 record(s)") && strstr(e.msg, "34 tokens"), "%s", e.msg);
    dataset_close(ds);
}

/* ---- packed windows ----------------------------------------------------- */

/* The tokens of a FASTA of random records, end to end (BOS, bases, EOS). */
static size_t stream_of(const int *lens, int n, uint64_t seed, uint8_t *out)
{
    moe_xoshiro rng;
    xoshiro_seed(&rng, seed);
    size_t k = 0;
    for (int r = 0; r < n; r++) {
        out[k++] = MOE_TOK_BOS;
        for (int i = 0; i < lens[r]; i++)
            out[k++] = (uint8_t)"ACGT"[xoshiro_below(&rng, 4)];
        out[k++] = MOE_TOK_EOS;
    }
    return k;
}

/* Records laid end to end: window k is the stream's tokens [k T, k T + T],
 * no PAD but after the stream's end, a record going on into the next
 * window; targets -1 exactly where they would cross into the next record;
 * each sequence reverse-complemented on its own; tok_segments' positions
 * restart at every record and at the window start. */
static void test_packed_windows(void)
{
    enum { N = 20, T = 16 };
    int lens[N];
    for (int r = 0; r < N; r++)
        lens[r] = 3 + (r * 7) % 23;
    const char *p = write_random_fasta("packed.fa", lens, N, 21);
    static uint8_t want[N * 30];
    size_t total = stream_of(lens, N, 21, want);
    moe_data_cfg dc = data_cfg(p);
    dc.pack = MOE_PACK_PACKED;
    moe_dataset *ds;
    moe_err e;
    OPEN(ds, &dc, T, 1, 0, 1, NULL);
    moe_data_stats st;
    dataset_stats(ds, &st);
    uint64_t nw = layout_window_count(total, T, T);
    CHECK(dataset_packed(ds) && st.train_windows == nw && st.val_windows == 0);
    int32_t in[T], tg[T], pos[T], cu[T + 1];
    int boundaries = 0;
    for (uint64_t k = 0; k < nw; k++) {
        CHECK(dataset_next_train(ds, 1, in, tg, &e) == 0);
        for (int t = 0; t < T; t++) {
            size_t at = k * T + (size_t)t;
            int want_in = at < total ? want[at] : MOE_TOK_PAD;
            int nx = at + 1 < total ? want[at + 1] : MOE_TOK_PAD;
            int cross = want_in == MOE_TOK_EOS && nx == MOE_TOK_BOS;
            boundaries += cross;
            CHECK(in[t] == want_in);
            CHECK(tg[t] == (nx == MOE_TOK_PAD || cross ? -1 : nx));
        }
        int max_len, n = tok_segments(in, 1, T, pos, cu, &max_len);
        /* every sequence but the window's first starts with BOS (or is the
         * PAD after the stream's end) */
        for (int s = 0; s < n; s++)
            CHECK(cu[s] < cu[s + 1] && pos[cu[s]] == 0 &&
                  (s == 0 || in[cu[s]] == MOE_TOK_BOS || in[cu[s]] == MOE_TOK_PAD));
    }
    CHECK(boundaries == N - 1);
    dataset_close(ds);

    /* reverse complement: each record's bases on their own */
    dc.reverse_complement = 1.0;
    OPEN(ds, &dc, T, 1, 0, 1, NULL);
    uint8_t w[T + 1];
    for (uint64_t k = 0; k < nw; k++) {
        CHECK(dataset_next_train(ds, 1, in, tg, &e) == 0);
        size_t have = total - k * T < T + 1 ? total - k * T : T + 1;
        memcpy(w, want + k * T, have);
        memset(w + have, MOE_TOK_PAD, T + 1 - have);
        for (size_t a = 0, z; a < T + 1; a = z) {
            for (z = a + 1; z < T + 1 && !tok_sequence_starts(w[z - 1], w[z]); z++)
                ;
            reverse_complement_bases(w + a, z - a);
        }
        int same = 1;
        for (int t = 0; t < T; t++)
            same &= in[t] == w[t];
        CHECK_MSG(same, "window %llu is not reverse-complemented record by record",
                  (unsigned long long)k);
    }
    dataset_close(ds);

    /* held out whole records, packed apart; the same cursor resumes the
     * same windows in a fresh dataset */
    dc.reverse_complement = 0.5;
    dc.val_fraction = 0.3;
    dc.shuffle = 1;
    moe_dataset *again;
    OPEN(ds, &dc, T, 5, 0, 1, NULL);
    OPEN(again, &dc, T, 5, 0, 1, NULL);
    dataset_stats(ds, &st);
    CHECK(st.val_tokens > 0 && st.train_tokens + st.val_tokens == total &&
          st.val_windows == layout_window_count(st.val_tokens, T, T));
    int32_t in2[2 * T], tg2[2 * T], in3[2 * T], tg3[2 * T];
    for (int i = 0; i < 3; i++)
        CHECK(dataset_next_train(ds, 2, in2, tg2, &e) == 0);
    CHECK(dataset_seek(again, dataset_cursor(ds), &e) == 0);
    CHECK(dataset_next_train(ds, 2, in2, tg2, &e) == 0 && dataset_next_train(again, 2, in3, tg3, &e) == 0);
    CHECK(!memcmp(in2, in3, sizeof in2) && !memcmp(tg2, tg3, sizeof tg2));
    CHECK(dataset_val_batch(ds, 0, 2, in2, tg2, &e) == 0 && in2[0] == MOE_TOK_BOS);
    /* a padded layout's cursor does not resume a packed one */
    dc.pack = MOE_PACK_PADDED;
    moe_dataset *padded;
    OPEN(padded, &dc, T, 5, 0, 1, NULL);
    CHECK(dataset_seek(padded, dataset_cursor(ds), &e) == -1);
    dataset_close(padded);
    dataset_close(ds);
    dataset_close(again);
}

/* ---- validation batches ------------------------------------------------- */

static void test_val_batches(void)
{
    int lens[2] = {400, 300};
    const char *p = write_random_fasta("val.fa", lens, 2, 11);
    moe_data_cfg dc = data_cfg(p);
    dc.val_fraction = 0.2;
    moe_dataset *ds;
    moe_err e;
    OPEN(ds, &dc, 16, 1, 0, 1, NULL);
    moe_data_stats st;
    dataset_stats(ds, &st);
    /* round(0.2 * 401 / 16) = 5 and round(0.2 * 301 / 16) = 4 */
    CHECK(st.val_windows == 9);
    CHECK(dataset_val_batches(ds, 4) == 3);
    CHECK(dataset_val_batches(ds, 9) == 1);
    CHECK(dataset_val_batches(ds, 0) == 0);

    int32_t in[4 * 16], tg[4 * 16], in2[4 * 16], tg2[4 * 16];
    /* batch 2 holds window 8 and three ignored rows */
    CHECK(dataset_val_batch(ds, 2, 4, in, tg, &e) == 0);
    int ignored = 0;
    for (int t = 16; t < 64; t++)
        ignored += tg[t] == -1 && in[t] == MOE_TOK_PAD;
    CHECK(ignored == 48);
    CHECK(tg[15] == MOE_TOK_EOS); /* the last validation window ends its record */
    /* wraps */
    CHECK(dataset_val_batch(ds, 5, 4, in2, tg2, &e) == 0);
    CHECK(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
    /* fixed order: independent of training draws */
    CHECK(dataset_val_batch(ds, 0, 4, in, tg, &e) == 0);
    CHECK(dataset_next_train(ds, 4, in2, tg2, &e) == 0);
    CHECK(dataset_val_batch(ds, 0, 4, in2, tg2, &e) == 0);
    CHECK(memcmp(in, in2, sizeof in) == 0);

    /* unigram entropy from the targets of every validation batch */
    double counts[256] = {0}, total = 0;
    for (int b = 0; b < dataset_val_batches(ds, 4); b++) {
        CHECK(dataset_val_batch(ds, b, 4, in, tg, &e) == 0);
        for (int t = 0; t < 64; t++)
            if (tg[t] >= 0) {
                counts[tg[t]]++;
                total++;
            }
    }
    CHECK(total == 9 * 16);
    CHECK(counts[MOE_TOK_EOS] == 2);
    double h = 0;
    for (int k = 0; k < 256; k++)
        if (counts[k])
            h -= counts[k] / total * log(counts[k] / total);
    CHECK_NEAR(dataset_val_unigram_entropy(ds), h, 1e-12);
    CHECK(h > 1.2 && h < log(5.0)); /* about ln 4 for random ACGT, EOS adds a little */
    dataset_close(ds);
}

/* ---- order -------------------------------------------------------------- */

static void draw_ids(moe_dataset *ds, int B, int steps, int64_t *ids)
{
    int T = ds->seq_length;
    int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    moe_err e;
    for (int s = 0; s < steps; s++) {
        CHECK_MSG(dataset_next_train(ds, B, in, tg, &e) == 0, "%s", e.msg);
        for (int b = 0; b < B; b++)
            ids[s * B + b] = find_window(ds, &ds->parts[0].train, in + (size_t)b * T);
    }
    free(in);
    free(tg);
}

static void test_shuffle(void)
{
    int lens[3] = {500, 333, 212};
    const char *p = write_random_fasta("shuf.fa", lens, 3, 5);
    moe_data_cfg dc = data_cfg(p);
    dc.shuffle = 1;
    moe_dataset *a, *b, *c;
    OPEN(a, &dc, 16, 42, 0, 1, NULL);
    OPEN(b, &dc, 16, 42, 0, 1, NULL);
    OPEN(c, &dc, 16, 43, 0, 1, NULL);
    uint64_t n = a->parts[0].train.n_windows;
    CHECK(n == 32 + 21 + 14);
    int B = 6, steps = (int)(n / 6); /* one epoch: 11 steps, 1 window dropped */
    int64_t ia[2 * 66], ib[2 * 66], ic[66];
    draw_ids(a, B, 2 * steps, ia);
    draw_ids(b, B, 2 * steps, ib);
    draw_ids(c, B, steps, ic);
    CHECK(memcmp(ia, ib, sizeof ia) == 0);    /* same seed, same order */
    CHECK(memcmp(ia, ic, sizeof ic) != 0);    /* other seed, other order */
    CHECK(memcmp(ia, ia + 66, sizeof ic) != 0); /* the next epoch is reshuffled */
    int seen[67] = {0}, in_order = 0;
    for (int i = 0; i < 66; i++) {
        CHECK(ia[i] >= 0 && ia[i] < 67);
        if (ia[i] >= 0 && ia[i] < 67)
            seen[ia[i]]++;
        in_order += ia[i] == i;
    }
    int once = 0;
    for (int i = 0; i < 67; i++)
        once += seen[i] == 1;
    CHECK(once == 66); /* a permutation minus the dropped tail */
    CHECK(in_order < 20);
    CHECK(dataset_cursor(a).epoch == 1 && dataset_cursor(a).position == 66);
    dataset_close(a);
    dataset_close(b);
    dataset_close(c);

    /* without shuffling: file order, and the same tail is dropped each epoch */
    dc.shuffle = 0;
    OPEN(a, &dc, 16, 42, 0, 1, NULL);
    draw_ids(a, B, 2 * steps, ia);
    for (int i = 0; i < 132; i++)
        CHECK(ia[i] == i % 66);
    dataset_close(a);
}

static void test_sharding(void)
{
    int lens[2] = {700, 419};
    const char *p = write_random_fasta("shard.fa", lens, 2, 9);
    moe_data_cfg dc = data_cfg(p);
    dc.shuffle = 1;
    dc.reverse_complement = 0.5;
    const int T = 16, B = 2, DP = 3;
    moe_err e;
    moe_dataset *one, *rank[DP];
    OPEN(one, &dc, T, 3, 0, 1, NULL);
    for (int r = 0; r < DP; r++)
        OPEN(rank[r], &dc, T, 3, r, DP, NULL);
    uint64_t n = one->parts[0].train.n_windows;
    int steps = (int)dataset_train_batches_per_epoch(rank[0], B);
    CHECK(n == 44 + 27);
    CHECK(steps == 11); /* 71 / 6 */
    int32_t gin[DP * B * T], gtg[DP * B * T], in[B * T], tg[B * T];
    int64_t ids[DP * B];
    int seen[71] = {0};
    /* two epochs: rank r's batch is slice r of the one-rank global batch */
    for (int s = 0; s < 2 * steps; s++) {
        CHECK(dataset_next_train(one, DP * B, gin, gtg, &e) == 0);
        for (int r = 0; r < DP; r++) {
            CHECK(dataset_next_train(rank[r], B, in, tg, &e) == 0);
            CHECK_MSG(memcmp(in, gin + r * B * T, sizeof in) == 0, "step %d rank %d", s, r);
            CHECK(memcmp(tg, gtg + r * B * T, sizeof tg) == 0);
            moe_data_cursor c0 = dataset_cursor(rank[0]), cr = dataset_cursor(rank[r]);
            CHECK(c0.epoch == cr.epoch && c0.position == cr.position);
        }
    }
    dataset_close(one);
    for (int r = 0; r < DP; r++)
        dataset_close(rank[r]);

    /* disjoint and complete: the ranks' windows over an epoch, without augmentation */
    dc.reverse_complement = 0;
    for (int r = 0; r < DP; r++)
        OPEN(rank[r], &dc, T, 3, r, DP, NULL);
    for (int s = 0; s < steps; s++)
        for (int r = 0; r < DP; r++) {
            draw_ids(rank[r], B, 1, ids);
            for (int b = 0; b < B; b++) {
                CHECK(ids[b] >= 0);
                if (ids[b] >= 0)
                    seen[ids[b]]++;
            }
        }
    int once = 0, twice = 0;
    for (int i = 0; i < 71; i++) {
        once += seen[i] == 1;
        twice += seen[i] > 1;
    }
    CHECK(once == 66 && twice == 0); /* 71 - 5 dropped */
    for (int r = 0; r < DP; r++)
        dataset_close(rank[r]);
}

/* ---- augmentation ------------------------------------------------------- */

static void test_reverse_complement(void)
{
    uint8_t w[] = {MOE_TOK_BOS, 'A', 'A', 'C', 'G', 'N', 'R', MOE_TOK_EOS, MOE_TOK_PAD};
    const uint8_t want[] = {MOE_TOK_BOS, 'Y', 'N', 'C', 'G', 'T', 'T', MOE_TOK_EOS, MOE_TOK_PAD};
    reverse_complement_bases(w, sizeof w);
    CHECK(memcmp(w, want, sizeof w) == 0);
    uint8_t odd[] = {'A', 'C', 'T'}, odd_want[] = {'A', 'G', 'T'};
    reverse_complement_bases(odd, 3);
    CHECK(memcmp(odd, odd_want, 3) == 0);
    uint8_t one[] = {MOE_TOK_BOS, 'G'};
    reverse_complement_bases(one, 2);
    CHECK(one[0] == MOE_TOK_BOS && one[1] == 'C');
    uint8_t none[] = {MOE_TOK_PAD, MOE_TOK_PAD};
    reverse_complement_bases(none, 2);
    CHECK(none[0] == MOE_TOK_PAD && none[1] == MOE_TOK_PAD);

    /* p = 1: every training row is its window reverse-complemented */
    const char *p = write_text("rc.fa", ">r\nAACGTATG\n");
    moe_data_cfg dc = data_cfg(p);
    dc.reverse_complement = 1;
    moe_dataset *ds;
    moe_err e;
    OPEN(ds, &dc, 6, 1, 0, 1, NULL);
    int32_t in[2 * 6], tg[2 * 6];
    CHECK(dataset_next_train(ds, 2, in, tg, &e) == 0);
    /* windows BOS AACGTA and ATG EOS PAD PAD PAD become BOS TACGTT and CAT EOS PAD PAD PAD */
    const int32_t in0[6] = {MOE_TOK_BOS, 'T', 'A', 'C', 'G', 'T'};
    const int32_t tg0[6] = {'T', 'A', 'C', 'G', 'T', 'T'};
    const int32_t in1[6] = {'C', 'A', 'T', MOE_TOK_EOS, MOE_TOK_PAD, MOE_TOK_PAD};
    const int32_t tg1[6] = {'A', 'T', MOE_TOK_EOS, -1, -1, -1};
    CHECK(memcmp(in, in0, sizeof in0) == 0 && memcmp(tg, tg0, sizeof tg0) == 0);
    CHECK(memcmp(in + 6, in1, sizeof in1) == 0 && memcmp(tg + 6, tg1, sizeof tg1) == 0);
    dataset_close(ds);

    /* p = 0.5: about half the windows, the same ones whatever the batch size */
    int lens[1] = {4000};
    p = write_random_fasta("rchalf.fa", lens, 1, 21);
    dc = data_cfg(p);
    dc.reverse_complement = 0.5;
    dc.shuffle = 1;
    dc.val_fraction = 0.1;
    moe_dataset *b1, *b4, *plain;
    OPEN(b1, &dc, 20, 5, 0, 1, NULL);
    OPEN(b4, &dc, 20, 5, 0, 1, NULL);
    dc.reverse_complement = 0;
    OPEN(plain, &dc, 20, 5, 0, 1, NULL);
    int32_t r1[20], t1[20], r4[4 * 20], t4[4 * 20], rp[20], tp[20];
    int flipped = 0, same_as_b4 = 1, total = 0;
    for (int s = 0; s < 40; s++) {
        CHECK(dataset_next_train(b4, 4, r4, t4, &e) == 0);
        for (int k = 0; k < 4; k++) {
            CHECK(dataset_next_train(b1, 1, r1, t1, &e) == 0);
            CHECK(dataset_next_train(plain, 1, rp, tp, &e) == 0);
            same_as_b4 &= memcmp(r1, r4 + 20 * k, sizeof r1) == 0;
            int differs = memcmp(r1, rp, sizeof r1) != 0;
            flipped += differs;
            total++;
            if (differs) { /* it is the reverse complement of the plain window */
                uint8_t w8[21];
                for (int t = 0; t < 20; t++)
                    w8[t] = (uint8_t)rp[t];
                w8[20] = (uint8_t)(tp[19] < 0 ? MOE_TOK_PAD : tp[19]);
                reverse_complement_bases(w8, 21);
                int ok = 1;
                for (int t = 0; t < 20; t++)
                    ok &= r1[t] == w8[t] && t1[t] == (w8[t + 1] == MOE_TOK_PAD ? -1 : w8[t + 1]);
                CHECK(ok);
            }
        }
    }
    CHECK(same_as_b4);
    CHECK_MSG(flipped > total / 4 && flipped < 3 * total / 4, "%d of %d flipped", flipped, total);
    int32_t v1[20], vt1[20], vp[20], vtp[20];
    CHECK(dataset_val_batch(b1, 0, 1, v1, vt1, &e) == 0);
    CHECK(dataset_val_batch(plain, 0, 1, vp, vtp, &e) == 0);
    CHECK(memcmp(v1, vp, sizeof v1) == 0);
    dataset_close(b1);
    dataset_close(b4);
    dataset_close(plain);
}

/* ---- cursor ------------------------------------------------------------- */

static void test_cursor_resume(void)
{
    int lens[2] = {900, 301};
    const char *p = write_random_fasta("cursor.fa", lens, 2, 33);
    moe_data_cfg dc = data_cfg(p);
    dc.shuffle = 1;
    dc.reverse_complement = 0.3;
    dc.stride = 12;
    dc.val_fraction = 0.05;
    enum { T = 24, B = 3, DP = 2 };
    moe_err e;
    for (int r = 0; r < DP; r++) {
        moe_dataset *straight, *resumed;
        OPEN(straight, &dc, T, 77, r, DP, NULL);
        uint64_t per_epoch = dataset_train_batches_per_epoch(straight, B);
        CHECK(per_epoch > 3);
        int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T];
        /* save mid-epoch and at the end of an epoch */
        int save_points[2] = {2, (int)per_epoch};
        for (int sp = 0; sp < 2; sp++) {
            dataset_close(straight);
            OPEN(straight, &dc, T, 77, r, DP, NULL);
            for (int s = 0; s < save_points[sp]; s++)
                CHECK(dataset_next_train(straight, B, in, tg, &e) == 0);
            moe_data_cursor c = dataset_cursor(straight);
            CHECK(c.fingerprint != 0);
            OPEN(resumed, &dc, T, 77, r, DP, NULL);
            CHECK_MSG(dataset_seek(resumed, c, &e) == 0, "%s", e.msg);
            int same = 1;
            uint64_t epoch0 = c.epoch;
            for (uint64_t s = 0; s < 2 * per_epoch + 1; s++) { /* across epoch boundaries */
                CHECK(dataset_next_train(straight, B, in, tg, &e) == 0);
                CHECK(dataset_next_train(resumed, B, in2, tg2, &e) == 0);
                same &= memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0;
            }
            CHECK_MSG(same, "rank %d save point %d", r, save_points[sp]);
            CHECK(dataset_cursor(resumed).epoch >= epoch0 + 2);
            moe_data_cursor a = dataset_cursor(straight), b = dataset_cursor(resumed);
            CHECK(a.epoch == b.epoch && a.position == b.position && a.fingerprint == b.fingerprint);
            dataset_close(resumed);
        }
        dataset_close(straight);
    }

    /* a cursor from other settings is refused, naming why */
    moe_dataset *a, *b;
    OPEN(a, &dc, T, 77, 0, 1, NULL);
    OPEN(b, &dc, T, 78, 0, 1, NULL);
    moe_data_cursor c = dataset_cursor(a);
    CHECK(dataset_seek(b, c, &e) == -1);
    CHECK(strstr(e.msg, "other data or settings") != NULL);
    c.fingerprint = 0; /* unchecked */
    CHECK(dataset_seek(b, c, &e) == 0);
    c = dataset_cursor(a);
    c.position = a->parts[0].train.n_windows + 1;
    CHECK(dataset_seek(a, c, &e) == -1);
    CHECK(strstr(e.msg, "past the end of an epoch") != NULL);
    c.position = a->parts[0].train.n_windows; /* an exhausted epoch: next draw starts epoch + 1 */
    c.epoch = 5;
    CHECK(dataset_seek(a, c, &e) == 0);
    int32_t in[T], tg[T];
    CHECK(dataset_next_train(a, 1, in, tg, &e) == 0);
    CHECK(dataset_cursor(a).epoch == 6 && dataset_cursor(a).position == 1);
    dataset_close(a);
    dataset_close(b);
}

/* ---- dataset errors and paths -------------------------------------------- */

#define CHECK_OPEN_FAILS(dcp, T, rank, size, dir, ...)                                \
    do {                                                                              \
        moe_dataset *ds_ = (moe_dataset *)1;                                          \
        moe_err e_ = {{0}};                                                           \
        CHECK(dataset_open(&ds_, (dcp), (T), 1, (rank), (size), (dir), &e_) == -1);   \
        CHECK(ds_ == NULL);                                                           \
        const char *frags_[] = {__VA_ARGS__};                                         \
        for (size_t k_ = 0; k_ < sizeof frags_ / sizeof *frags_; k_++)                \
            CHECK_MSG(strstr(e_.msg, frags_[k_]) != NULL, "'%s' not in: %s",          \
                      frags_[k_], e_.msg);                                            \
    } while (0)

static void test_dataset_errors(void)
{
    const char *good = write_text("good.fa", ">g\nACGTACGTACGTACGTACGT\n");
    moe_data_cfg dc = data_cfg(good);
    CHECK_OPEN_FAILS(&dc, 0, 0, 1, NULL, "train.seq_length = 0");
    dc.stride = -2;
    CHECK_OPEN_FAILS(&dc, 4, 0, 1, NULL, "data.stride = -2");
    dc = data_cfg(good);
    dc.val_fraction = 1.0;
    CHECK_OPEN_FAILS(&dc, 4, 0, 1, NULL, "data.val_fraction = 1", "[0, 1)");
    dc.val_fraction = NAN;
    CHECK_OPEN_FAILS(&dc, 4, 0, 1, NULL, "data.val_fraction");
    dc = data_cfg(good);
    dc.reverse_complement = 1.5;
    CHECK_OPEN_FAILS(&dc, 4, 0, 1, NULL, "data.reverse_complement = 1.5");
    dc = data_cfg(good);
    CHECK_OPEN_FAILS(&dc, 4, 2, 2, NULL, "rank 2 of 2");
    CHECK_OPEN_FAILS(&dc, 4, 0, 0, NULL, "rank 0 of 0");
    dc.n_files = 0;
    CHECK_OPEN_FAILS(&dc, 4, 0, 1, NULL, "data.files is empty");
    dc = data_cfg(good);
    dc.n_files = 2;
    set_file(1, "no_such_genome.fa");
    CHECK_OPEN_FAILS(&dc, 4, 0, 1, tmp_dir, "data.files[1] 'no_such_genome.fa'", "not found",
                     tmp_dir);
    set_file(1, "");
    CHECK_OPEN_FAILS(&dc, 4, 0, 1, NULL, "data.files[1] is an empty string");
    set_file(1, write_text("bad.fa", ">b\nACGU?\n"));
    CHECK_OPEN_FAILS(&dc, 4, 0, 1, NULL, "data.files[1]: ", "bad.fa:2:5:", "'?'");

    /* batch errors */
    dc = data_cfg(good); /* 22 tokens: 6 windows of T = 4 */
    moe_dataset *ds;
    moe_err e;
    OPEN(ds, &dc, 4, 1, 0, 1, NULL);
    int32_t in[8 * 4], tg[8 * 4];
    CHECK(dataset_next_train(ds, 0, in, tg, &e) == -1);
    CHECK(strstr(e.msg, "batch of 0 windows") != NULL);
    CHECK(dataset_next_train(ds, 7, in, tg, &e) == -1);
    CHECK(strstr(e.msg, "only 6 windows") != NULL);
    CHECK(strstr(e.msg, "train.micro_batch_size") != NULL);
    CHECK(dataset_next_train(ds, 6, in, tg, &e) == 0);
    CHECK(dataset_val_batch(ds, 0, 1, in, tg, &e) == -1);
    CHECK(strstr(e.msg, "validation data: none") != NULL);
    CHECK(dataset_val_batches(ds, 2) == 0);
    CHECK(isnan(dataset_val_unigram_entropy(ds)));
    dataset_close(ds);
    dc.val_fraction = 0.3;
    OPEN(ds, &dc, 4, 1, 2, 3, NULL);
    CHECK(dataset_val_batch(ds, -1, 1, in, tg, &e) == -1);
    CHECK(strstr(e.msg, "batch index -1") != NULL);
    CHECK(dataset_val_batch(ds, 0, 0, in, tg, &e) == -1);
    CHECK(dataset_next_train(ds, 2, in, tg, &e) == -1); /* 3 ranks x 2 > training windows */
    CHECK(strstr(e.msg, "micro-batch 2 x 3 data-parallel ranks") != NULL);
    dataset_close(ds);
    dataset_close(NULL);
}

static void test_paths(void)
{
    moe_data_cfg dc = data_cfg("lambda_virus.fa.gz");
    moe_dataset *ds;
    moe_data_stats st;
    /* relative to the data dir: the explicit one, then $MOE_DATA_DIR, then the built-in one */
    OPEN(ds, &dc, 512, 1, 0, 1, MOE_DATA_DIR_DEFAULT);
    dataset_stats(ds, &st);
    CHECK(st.bases == 48502);
    dataset_close(ds);
    setenv("MOE_DATA_DIR", tmp_dir, 1);
    CHECK_OPEN_FAILS(&dc, 512, 0, 1, NULL, "not found", tmp_dir);
    unsetenv("MOE_DATA_DIR");
    OPEN(ds, &dc, 512, 1, 0, 1, NULL);
    dataset_close(ds);
    /* relative to the current directory first */
    write_text("lambda_virus.fa.gz", ">local\nACGT\n");
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(tmp_dir) == 0);
    OPEN(ds, &dc, 512, 1, 0, 1, MOE_DATA_DIR_DEFAULT);
    dataset_stats(ds, &st);
    CHECK(st.bases == 4);
    dataset_close(ds);
    CHECK(chdir(cwd) == 0);
    /* several files, absolute paths */
    dc.n_files = 2;
    set_file(0, MOE_TEST_DATA_DIR "/mixed.fa.gz");
    set_file(1, tmp_path("lambda_virus.fa.gz"));
    OPEN(ds, &dc, 8, 1, 0, 1, NULL);
    dataset_stats(ds, &st);
    CHECK(st.n_files == 2 && st.n_records == 3 && st.bases == 20 + 8 + 4);
    dataset_close(ds);
}

static void test_genome_dataset(void)
{
    moe_data_cfg dc = data_cfg("ecoli_536.fna.gz");
    dc.val_fraction = 0.01;
    dc.shuffle = 1;
    dc.reverse_complement = 0.5;
    dc.mask_degenerate_bases = 1;
    moe_dataset *ds;
    moe_err e;
    double t0 = now_s();
    OPEN(ds, &dc, 1024, 1234, 1, 2, NULL);
    int32_t *in = malloc(8 * 1024 * sizeof *in), *tg = malloc(8 * 1024 * sizeof *tg);
    CHECK(dataset_next_train(ds, 8, in, tg, &e) == 0);
    double dt = now_s() - t0;
    fprintf(stderr, "  E. coli dataset opened and first batch drawn in %.3f s\n", dt);
    moe_data_stats st;
    dataset_stats(ds, &st);
    CHECK(st.bases == 4938920);
    CHECK(st.train_tokens + st.val_tokens == 4938922);
    CHECK(st.val_windows == 48);  /* round(0.01 * 4938921 / 1024) */
    CHECK(st.train_windows == (4938922 - (48 * 1024 + 1) - 1 + 1023) / 1024);
    int acgt = 1;
    for (int i = 0; i < 8 * 1024; i++)
        acgt &= tok_is_acgt(in[i]) || in[i] == MOE_TOK_BOS || in[i] == MOE_TOK_EOS ||
                in[i] == MOE_TOK_PAD;
    CHECK(acgt);
    double h = dataset_val_unigram_entropy(ds);
    CHECK(h > 1.38 && h < log(4.0) + 0.01); /* near-uniform bases: E. coli is ~50% GC */
    free(in);
    free(tg);
    dataset_close(ds);
}

int main(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "%s/moe_test_data_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_tokenizer);
    RUN(test_fasta_fixtures);
    RUN(test_fasta_genomes);
    RUN(test_fasta_errors);
    RUN(test_layout_counts);
    RUN(test_window_contents);
    RUN(test_degenerate_mask);
    RUN(test_split);
    RUN(test_split_tiny_records);
    RUN(test_short_records_hold_out);
    RUN(test_packed_windows);
    RUN(test_val_batches);
    RUN(test_shuffle);
    RUN(test_sharding);
    RUN(test_reverse_complement);
    RUN(test_cursor_resume);
    RUN(test_dataset_errors);
    RUN(test_paths);
    RUN(test_genome_dataset);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_dir);
    return check_summary("test_data");
}

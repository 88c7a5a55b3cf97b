/* Sequence sources (trainer/data/seq_source.h): the registry's choice per
 * config, the FASTA and the token store of the same files giving the same
 * records and tokens as the text itself, windows that stay inside their
 * records, and the dataset fingerprints resume checks depend on. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../trainer/data/data_internal.h"
#include "../../trainer/data/seq_source.h"
#include "../../trainer/data/store.h"
#include "../check.h"

static char tmp_dir[] = "/tmp/moekit-seqsrc-XXXXXX";

#include "../tmp_files.h"

static int prepare(const char *out, const char *const *paths, size_t n, moe_err *e)
{
    store_prepare_opts o;
    store_prepare_defaults(&o);
    o.progress = 0;
    o.threads = 2;
    store_prepare_result res;
    return store_prepare(out, paths, n, &o, &res, e);
}

/* ---- the corpus: two files, records of several lengths, wrapped lines,
 * lower case and IUPAC codes, written out and also known here as bases. */

static const char *const BASES[] = {
    "ACGTACGTACGTacgtNNRYACGT",
    "TTTT",
    "GATTACAGATTACAGATTACAGATTACAGATTACAGATTACAGATTACAGATTACAGATTACA"
    "ccccggggaaaattttCCCCGGGGAAAATTTTnnnnACGTACGTACGTACGTACGTACGTAC",
    "G",
    "ACGTTGCAACGTTGCAACGTTGCAACGTTGCAACGTTGCAACGTTGCA",
};
#define N_REC ((int)(sizeof BASES / sizeof BASES[0]))

static const char *files_of_corpus[2];

static void write_corpus(void)
{
    files_of_corpus[0] = write_text("a.fa", ">r0 first\nACGTACGTACGT\nacgtNNRYACGT\n"
                                            ">r1\nTTTT\n"
                                            ">r2 long one\n"
                                            "GATTACAGATTACAGATTACAGATTACAGATTACAGATTACAGATTACAGATTACAGATTACA\n"
                                            "ccccggggaaaattttCCCCGGGGAAAATTTTnnnnACGTACGTACGTACGTACGTACGTAC\n");
    files_of_corpus[1] = write_text("b.fa", ">s0\nG\n>s1\nACGTTGCAACGTTGCAACGTTGCA\nACGTTGCAACGTTGCAACGTTGCA\n");
}

/* The tokens of the whole corpus, by hand: per record BOS, the bases upper
 * cased, EOS, records back to back; and where each record starts. */
static uint8_t expect_tok[1024];
static uint64_t expect_off[N_REC + 1];

static void expect_tokens(void)
{
    uint64_t n = 0;
    for (int r = 0; r < N_REC; r++) {
        expect_off[r] = n;
        expect_tok[n++] = MOE_TOK_BOS;
        for (const char *c = BASES[r]; *c; c++)
            expect_tok[n++] = (uint8_t)toupper((unsigned char)*c);
        expect_tok[n++] = MOE_TOK_EOS;
    }
    expect_off[N_REC] = n;
}

static moe_data_cfg files_cfg(void)
{
    moe_data_cfg dc = {.n_files = 2, .files = files_of_corpus, .val_fraction = 0.1, .shuffle = 1};
    dc.pack = MOE_PACK_AUTO;
    return dc;
}

static moe_data_cfg store_cfg(const char *store)
{
    moe_data_cfg dc = files_cfg();
    snprintf(dc.store, sizeof dc.store, "%s", store);
    return dc;
}

/* Open the one part of dc through the registry, as parts_open does. */
static int open_part(data_part *p, const moe_data_cfg *dc, const seq_source_ops *want, moe_err *e)
{
    memset(p, 0, sizeof *p);
    seq_source_spec spec;
    seq_source_spec_for(&spec, dc, -1, NULL);
    p->src = seq_source_pick(&spec);
    p->weight = 1.0;
    CHECK_MSG(p->src == want, "picked %s, expected %s", p->src->name, want->name);
    return p->src->open(p, &spec, e);
}

/* ---- the registry ------------------------------------------------------- */

static void test_registry_picks(void)
{
    moe_data_cfg fc = files_cfg(), sc = store_cfg("/nowhere/store");
    moe_blend_entry bl[2] = {{"/nowhere/a", 1.0}, {"/nowhere/b", 2.0}};
    moe_data_cfg bc = {.n_blend = 2, .blend = bl};
    seq_source_spec s;

    seq_source_spec_for(&s, &fc, -1, "/data");
    CHECK(seq_source_pick(&s) == &seq_fasta_ops);
    CHECK(strcmp(seq_source_pick(&s)->name, "fasta") == 0);
    CHECK(s.path == NULL && strcmp(s.what, "data.files") == 0 && strcmp(s.data_dir, "/data") == 0);

    seq_source_spec_for(&s, &sc, -1, NULL);
    CHECK(seq_source_pick(&s) == &seq_store_ops);
    CHECK(strcmp(seq_source_pick(&s)->name, "store") == 0);
    CHECK(strcmp(s.path, "/nowhere/store") == 0 && strcmp(s.what, "data.store") == 0);

    for (int i = 0; i < 2; i++) {
        char what[64];
        snprintf(what, sizeof what, "data.blend[%d].store", i);
        seq_source_spec_for(&s, &bc, i, NULL);
        CHECK(seq_source_pick(&s) == &seq_store_ops);
        CHECK(s.path == bl[i].store && strcmp(s.what, what) == 0);
    }

    /* data.pack = auto: stores and blends pack, data.files pad */
    CHECK(!seq_fasta_ops.packs_by_default && seq_store_ops.packs_by_default);
    CHECK(!seq_fasta_ops.reads_on_demand && seq_store_ops.reads_on_demand);
    CHECK(seq_sources_pack_by_default(&fc) == 0);
    CHECK(seq_sources_pack_by_default(&sc) == 1);
    CHECK(seq_sources_pack_by_default(&bc) == 1);
}

/* Every row is complete: the data code calls through it without checks. */
static void test_rows_complete(void)
{
    const seq_source_ops *rows[] = {&seq_fasta_ops, &seq_store_ops};
    for (int i = 0; i < 2; i++) {
        const seq_source_ops *o = rows[i];
        CHECK(o->name && o->name[0]);
        CHECK(o->open && o->record && o->read && o->fingerprint && o->release_index && o->close);
    }
}

/* ---- the same records from both sources --------------------------------- */

/* Every record of p through its source: offset and length as the text
 * gives them, and its tokens read back equal to the text's. */
static void check_part_against_text(data_part *p)
{
    moe_err e = {{0}};
    CHECK(p->n_records == (uint64_t)N_REC);
    CHECK(p->n_tokens == expect_off[N_REC]);
    CHECK(p->n_bases == expect_off[N_REC] - 2 * (uint64_t)N_REC);
    CHECK(p->n_files == 2);
    for (uint64_t r = 0; r < p->n_records && r < (uint64_t)N_REC; r++) {
        uint64_t off = 0, len = 0;
        CHECK_MSG(p->src->record(p, r, &off, &len, &e) == 0, "%s", e.msg);
        CHECK_MSG(off == expect_off[r] && len == expect_off[r + 1] - expect_off[r],
                  "%s record %llu: offset %llu length %llu", p->src->name, (unsigned long long)r,
                  (unsigned long long)off, (unsigned long long)len);
        uint8_t got[256];
        if (len > sizeof got)
            continue;
        memset(got, 0xee, sizeof got);
        CHECK(p->src->read(p, off, (size_t)len, got, &e) == (size_t)len);
        CHECK_MSG(memcmp(got, expect_tok + expect_off[r], (size_t)len) == 0, "%s record %llu",
                  p->src->name, (unsigned long long)r);
        /* part_record (what the layout calls) agrees */
        uint64_t o2, l2;
        part_record(p, r, &o2, &l2);
        CHECK(o2 == off && l2 == len && !p->failed);
    }
    /* a read that spans records, as a packed window does */
    uint8_t all[1024];
    size_t n = (size_t)expect_off[N_REC] - 3;
    CHECK(p->src->read(p, 3, n, all, &e) == n);
    CHECK(memcmp(all, expect_tok + 3, n) == 0);
}

static void test_sources_give_the_text(void)
{
    moe_err e = {{0}};
    CHECK_MSG(prepare(tmp_path("corpus"), files_of_corpus, 2, &e) == 0, "%s", e.msg);
    moe_data_cfg fc = files_cfg(), sc = store_cfg(tmp_path("corpus"));
    data_part pf, ps;
    CHECK_MSG(open_part(&pf, &fc, &seq_fasta_ops, &e) == 0, "%s", e.msg);
    CHECK_MSG(open_part(&ps, &sc, &seq_store_ops, &e) == 0, "%s", e.msg);
    check_part_against_text(&pf);
    check_part_against_text(&ps);
    /* the FASTA's tokens are in memory, the store's mapped: the same bytes */
    CHECK(pf.tokens && memcmp(pf.tokens, expect_tok, (size_t)expect_off[N_REC]) == 0);
    CHECK(ps.tokens && memcmp(ps.tokens, expect_tok, (size_t)expect_off[N_REC]) == 0);
    ps.src->release_index(&ps);
    pf.src->release_index(&pf);
    /* records still read after the index pages are dropped */
    uint64_t off, len;
    CHECK(ps.src->record(&ps, 2, &off, &len, &e) == 0 && off == expect_off[2]);
    pf.src->close(&pf);
    ps.src->close(&ps);
    CHECK(pf.src_state == NULL && ps.src_state == NULL);
}

/* Padded windows of a dataset from either source: each lies inside one
 * record (the layout found its records through record()), its tokens the
 * text's at that place; both sources give the same windows. */
static void test_windows_inside_records(void)
{
    moe_err e = {{0}};
    moe_data_cfg fc = files_cfg(), sc = store_cfg(tmp_path("corpus"));
    fc.pack = sc.pack = MOE_PACK_PADDED;
    moe_dataset *a = NULL, *b = NULL;
    CHECK_MSG(dataset_open(&a, &fc, 16, 3, 0, 1, NULL, &e) == 0, "%s", e.msg);
    CHECK_MSG(dataset_open(&b, &sc, 16, 3, 0, 1, NULL, &e) == 0, "%s", e.msg);
    if (!a || !b)
        return;
    CHECK(a->parts[0].src == &seq_fasta_ops && b->parts[0].src == &seq_store_ops);
    for (int split = 0; split < 2; split++) {
        const data_split *sa = split ? &a->parts[0].val : &a->parts[0].train;
        const data_split *sb = split ? &b->parts[0].val : &b->parts[0].train;
        CHECK(sa->n_windows == sb->n_windows);
        CHECK(split || sa->n_windows > 0);
        for (uint64_t id = 0; id < sa->n_windows && id < sb->n_windows; id++) {
            uint64_t st_a, n_a, st_b, n_b;
            split_window(sa, id, 16, &st_a, &n_a);
            split_window(sb, id, 16, &st_b, &n_b);
            CHECK(st_a == st_b && n_a == n_b);
            int r = 0;
            while (r < N_REC && expect_off[r + 1] <= st_a)
                r++;
            CHECK_MSG(r < N_REC && st_a + n_a <= expect_off[r + 1],
                      "window %llu [%llu, +%llu) crosses a record end", (unsigned long long)id,
                      (unsigned long long)st_a, (unsigned long long)n_a);
            uint8_t w[17];
            CHECK(b->parts[0].src->read(&b->parts[0], st_b, (size_t)n_b, w, &e) == n_b);
            CHECK(memcmp(w, expect_tok + st_a, (size_t)n_a) == 0);
        }
    }
    /* and whole batches: inputs and targets the same from either source */
    int32_t ia[4 * 16], ta[4 * 16], ib[4 * 16], tb[4 * 16];
    int same = 1;
    for (int s = 0; s < 10; s++) {
        CHECK(dataset_next_train(a, 4, ia, ta, &e) == 0 && dataset_next_train(b, 4, ib, tb, &e) == 0);
        same &= !memcmp(ia, ib, sizeof ia) && !memcmp(ta, tb, sizeof ta);
    }
    CHECK(same);
    dataset_close(a);
    dataset_close(b);
}

/* ---- fingerprints and messages ------------------------------------------ */

/* The fingerprints of the shipped lambda genome and a test file (seq_length
 * 64, seed 7, val_fraction 0.1, shuffled) as moekit has always computed
 * them: checkpoints carry them, and a resume refuses a cursor whose
 * fingerprint differs, so a source must never change its contribution. */
static void test_fingerprints_unchanged(void)
{
    const char *files[] = {MOE_DATA_DIR_DEFAULT "/lambda_virus.fa.gz",
                           MOE_TEST_DATA_DIR "/mixed.fa.gz"};
    moe_err e = {{0}};
    CHECK_MSG(prepare(tmp_path("fp1"), files, 2, &e) == 0, "%s", e.msg);
    CHECK_MSG(prepare(tmp_path("fp2"), files + 1, 1, &e) == 0, "%s", e.msg);
    moe_data_cfg fc = {.n_files = 2, .files = files, .val_fraction = 0.1, .shuffle = 1,
                       .reverse_complement = 0.5, .mask_degenerate_bases = 1};
    moe_data_cfg sc = fc;
    snprintf(sc.store, sizeof sc.store, "%s", tmp_path("fp1"));
    moe_blend_entry bl[2] = {{tmp_path("fp1"), 2.0}, {tmp_path("fp2"), 1.0}};
    moe_data_cfg bc = fc;
    bc.n_files = 0;
    bc.files = NULL;
    bc.n_blend = 2;
    bc.blend = bl;
    static const struct {
        int cfg; /* 0 files, 1 store, 2 blend */
        moe_pack_mode pack;
        uint64_t fingerprint;
    } want[] = {
        {0, MOE_PACK_AUTO, 0x7772d06ba148801dull},  {0, MOE_PACK_PACKED, 0x70bd3f8666bd62f4ull},
        {1, MOE_PACK_AUTO, 0xa311c4485cc391c9ull},  {1, MOE_PACK_PADDED, 0xff3a79004ece4207ull},
        {2, MOE_PACK_AUTO, 0xa24040e85f5a9e8aull},  {2, MOE_PACK_PADDED, 0x342d838c75ecfdcaull},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        moe_data_cfg dc = want[i].cfg == 0 ? fc : want[i].cfg == 1 ? sc : bc;
        dc.pack = want[i].pack;
        moe_dataset *ds = NULL;
        CHECK_MSG(dataset_open(&ds, &dc, 64, 7, 0, 1, NULL, &e) == 0, "%s", e.msg);
        if (!ds)
            continue;
        CHECK_MSG(dataset_cursor(ds).fingerprint == want[i].fingerprint,
                  "config %d pack %d: fingerprint %016llx, expected %016llx", want[i].cfg,
                  (int)want[i].pack, (unsigned long long)dataset_cursor(ds).fingerprint,
                  (unsigned long long)want[i].fingerprint);
        dataset_close(ds);
    }
}

#define CHECK_MSG_HAS(e, needle)                                                                   \
    CHECK_MSG(strstr((e).msg, needle) != NULL, "message lacks \"%s\": %s", needle, (e).msg)

/* A store that is not there is named by its config key, as always. */
static void test_open_errors_name_the_entry(void)
{
    moe_err e = {{0}};
    moe_dataset *ds = NULL;
    moe_data_cfg sc = store_cfg(tmp_path("missing"));
    CHECK(dataset_open(&ds, &sc, 16, 1, 0, 1, NULL, &e) == -1 && ds == NULL);
    CHECK_MSG(strncmp(e.msg, "data.store: ", 12) == 0, "%s", e.msg);
    moe_blend_entry bl[2] = {{tmp_path("corpus"), 1.0}, {tmp_path("missing"), 1.0}};
    moe_data_cfg bc = {.n_blend = 2, .blend = bl};
    CHECK(dataset_open(&ds, &bc, 16, 1, 0, 1, NULL, &e) == -1 && ds == NULL);
    CHECK_MSG(strncmp(e.msg, "data.blend[1].store: ", 21) == 0, "%s", e.msg);
    const char *none[] = {tmp_path("missing.fa")};
    moe_data_cfg fc = {.n_files = 1, .files = none};
    CHECK(dataset_open(&ds, &fc, 16, 1, 0, 1, NULL, &e) == -1 && ds == NULL);
    CHECK_MSG_HAS(e, "data.files[0]");
}

int main(void)
{
    if (!mkdtemp(tmp_dir))
        return perror("mkdtemp"), 1;
    write_corpus();
    expect_tokens();
    RUN(test_registry_picks);
    RUN(test_rows_complete);
    RUN(test_sources_give_the_text);
    RUN(test_windows_inside_records);
    RUN(test_fingerprints_unchanged);
    RUN(test_open_errors_name_the_entry);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_dir);
    return check_summary("test_seq_source");
}

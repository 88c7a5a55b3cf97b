/* Token stores: moe-data prepare (order, idempotence, atomic replacement,
 * limits, bad inputs), the index checks, and training from a store giving
 * the very windows, batches and cursor behaviour that data.files gives. */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "../../trainer/data/data_internal.h"
#include "../../trainer/data/inputs.h"
#include "../../trainer/data/map_guard.h"
#include "../../trainer/data/store.h"
#include "../check.h"

static char tmp_dir[] = "/tmp/moekit-store-XXXXXX";

#include "../tmp_files.h"

static void write_gz(const char *path, const char *text, size_t repeat)
{
    gzFile g = gzopen(path, "wb9");
    CHECK(g != NULL);
    for (size_t i = 0; g && i < repeat; i++)
        gzputs(g, text);
    if (g)
        gzclose(g);
}

static store_prepare_opts quiet_opts(void)
{
    store_prepare_opts o;
    store_prepare_defaults(&o);
    o.progress = 0;
    o.threads = 2;
    return o;
}

static int prepare(const char *out, const char *const *paths, size_t n, store_prepare_opts *o,
                   store_prepare_result *res, moe_err *e)
{
    store_prepare_opts d = quiet_opts();
    return store_prepare(out, paths, n, o ? o : &d, res, e);
}

#define CHECK_MSG_HAS(e, needle) CHECK_MSG(strstr((e).msg, needle) != NULL, "message lacks \"%s\": %s", needle, (e).msg)

/* Temporary directories of store out (out.tmp-*) there are now. */
static int count_tmp_dirs(const char *out)
{
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s.tmp-*", out);
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    if (n)
        globfree(&g);
    return n;
}

/* ---- what a store holds ------------------------------------------------- */

/* Record i's name and length, through the on-demand accessors ("" and 0
 * when they refuse). */
static const char *rec_name(moe_store *s, uint64_t i)
{
    const char *name;
    moe_err e;
    return store_record_name(s, i, &name, &e) == 0 ? name : "";
}

static uint64_t rec_len(moe_store *s, uint64_t i)
{
    uint64_t off, len;
    moe_err e;
    return store_record_at(s, i, &off, &len, &e) == 0 ? len : 0;
}

static const char *file_path(moe_store *s, uint64_t f)
{
    store_file fe;
    const char *path;
    moe_err e;
    return store_file_at(s, f, &fe, &path, &e) == 0 ? path : "";
}

static void test_prepare_and_read(void)
{
    const char *a = write_text("a.fa", ">r1 first\nACGTN\nacgt\n>r2\nGGG\n");
    const char *b = tmp_path("b.fa.gz");
    write_gz(b, ">only\nTTTTCCCC\n", 1);
    const char *paths[] = {a, b};
    store_prepare_result res;
    moe_err e = {{0}};
    CHECK_MSG(prepare(tmp_path("s1"), paths, 2, NULL, &res, &e) == 0, "%s", e.msg);
    CHECK(!res.up_to_date && res.n_records == 3 && res.n_bases == 9 + 3 + 8);
    moe_store s;
    CHECK_MSG(store_open(&s, tmp_path("s1"), &e) == 0, "%s", e.msg);
    CHECK(s.hdr->n_files == 2 && s.hdr->n_records == 3 && s.hdr->n_tokens == 20 + 6);
    /* BOS, upper-cased bases, EOS; records in input order */
    static const uint8_t want[] = {MOE_TOK_BOS, 'A', 'C', 'G', 'T', 'N', 'A', 'C', 'G', 'T',
                                   MOE_TOK_EOS, MOE_TOK_BOS, 'G', 'G', 'G', MOE_TOK_EOS,
                                   MOE_TOK_BOS, 'T', 'T', 'T', 'T', 'C', 'C', 'C', 'C', MOE_TOK_EOS};
    CHECK(memcmp(s.tokens, want, sizeof want) == 0);
    uint64_t file = 9;
    CHECK(strcmp(rec_name(&s, 0), "r1 first") == 0 && strcmp(rec_name(&s, 1), "r2") == 0);
    CHECK(strcmp(rec_name(&s, 2), "only") == 0 && store_record_file(&s, 2, &file, &e) == 0 &&
          file == 1);
    CHECK(store_record_file(&s, 1, &file, &e) == 0 && file == 0);
    CHECK(rec_len(&s, 0) == 11 && rec_len(&s, 1) == 5 && rec_len(&s, 2) == 10);
    CHECK(strcmp(file_path(&s, 1), b) == 0);
    CHECK(store_verify_index(&s, &e) == 0);
    CHECK(store_verify_tokens(&s, &e) == 0);
    store_close(&s);
}

/* many files in parallel land in input order, whatever finishes first */
static void test_many_files_in_order(void)
{
    CHECK(mkdir(tmp_path("many"), 0755) == 0);
    char name[64], text[128];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "many/f%03d.fa%s", i, i % 3 ? "" : ".gz");
        snprintf(text, sizeof text, ">rec%d\n%.*s\n", i, 1 + i % 50,
                 "ACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTACGT");
        if (i % 3)
            write_text(name, text);
        else
            write_gz(tmp_path(name), text, 1);
    }
    moe_path_list list = {0};
    moe_err e = {{0}};
    CHECK_MSG(inputs_expand(&list, tmp_path("many"), NULL, &e) == 0, "%s", e.msg);
    CHECK(list.n == 300);
    store_prepare_result res;
    CHECK_MSG(prepare(tmp_path("s_many"), (const char *const *)list.paths, list.n, NULL, &res, &e) == 0,
              "%s", e.msg);
    moe_store s;
    CHECK(store_open(&s, tmp_path("s_many"), &e) == 0);
    for (int i = 0; i < 300 && s.hdr; i++) {
        snprintf(name, sizeof name, "rec%d", i);
        CHECK_MSG(strcmp(rec_name(&s, (uint64_t)i), name) == 0, "record %d is %s", i,
                  rec_name(&s, (uint64_t)i));
        CHECK(rec_len(&s, (uint64_t)i) == (uint64_t)(1 + i % 50) + 2);
    }
    store_close(&s);
    path_list_free(&list);
}

/* a file bigger than a worker's buffer (its tokens spill while the file
 * ahead is read) among small ones that finish first and are parked */
static void test_spill_and_park(void)
{
    const char *paths[12];
    static char keep[12][4096]; /* tmp_path's buffers rotate */
    char name[32], text[64];
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof name, "sp%02d.fa", i);
        if (i == 1 || i == 6) {
            FILE *f = fopen(tmp_path(name), "w");
            CHECK(f != NULL);
            if (!f)
                return;
            fprintf(f, ">big%d\n", i);
            static char line[4001];
            for (int k = 0; k < 4000; k++)
                line[k] = "ACGT"[(k * 7 + i) % 4];
            line[4000] = '\n';
            for (int k = 0; k < 10000; k++) /* 40 Mbases: more than the 32 MiB buffer */
                fwrite(line, 1, sizeof line, f);
            fclose(f);
            paths[i] = tmp_path(name);
        } else {
            snprintf(text, sizeof text, ">small%d\nACGTTGCA\n", i);
            paths[i] = write_text(name, text);
        }
        snprintf(keep[i], sizeof keep[i], "%s", paths[i]);
        paths[i] = keep[i];
    }
    store_prepare_result res;
    moe_err e = {{0}};
    CHECK_MSG(prepare(tmp_path("ssp"), paths, 12, NULL, &res, &e) == 0, "%s", e.msg);
    moe_store s;
    CHECK(store_open(&s, tmp_path("ssp"), &e) == 0);
    if (!s.hdr)
        return;
    CHECK(s.hdr->n_records == 12 && s.hdr->n_bases == 10 * 8 + 2 * 40000000ull);
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof name, i == 1 || i == 6 ? "big%d" : "small%d", i);
        CHECK_MSG(strcmp(rec_name(&s, (uint64_t)i), name) == 0, "record %d: %s", i,
                  rec_name(&s, (uint64_t)i));
    }
    uint64_t big_off = 0, big_len = 0;
    CHECK(store_record_at(&s, 6, &big_off, &big_len, &e) == 0 && big_len == 40000002);
    const uint8_t *big = s.tokens + big_off;
    CHECK(big[0] == MOE_TOK_BOS && big[1] == "ACGT"[6 % 4] && big[40000001] == MOE_TOK_EOS);
    CHECK_MSG(store_verify_tokens(&s, &e) == 0, "%s", e.msg);
    store_close(&s);
}

/* ---- idempotence and atomic replacement --------------------------------- */

static void test_up_to_date_and_replace(void)
{
    const char *a = write_text("u.fa", ">u\nACGT\n");
    const char *paths[] = {a};
    store_prepare_result res;
    moe_err e = {{0}};
    CHECK(prepare(tmp_path("su"), paths, 1, NULL, &res, &e) == 0 && !res.up_to_date);
    struct stat before, after;
    CHECK(stat(tmp_path("su/tokens.bin"), &before) == 0);
    CHECK(prepare(tmp_path("su"), paths, 1, NULL, &res, &e) == 0 && res.up_to_date);
    CHECK(stat(tmp_path("su/tokens.bin"), &after) == 0 && after.st_ino == before.st_ino);
    /* a changed input rebuilds, and the new store replaces the old one whole */
    write_text("u.fa", ">u\nACGTACGT\n");
    struct timespec ts[2] = {{0, UTIME_OMIT}, {before.st_mtim.tv_sec + 5, 0}};
    CHECK(utimensat(AT_FDCWD, a, ts, 0) == 0);
    CHECK(prepare(tmp_path("su"), paths, 1, NULL, &res, &e) == 0 && !res.up_to_date);
    moe_store s;
    CHECK(store_open(&s, tmp_path("su"), &e) == 0 && s.hdr->n_bases == 8);
    store_close(&s);
    /* a failed run leaves the previous store and no temporary directory */
    const char *bad = write_text("bad.fa", ">x\nACGT\n>y\nAC!T\n");
    const char *two[] = {a, bad};
    CHECK(prepare(tmp_path("su"), two, 2, NULL, &res, &e) == -1);
    CHECK_MSG_HAS(e, "bad.fa:4:3");
    CHECK(store_open(&s, tmp_path("su"), &e) == 0 && s.hdr->n_bases == 8);
    store_close(&s);
    CHECK(count_tmp_dirs(tmp_path("su")) == 0);
    /* never replace something that is not a store */
    write_text("notastore", "precious");
    CHECK(prepare(tmp_path("notastore"), paths, 1, NULL, &res, &e) == -1);
    CHECK_MSG_HAS(e, "not a token store");
}

/* A child that holds an fcntl lock on path until it is told to go (the
 * owner of a temporary directory, alive on another node); returns its pid
 * and the pipe that lets it go. */
static pid_t hold_lock(const char *path, int *release)
{
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(go[1]); /* the parent's close is the signal to go */
        int fd = open(path, O_RDWR | O_CREAT, 0644);
        struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        char c = fd >= 0 && fcntl(fd, F_SETLK, &l) == 0 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) < 0)
            _exit(1);
        _exit(0);
    }
    char c = 0;
    CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    *release = go[1];
    return pid;
}

/* prepare removes only temporary directories whose owner is provably dead:
 * another node's run (its pid means nothing here) was once removed by the
 * pid check, and the same pid in two PID namespaces shared one name */
static void test_tmp_dirs_of_others(void)
{
    const char *paths[] = {write_text("o.fa", ">o\nACGT\n")};
    store_prepare_result res;
    moe_err e = {{0}};
    char old_style[4200], elsewhere[4200], lock[4300], file[4300];
    pid_t gone = fork();
    if (gone == 0)
        _exit(0);
    waitpid(gone, NULL, 0); /* a pid nobody here has: as another node's */
    snprintf(old_style, sizeof old_style, "%s.tmp-%ld", tmp_path("so"), (long)gone);
    CHECK(mkdir(old_style, 0755) == 0);
    snprintf(file, sizeof file, "%s/tokens.bin", old_style);
    CHECK(close(open(file, O_WRONLY | O_CREAT, 0644)) == 0);
    snprintf(elsewhere, sizeof elsewhere, "%s.tmp-othernode-4242-0badcafe", tmp_path("so"));
    CHECK(mkdir(elsewhere, 0755) == 0);
    snprintf(lock, sizeof lock, "%s/owner.lock", elsewhere);
    int release;
    pid_t owner = hold_lock(lock, &release);
    CHECK_MSG(prepare(tmp_path("so"), paths, 1, NULL, &res, &e) == 0, "%s", e.msg);
    CHECK_MSG(access(file, F_OK) == 0, "%s was removed: another node's run would fail", old_style);
    CHECK_MSG(access(lock, F_OK) == 0, "%s was removed while its owner lives", elsewhere);
    CHECK(count_tmp_dirs(tmp_path("so")) == 2); /* and this run's own is gone */
    /* its owner dies: the next prepare removes it, and only it */
    close(release);
    waitpid(owner, NULL, 0);
    store_prepare_opts o = quiet_opts();
    o.force = 1;
    CHECK_MSG(prepare(tmp_path("so"), paths, 1, &o, &res, &e) == 0, "%s", e.msg);
    CHECK_MSG(access(elsewhere, F_OK) != 0, "%s outlived its owner", elsewhere);
    CHECK(access(file, F_OK) == 0);
    CHECK(count_tmp_dirs(tmp_path("so")) == 1);
}

/* ---- limits and bad inputs ---------------------------------------------- */

static void test_limits(void)
{
    const char *a = write_text("long.fa", ">short\nACGT\n>long one\nACGTACGTACGT\n");
    const char *paths[] = {a};
    store_prepare_opts o = quiet_opts();
    store_prepare_result res;
    moe_err e = {{0}};
    o.max_record_bases = 10;
    CHECK(prepare(tmp_path("sl"), paths, 1, &o, &res, &e) == -1);
    CHECK_MSG_HAS(e, "long.fa:3");
    CHECK_MSG_HAS(e, "'long one'");
    CHECK_MSG_HAS(e, "--max-record-bases");
    o = quiet_opts();
    o.max_total_bases = 12;
    CHECK(prepare(tmp_path("sl"), paths, 1, &o, &res, &e) == -1);
    CHECK_MSG_HAS(e, "--max-total-bases");
    CHECK(access(tmp_path("sl"), F_OK) != 0);
    /* a decompression bomb: 8 MB of text from a few KB of gzip */
    const char *bomb = tmp_path("bomb.fa.gz");
    static char line[4097];
    memset(line, 'A', 4096);
    gzFile g = gzopen(bomb, "wb9");
    gzputs(g, ">bomb\n");
    for (int i = 0; i < 2048; i++) {
        gzwrite(g, line, 4096);
        gzputs(g, "\n");
    }
    gzclose(g);
    const char *bp[] = {bomb};
    o = quiet_opts();
    o.max_inflate_ratio = 100;
    o.inflate_check_after = 1 << 20;
    CHECK(prepare(tmp_path("sb"), bp, 1, &o, &res, &e) == -1);
    CHECK_MSG_HAS(e, "bomb.fa.gz");
    CHECK_MSG_HAS(e, "decompression bomb");
}

static void test_bad_inputs(void)
{
    store_prepare_result res;
    moe_err e = {{0}};
    const char *fifo = tmp_path("pipe.fa");
    CHECK(mkfifo(fifo, 0600) == 0);
    const char *p1[] = {fifo};
    CHECK(prepare(tmp_path("sx"), p1, 1, NULL, &res, &e) == -1);
    CHECK_MSG_HAS(e, "FIFO");
    CHECK(mkdir(tmp_path("adir.fa"), 0755) == 0);
    const char *p2[] = {tmp_path("adir.fa")};
    CHECK(prepare(tmp_path("sx"), p2, 1, NULL, &res, &e) == -1);
    CHECK_MSG_HAS(e, "is a directory");
    const char *p3[] = {write_text("empty.fa", "")};
    CHECK(prepare(tmp_path("sx"), p3, 1, NULL, &res, &e) == -1);
    CHECK_MSG_HAS(e, "empty file");
    const char *p4[] = {write_text("hdr.fa", ">lonely header\n")};
    CHECK(prepare(tmp_path("sx"), p4, 1, NULL, &res, &e) == -1);
    CHECK_MSG_HAS(e, "hdr.fa:1: record 'lonely header' has no sequence");
    moe_path_list list = {0};
    CHECK(inputs_expand(&list, tmp_path("nothing*.fa"), NULL, &e) == -1);
    CHECK_MSG_HAS(e, "no file matches");
    write_text("list.txt", "# inputs\nu.fa\n\nmissing.fa\n");
    char at[4200];
    snprintf(at, sizeof at, "@%s", tmp_path("list.txt"));
    CHECK(inputs_expand(&list, at, NULL, &e) == -1);
    CHECK_MSG_HAS(e, "list.txt:4");
    CHECK_MSG_HAS(e, "missing.fa");
    path_list_free(&list);
}

/* every file once, whatever the links: a directory linking to itself is a
 * loop not followed (it once listed the same file 41 times, until ELOOP;
 * tests/cli/data.sh has two such links, which never ended), a second name
 * of a file or of a directory is read once */
static void test_inputs_links(void)
{
    CHECK(mkdir(tmp_path("links"), 0755) == 0);
    CHECK(mkdir(tmp_path("links/sub"), 0755) == 0);
    write_text("links/a.fa", ">a\nACGT\n");
    write_text("links/sub/b.fa", ">b\nACGT\n");
    CHECK(symlink(".", tmp_path("links/self")) == 0);
    CHECK(symlink("sub", tmp_path("links/sub2")) == 0);
    CHECK(link(tmp_path("links/a.fa"), tmp_path("links/hard.fa")) == 0);
    moe_path_list list = {0};
    moe_err e = {{0}};
    CHECK_MSG(inputs_expand(&list, tmp_path("links"), NULL, &e) == 0, "%s", e.msg);
    CHECK_MSG(list.n == 2, "%zu files listed", list.n);
    CHECK(list.n >= 1 && !strcmp(list.paths[0], tmp_path("links/a.fa")));
    CHECK(list.n >= 2 && !strcmp(list.paths[1], tmp_path("links/sub/b.fa")));
    /* an input naming only files already listed is no error */
    CHECK_MSG(inputs_expand(&list, tmp_path("links/hard.fa"), NULL, &e) == 0, "%s", e.msg);
    CHECK(list.n == 2);
    path_list_free(&list);
}

/* ---- the index checks ----------------------------------------------------- */

static void test_damaged_index(void)
{
    const char *paths[] = {write_text("d.fa", ">d\nACGTACGT\n")};
    store_prepare_result res;
    moe_err e = {{0}};
    CHECK(prepare(tmp_path("sd"), paths, 1, NULL, &res, &e) == 0);
    moe_store s;
    CHECK(store_open(&s, tmp_path("sd"), &e) == 0);
    size_t n = s.index_size;
    uint8_t *copy = malloc(n);
    memcpy(copy, s.index_map, n);
    uint64_t ntok = s.hdr->n_tokens;
    store_close(&s);
    CHECK(store_check_index(copy, n, ntok, "ix", &e) == 0);
    copy[n - 6] ^= 1; /* a byte of the names (the last 4 bytes are the one chunk's CRC) */
    CHECK(store_check_index(copy, n, ntok, "ix", &e) == -1);
    CHECK_MSG_HAS(e, "chunk 0");
    CHECK_MSG_HAS(e, "fails its checksum");
    copy[n - 6] ^= 1;
    copy[n - 1] ^= 1; /* the chunk table */
    CHECK(store_check_index(copy, n, ntok, "ix", &e) == -1);
    CHECK_MSG_HAS(e, "chunk table checksum");
    copy[n - 1] ^= 1;
    /* a store of the old format is refused with what to do */
    uint32_t v1 = 1;
    memcpy(copy + 8, &v1, 4);
    CHECK(store_check_index(copy, n, ntok, "ix", &e) == -1);
    CHECK_MSG_HAS(e, "format version 1");
    CHECK_MSG_HAS(e, "prepare the store again");
    v1 = STORE_VERSION;
    memcpy(copy + 8, &v1, 4);
    CHECK(store_check_index(copy, n, ntok + 1, "ix", &e) == -1);
    CHECK_MSG_HAS(e, "do not belong together");
    CHECK(store_check_index(copy, 100, ntok, "ix", &e) == -1);
    free(copy);
    /* a truncated tokens file */
    CHECK(truncate(tmp_path("sd/tokens.bin"), 4) == 0);
    CHECK(store_open(&s, tmp_path("sd"), &e) == -1);
    CHECK_MSG_HAS(e, "do not belong together");
}

/* ---- opening does not grow with the records ---------------------------- */

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = atol(line + 6);
    if (f)
        fclose(f);
    return kib;
}

/* A million records (a 21 MB index): opening reads the header and the
 * chunk table only, so no chunk of the tables is touched and the resident
 * set grows by far less than the index (a full check at open read all of
 * it: +20 MiB). Then one damaged chunk: open still succeeds, reading an
 * entry of that chunk names it, the full check finds it. */
static void test_open_is_flat(void)
{
    enum { N = 1000000 };
    const char *fa = tmp_path("million.fa");
    FILE *f = fopen(fa, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    for (int i = 0; i < N; i++)
        fprintf(f, ">%d\nACGT\n", i);
    fclose(f);
    const char *paths[] = {fa};
    store_prepare_result res;
    moe_err e = {{0}};
    CHECK_MSG(prepare(tmp_path("smillion"), paths, 1, NULL, &res, &e) == 0, "%s", e.msg);
    moe_store s;
    long before = rss_kib();
    CHECK_MSG(store_open(&s, tmp_path("smillion"), &e) == 0, "%s", e.msg);
    long grew = rss_kib() - before;
    if (!s.hdr)
        return;
    CHECK(s.hdr->n_records == N && s.index_size > 16u * N);
    uint64_t touched = 0;
    for (uint64_t c = 0; c < s.n_chunks; c++)
        touched += s.chunk_ok[c];
    CHECK_MSG(touched == 0, "store_open checked %llu of %llu chunks", (unsigned long long)touched,
              (unsigned long long)s.n_chunks);
    CHECK_MSG(grew < 1024, "store_open of %d records grew the resident set by %ld KiB", N, grew);
    uint64_t off, len;
    CHECK(store_record_at(&s, N / 2, &off, &len, &e) == 0 && len == 6 && off == 6ull * (N / 2));
    CHECK(strcmp(rec_name(&s, N - 1), "999999") == 0);
    store_close(&s);

    /* flip a byte of record N / 2's entry on disk */
    int fd = open(tmp_path("smillion/index.bin"), O_RDWR);
    CHECK(fd >= 0);
    store_header h;
    CHECK(pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h);
    off_t at = (off_t)(h.records_offset + (N / 2) * sizeof(store_record) + 3);
    uint8_t byte;
    CHECK(pread(fd, &byte, 1, at) == 1);
    byte ^= 0x40;
    CHECK(pwrite(fd, &byte, 1, at) == 1);
    close(fd);
    CHECK_MSG(store_open(&s, tmp_path("smillion"), &e) == 0, "%s", e.msg);
    CHECK(store_record_at(&s, 0, &off, &len, &e) == 0);
    CHECK(store_record_at(&s, N / 2, &off, &len, &e) == -1);
    CHECK_MSG_HAS(e, "smillion/index.bin: chunk ");
    CHECK_MSG_HAS(e, "fails its checksum");
    CHECK(store_verify_index(&s, &e) == -1);
    CHECK_MSG_HAS(e, "fails its checksum");
    store_close(&s);
    /* training from it refuses at start-up, naming the chunk */
    moe_data_cfg dc = {.val_fraction = 0.1};
    snprintf(dc.store, sizeof dc.store, "%s", tmp_path("smillion"));
    moe_dataset *ds = NULL;
    CHECK(dataset_open(&ds, &dc, 8, 1, 0, 1, NULL, &e) == -1);
    CHECK_MSG_HAS(e, "fails its checksum");
}

/* ---- training from a store is training from the FASTA ------------------- */

static moe_data_cfg cfg_files(const char *const *files, int n)
{
    moe_data_cfg dc = {.n_files = n, .files = files, .val_fraction = 0.1, .shuffle = 1,
                       .reverse_complement = 0.5, .mask_degenerate_bases = 1};
    return dc;
}

static void compare_streams(moe_dataset *a, moe_dataset *b, int B, int steps)
{
    int T = a->seq_length;
    size_t n = (size_t)B * (size_t)T;
    int32_t *ia = malloc(n * 4), *ta = malloc(n * 4), *ib = malloc(n * 4), *tb = malloc(n * 4);
    moe_err e;
    int same = 1;
    for (int s = 0; s < steps; s++) {
        CHECK(dataset_next_train(a, B, ia, ta, &e) == 0 && dataset_next_train(b, B, ib, tb, &e) == 0);
        same &= !memcmp(ia, ib, n * 4) && !memcmp(ta, tb, n * 4);
    }
    for (int i = 0; i < dataset_val_batches(a, B); i++) {
        CHECK(dataset_val_batch(a, i, B, ia, ta, &e) == 0 && dataset_val_batch(b, i, B, ib, tb, &e) == 0);
        same &= !memcmp(ia, ib, n * 4) && !memcmp(ta, tb, n * 4);
    }
    CHECK(same);
    CHECK(dataset_cursor(a).epoch == dataset_cursor(b).epoch &&
          dataset_cursor(a).position == dataset_cursor(b).position);
    free(ia), free(ta), free(ib), free(tb);
}

static void test_store_equals_files(void)
{
    const char *files[] = {MOE_DATA_DIR_DEFAULT "/lambda_virus.fa.gz",
                           MOE_TEST_DATA_DIR "/mixed.fa.gz"};
    store_prepare_result res;
    moe_err e = {{0}};
    CHECK_MSG(prepare(tmp_path("seq"), files, 2, NULL, &res, &e) == 0, "%s", e.msg);
    moe_data_cfg fc = cfg_files(files, 2), sc = fc;
    snprintf(sc.store, sizeof sc.store, "%s", tmp_path("seq"));
    /* padded (dp 0, 1), then packed (dp 2, 3: ranks 0, 1 of 2) */
    for (int run = 0; run < 4; run++) {
        int dp = run % 2;
        moe_pack_mode pack = run < 2 ? MOE_PACK_PADDED : MOE_PACK_PACKED;
        fc.pack = sc.pack = pack;
        moe_dataset *a = NULL, *b = NULL;
        CHECK_MSG(dataset_open(&a, &fc, 64, 7, dp, 2, NULL, &e) == 0, "%s", e.msg);
        CHECK_MSG(dataset_open(&b, &sc, 64, 7, dp, 2, NULL, &e) == 0, "%s", e.msg);
        if (!a || !b)
            return;
        moe_data_stats x, y;
        dataset_stats(a, &x);
        dataset_stats(b, &y);
        CHECK(memcmp(&x, &y, sizeof x) == 0);
        /* a packed store samples 64 held-out windows for it, the FASTA all of them */
        if (run < 2)
            CHECK(dataset_val_unigram_entropy(a) == dataset_val_unigram_entropy(b));
        else
            CHECK(fabs(dataset_val_unigram_entropy(a) - dataset_val_unigram_entropy(b)) < 0.05);
        compare_streams(a, b, 4, 100); /* past one epoch: 760 windows / 8 per step */
        dataset_close(a);
        dataset_close(b);
    }
}

/* ---- orders and blends -------------------------------------------------- */

static void test_feistel_order(void)
{
    data_order o = {.n = ORDER_TABLE_MAX + 12345};
    uint8_t *seen = calloc((size_t)o.n / 8 + 1, 1);
    moe_err e;
    int ok = 1, moved = 0;
    for (uint64_t i = 0; i < o.n; i++) {
        uint64_t x = order_at(&o, 42, 3, i, &e);
        ok &= x < o.n && !(seen[x / 8] & (1u << (x % 8)));
        if (x < o.n)
            seen[x / 8] |= (uint8_t)(1u << (x % 8));
        moved += i < 1000 && x != i;
    }
    CHECK(ok);           /* a permutation */
    CHECK(moved > 990);  /* that shuffles */
    CHECK(o.table == NULL);
    uint64_t first = order_at(&o, 42, 3, 0, &e);
    CHECK(order_at(&o, 42, 4, 0, &e) != first || order_at(&o, 42, 4, 1, &e) != order_at(&o, 42, 3, 1, &e));
    free(seen);
}

/* Stores of A and of C blended wa : wc over one period: count_a of 4096
 * draws from the A store. */
static void blend_run(moe_pack_mode pack, double wa, double wc, int want_a)
{
    const char *fa[] = {write_text("ba.fa", ">a\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n")};
    const char *fc[] = {write_text("bc.fa", ">c\nCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC\n")};
    store_prepare_result res;
    moe_err e = {{0}};
    CHECK(prepare(tmp_path("sba"), fa, 1, NULL, &res, &e) == 0);
    CHECK(prepare(tmp_path("sbc"), fc, 1, NULL, &res, &e) == 0);
    moe_blend_entry bl[2] = {{tmp_path("sba"), wa}, {tmp_path("sbc"), wc}};
    moe_data_cfg dc = {.n_blend = 2, .blend = bl, .shuffle = 1};
    dc.pack = pack;
    moe_dataset *ds = NULL, *again = NULL;
    CHECK_MSG(dataset_open(&ds, &dc, 4, 1, 0, 1, NULL, &e) == 0, "%s", e.msg);
    CHECK_MSG(dataset_open(&again, &dc, 4, 1, 0, 1, NULL, &e) == 0, "%s", e.msg);
    if (!ds || !again)
        return;
    int32_t in[8 * 4], tg[8 * 4], in2[8 * 4], tg2[8 * 4];
    int count_a = 0;
    for (int s = 0; s < 512; s++) { /* 4096 draws: one period */
        CHECK(dataset_next_train(ds, 8, in, tg, &e) == 0);
        for (int b = 0; b < 8; b++) {
            int is_a = 0;
            for (int t = 0; t < 4; t++)
                is_a |= in[b * 4 + t] == 'A';
            count_a += is_a;
        }
    }
    CHECK_MSG(count_a == want_a, "%d of 4096 draws from the A store (weights %g : %g), expected %d",
              count_a, wa, wc, want_a);
    /* resume: a cursor taken now continues identically in another dataset */
    CHECK(dataset_seek(again, dataset_cursor(ds), &e) == 0);
    CHECK(dataset_next_train(ds, 8, in, tg, &e) == 0 && dataset_next_train(again, 8, in2, tg2, &e) == 0);
    CHECK(!memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg));
    dataset_close(ds);
    dataset_close(again);
    moe_data_cfg both = dc;
    snprintf(both.store, sizeof both.store, "x");
    CHECK(dataset_open(&ds, &both, 4, 1, 0, 1, NULL, &e) == -1);
    CHECK_MSG_HAS(e, "both set");
}

/* a blend draws its weights' shares and resumes exactly, padded or packed */
static void test_blend(void)
{
    blend_run(MOE_PACK_PADDED, 3.0, 1.0, 3072);
    blend_run(MOE_PACK_PACKED, 3.0, 1.0, 3072);
    /* weights whose sum overflows a double keep their shares (their sum was
     * once inf: every draw went to the first store) */
    blend_run(MOE_PACK_PADDED, 1.5e308, 0.5e308, 3072);
    blend_run(MOE_PACK_PADDED, 1e308, 1e308, 2048);
    moe_dataset *ds = NULL;
    moe_err e = {{0}};
    /* a weight that did not come through the config's checks is refused by name */
    moe_blend_entry zero[2] = {{tmp_path("sba"), 1.0}, {tmp_path("sbc"), 0.0}};
    moe_data_cfg dz = {.n_blend = 2, .blend = zero};
    dz.pack = MOE_PACK_PADDED;
    CHECK(dataset_open(&ds, &dz, 4, 1, 0, 1, NULL, &e) == -1);
    CHECK_MSG_HAS(e, "data.blend[1].weight");
    zero[1].weight = NAN;
    CHECK(dataset_open(&ds, &dz, 4, 1, 0, 1, NULL, &e) == -1);
    CHECK_MSG_HAS(e, "data.blend[1].weight");
    zero[1].weight = INFINITY;
    CHECK(dataset_open(&ds, &dz, 4, 1, 0, 1, NULL, &e) == -1);
    CHECK_MSG_HAS(e, "data.blend[1].weight = inf: must be finite");
    moe_blend_entry bl[1] = {{tmp_path("sba"), 1.0}};
    moe_data_cfg dc = {.n_blend = 1, .blend = bl};
    dc.pack = MOE_PACK_AUTO;
    CHECK(dataset_open(&ds, &dc, 4, 1, 0, 1, NULL, &e) == 0 && ds && dataset_packed(ds));
    dataset_close(ds);
}

/* A child maps a two-page file, guarded or not, truncates it and reads the
 * second page; returns its wait status, its stderr in err. */
static int touch_truncated(int guarded, char *err, size_t n)
{
    const char *path = tmp_path(guarded ? "guarded.bin" : "unguarded.bin");
    const char *log = tmp_path("guard.err");
    long page = sysconf(_SC_PAGESIZE);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(log, "w", stderr))
            _exit(3);
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || ftruncate(fd, 2 * page) != 0)
            _exit(3);
        volatile const char *m = mmap(NULL, (size_t)(2 * page), PROT_READ, MAP_SHARED, fd, 0);
        /* unguarded: the handler is there all the same, for another mapping */
        void *other = mmap(NULL, (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        moe_err e;
        if (m == MAP_FAILED || other == MAP_FAILED ||
            map_guard_add(guarded ? (const void *)m : other, (size_t)(guarded ? 2 * page : page),
                          path, "the test truncated it", &e))
            _exit(3);
        if (ftruncate(fd, 0) != 0)
            _exit(3);
        char c = m[page]; /* past the end now: SIGBUS */
        _exit(c == 0 ? 0 : 4);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    err[0] = 0;
    FILE *f = fopen(log, "r");
    if (f) {
        size_t got = fread(err, 1, n - 1, f);
        err[got] = 0;
        fclose(f);
    }
    return status;
}

/* Only a guarded mapping's SIGBUS becomes the named error; any other keeps
 * the disposition it had (the default, or a sanitizer's report). */
static void test_map_guard_scoped(void)
{
    char err[2048];
    int st = touch_truncated(1, err, sizeof err);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %#x", st);
    CHECK_MSG(strstr(err, "guarded.bin shrank while this process was reading it (truncated or "
                          "rewritten in place): the test truncated it") != NULL, "%s", err);
    st = touch_truncated(0, err, sizeof err);
    CHECK_MSG(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "status %#x", st);
    CHECK_MSG(strstr(err, "shrank") == NULL, "%s", err);
}

int main(void)
{
    if (!mkdtemp(tmp_dir))
        return perror("mkdtemp"), 1;
    RUN(test_prepare_and_read);
    RUN(test_open_is_flat);
    RUN(test_many_files_in_order);
    RUN(test_spill_and_park);
    RUN(test_up_to_date_and_replace);
    RUN(test_tmp_dirs_of_others);
    RUN(test_limits);
    RUN(test_bad_inputs);
    RUN(test_inputs_links);
    RUN(test_damaged_index);
    RUN(test_store_equals_files);
    RUN(test_feistel_order);
    RUN(test_blend);
    RUN(test_map_guard_scoped);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_dir);
    return check_summary("test_store");
}

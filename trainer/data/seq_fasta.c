/* The "fasta" sequence source: data.files read into memory (small inputs:
 * directories, globs and @lists expanded, no cap on the count of files,
 * FILES_MAX_TOKENS in all). Every record's tokens (BOS, bases, EOS) lie back
 * to back at p->tokens, and a table of records says where each starts. */
#include "data_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inputs.h"
#include "store.h"

/* A record read from data.files: where its tokens are in the part's. */
typedef struct {
    uint64_t offset, length;
} data_record;

typedef struct {
    uint8_t *tokens;       /* p->tokens */
    data_record *records;  /* n_records of them */
    uint64_t tokens_cap, records_cap;
} fasta_state;

static int reserve(void **p, uint64_t *cap, uint64_t need, size_t elem, const char *path,
                   moe_err *e)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : (elem == 1 ? (1u << 20) : 64);
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return moe_errf(e, "%s: out of memory holding %" PRIu64 " %s", path, need,
                        elem == 1 ? "tokens" : "records");
    *p = q;
    *cap = c;
    return 0;
}

/* data.files are copied into every rank's memory: past this many tokens a
 * store (moe-data prepare: mapped, shared by the ranks of a node, no copy)
 * is the way, and a gzip bomb stops here instead of at the OOM killer. */
#define FILES_MAX_TOKENS (1ull << 30)

typedef struct {
    data_part *p;
    fasta_state *st;
    const char *path;
    const store_prepare_opts *limits; /* prepare's gzip inflate check, the same numbers */
    int rec_open;
    uint64_t rec_start;
} files_reader;

static int too_large(const files_reader *r, moe_err *e)
{
    return moe_errf(e, "%s: data.files would hold more than %llu Mi tokens in memory on every rank: "
                    "prepare a token store (moe-data prepare --out STORE INPUT...) and set "
                    "data.store = \"STORE\"", r->path, FILES_MAX_TOKENS >> 20);
}

/* fasta_stream callbacks: each record's tokens (BOS, bases, EOS) appended
 * as its bases arrive, so a record is never held twice. */
static int on_bases(const moe_fasta_record *rec, const uint8_t *seq, size_t n, void *ctx, moe_err *e)
{
    files_reader *r = ctx;
    data_part *p = r->p;
    fasta_state *st = r->st;
    uint64_t start = p->n_tokens, need = start + n + 2; /* room for a BOS and the EOS */
    if (need > FILES_MAX_TOKENS)
        return too_large(r, e);
    if (reserve((void **)&st->tokens, &st->tokens_cap, need, 1, rec->path, e) < 0)
        return -1;
    if (!r->rec_open) {
        r->rec_open = 1;
        r->rec_start = start;
        st->tokens[p->n_tokens++] = MOE_TOK_BOS;
    }
    tok_encode(seq, st->tokens + p->n_tokens, n);
    p->n_tokens += n;
    p->n_bases += n;
    return 0;
}

static int on_record_end(const moe_fasta_record *rec, void *ctx, moe_err *e)
{
    files_reader *r = ctx;
    data_part *p = r->p;
    fasta_state *st = r->st;
    if (reserve((void **)&st->records, &st->records_cap, p->n_records + 1, sizeof(data_record),
                rec->path, e) < 0)
        return -1;
    st->tokens[p->n_tokens++] = MOE_TOK_EOS; /* on_bases left room for it */
    st->records[p->n_records++] =
        (data_record){.offset = r->rec_start, .length = p->n_tokens - r->rec_start};
    r->rec_open = 0;
    return 0;
}

static int on_progress(uint64_t file_bytes, uint64_t text_bytes, void *ctx, moe_err *e)
{
    const files_reader *r = ctx;
    double ratio = r->limits->max_inflate_ratio;
    if (ratio > 0 && text_bytes > r->limits->inflate_check_after &&
        text_bytes > ratio * (double)file_bytes)
        return moe_errf(e, "%s: %llu MB of text from %llu MB of gzip, more than %gx: a "
                        "decompression bomb? stopped (moe-data prepare --max-inflate-ratio "
                        "takes such files into a store, if they are real)", r->path,
                        (unsigned long long)(text_bytes >> 20),
                        (unsigned long long)(file_bytes >> 20), ratio);
    return 0;
}

static const moe_fasta_stream FILES_STREAM = {on_bases, on_record_end, on_progress};

static int files_open(data_part *p, const seq_source_spec *spec, moe_err *e)
{
    const moe_data_cfg *dc = spec->dc;
    const char *data_dir = spec->data_dir;
    moe_path_list list = {0};
    int rc = -1;
    fasta_state *st = calloc(1, sizeof *st);
    if (!st)
        return moe_errf(e, "out of memory for the dataset");
    p->src_state = st;
    for (int f = 0; f < dc->n_files; f++) {
        if (!dc->files[f][0]) {
            moe_errf(e, "data.files[%d] is an empty string", f);
            goto out;
        }
        if (inputs_expand(&list, dc->files[f], data_dir, e) < 0) {
            moe_err_prefix(e, "data.files[%d] '%s'", f, dc->files[f]);
            goto out;
        }
    }
    store_prepare_opts limits;
    store_prepare_defaults(&limits);
    for (size_t i = 0; i < list.n; i++) {
        files_reader r = {.p = p, .st = st, .path = list.paths[i], .limits = &limits};
        if (fasta_stream(list.paths[i], &FILES_STREAM, &r, e) < 0) {
            if (list.n == (size_t)dc->n_files) /* one file per entry: name the entry */
                moe_err_prefix(e, "data.files[%zu]", i);
            else
                moe_err_prefix(e, "data.files");
            goto out;
        }
    }
    p->n_files = list.n;
    p->tokens = st->tokens;
    rc = 0;
out:
    path_list_free(&list);
    return rc;
}

static int files_record(data_part *p, uint64_t r, uint64_t *offset, uint64_t *length, moe_err *e)
{
    (void)e; /* records in memory cannot be damaged */
    const fasta_state *st = p->src_state;
    *offset = st->records[r].offset;
    *length = st->records[r].length;
    return 0;
}

static size_t files_read(const data_part *p, uint64_t offset, size_t n, uint8_t *out, moe_err *e)
{
    (void)e;
    memcpy(out, p->tokens + offset, n);
    return n;
}

/* The tokens themselves: 8 at a time, then the rest one by one. data.files
 * is never a blend entry: no weight. */
static uint64_t files_fingerprint(const data_part *p, uint64_t h, int n_parts)
{
    (void)n_parts;
    uint64_t i = 0, word;
    for (; i + 8 <= p->n_tokens; i += 8) {
        memcpy(&word, p->tokens + i, 8);
        h = rng_mix64(h ^ word) + i;
    }
    for (; i < p->n_tokens; i++)
        h = rng_mix64(h ^ p->tokens[i]);
    return h;
}

static void files_release_index(data_part *p)
{
    (void)p; /* the records are this process's own memory */
}

static void files_close(data_part *p)
{
    fasta_state *st = p->src_state;
    if (st) {
        free(st->tokens);
        free(st->records);
        free(st);
    }
    p->src_state = NULL;
    p->tokens = NULL;
}

const seq_source_ops seq_fasta_ops = {
    .name = "fasta",
    .reads_on_demand = 0,
    .packs_by_default = 0,
    .open = files_open,
    .record = files_record,
    .read = files_read,
    .fingerprint = files_fingerprint,
    .release_index = files_release_index,
    .close = files_close,
};

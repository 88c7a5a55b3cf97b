/* Where a dataset's tokens come from: data.files read into memory (small
 * inputs: directories, globs and @lists expanded, no cap on the count of
 * files, FILES_MAX_TOKENS in all), or
 * token stores mapped read-only (data.store, data.blend): nothing of a
 * store is copied, so start-up and memory do not grow with the corpus. */
#include "data_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inputs.h"
#include "store.h"

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
    uint64_t start = p->n_tokens, need = start + n + 2; /* room for a BOS and the EOS */
    if (need > FILES_MAX_TOKENS)
        return too_large(r, e);
    if (reserve((void **)&p->own_tokens, &p->tokens_cap, need, 1, rec->path, e) < 0)
        return -1;
    if (!r->rec_open) {
        r->rec_open = 1;
        r->rec_start = start;
        p->own_tokens[p->n_tokens++] = MOE_TOK_BOS;
    }
    tok_encode(seq, p->own_tokens + p->n_tokens, n);
    p->n_tokens += n;
    p->n_bases += n;
    return 0;
}

static int on_record_end(const moe_fasta_record *rec, void *ctx, moe_err *e)
{
    files_reader *r = ctx;
    data_part *p = r->p;
    if (reserve((void **)&p->own_records, &p->records_cap, p->n_records + 1, sizeof(data_record),
                rec->path, e) < 0)
        return -1;
    p->own_tokens[p->n_tokens++] = MOE_TOK_EOS; /* on_bases left room for it */
    p->own_records[p->n_records++] =
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

static int open_files(data_part *p, const moe_data_cfg *dc, const char *data_dir, moe_err *e)
{
    moe_path_list list = {0};
    int rc = -1;
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
        files_reader r = {.p = p, .path = list.paths[i], .limits = &limits};
        if (fasta_stream(list.paths[i], &FILES_STREAM, &r, e) < 0) {
            if (list.n == (size_t)dc->n_files) /* one file per entry: name the entry */
                moe_err_prefix(e, "data.files[%zu]", i);
            else
                moe_err_prefix(e, "data.files");
            goto out;
        }
    }
    p->n_files = list.n;
    p->tokens = p->own_tokens;
    rc = 0;
out:
    path_list_free(&list);
    return rc;
}

static int open_store(data_part *p, const char *path, const char *what, moe_err *e)
{
    if (store_open(&p->store, path, e) < 0)
        return moe_err_prefix(e, "%s", what);
    p->mapped = 1;
    p->tokens = p->store.tokens;
    p->n_tokens = p->store.hdr->n_tokens;
    p->n_records = p->store.hdr->n_records;
    p->n_bases = p->store.hdr->n_bases;
    p->n_files = p->store.hdr->n_files;
    return 0;
}

int parts_open(moe_dataset *ds, const moe_data_cfg *dc, const char *data_dir, moe_err *e)
{
    int n = dc->n_blend ? dc->n_blend : 1;
    ds->parts = calloc((size_t)n, sizeof *ds->parts);
    if (!ds->parts)
        return moe_errf(e, "out of memory for the dataset");
    ds->n_parts = n;
    for (int i = 0; i < n; i++) {
        data_part *p = &ds->parts[i];
        char what[64];
        p->seq_length = ds->seq_length;
        p->val_fraction = ds->val_fraction;
        p->weight = dc->n_blend ? dc->blend[i].weight : 1.0;
        if (dc->n_blend)
            snprintf(what, sizeof what, "data.blend[%d].store", i);
        else
            snprintf(what, sizeof what, "data.store");
        int rc = dc->n_blend   ? open_store(p, dc->blend[i].store, what, e)
                 : dc->store[0] ? open_store(p, dc->store, what, e)
                                : open_files(p, dc, data_dir, e);
        if (rc == 0)
            layout_plan_holdout(p);
        if (rc < 0 || split_build(&p->train, p, 0, ds->stride, ds->pack, e) < 0 ||
            /* validation windows do not overlap */
            split_build(&p->val, p, 1, ds->seq_length, ds->pack, e) < 0)
            return -1;
        if (p->mapped)
            store_release_index(&p->store);
        p->order.n = p->train.n_windows;
    }
    return 0;
}

void parts_close(moe_dataset *ds)
{
    for (int i = 0; ds->parts && i < ds->n_parts; i++) {
        data_part *p = &ds->parts[i];
        split_free(&p->train);
        split_free(&p->val);
        order_free(&p->order);
        if (p->mapped)
            store_close(&p->store);
        free(p->own_tokens);
        free(p->own_records);
    }
    free(ds->parts);
    ds->parts = NULL;
}

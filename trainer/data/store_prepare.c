/* moe-data prepare: FASTA files -> a token store, in parallel over files.
 *
 * Workers claim files in order and tokenize each through fasta_stream into
 * bounded sinks (store_sink.h). Files are committed to the store strictly in
 * input order, so the same inputs always give the same store: the worker
 * whose file is next writes straight into the store's files, the others
 * buffer (spilling past the buffer) until their turn. Everything is written
 * under <out>.tmp-<pid> and renamed into place at the end (store_dir.c). */
#include "store_prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define SINK_TOKENS (32u << 20)  /* per worker: tokens waiting for their turn */
#define SINK_RECORDS (1u << 20)  /* 32,768 records */
#define SINK_NAMES (1u << 20)
#define ENCODE_PIECE (64u << 10)

void store_prepare_defaults(store_prepare_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_record_bases = 4ull << 30;  /* 4 Gbases: longer than any known chromosome */
    o->max_total_bases = 1ull << 40;   /* 1 Tbase */
    o->max_inflate_ratio = 1000;       /* constant text compresses ~1030x: beyond real FASTA */
    o->inflate_check_after = 256ull << 20; /* smaller files may be runs of N that compress well */
    o->progress = 1;
}

/* ---- the records' offsets become absolute when drained ------------------ */

static void fix_records(uint8_t *data, size_t n, void *ctx)
{
    const prep_worker *w = ctx;
    for (size_t i = 0; i + sizeof(store_record) <= n; i += sizeof(store_record)) {
        store_record r;
        memcpy(&r, data + i, sizeof r);
        r.offset += w->tok_base;
        r.name_offset += w->name_base;
        memcpy(data + i, &r, sizeof r);
    }
}

/* Called by the worker that holds the turn: its output bases are final. */
static void take_turn(prep_worker *w)
{
    prep *p = w->p;
    w->tok_base = p->tok_off;
    w->name_base = p->paths_size + p->names_off;
    w->tokens.direct_fd = p->tok_fd;
    w->tokens.direct_path = p->tok_path;
    w->records.direct_fd = p->rec_fd;
    w->records.direct_path = p->rec_path;
    w->names.direct_fd = p->names_fd;
    w->names.direct_path = p->names_path;
    w->direct = 1;
}

static void maybe_take_turn(prep_worker *w)
{
    if (!w->direct && atomic_load(&w->p->turn) == w->file)
        take_turn(w);
}

static int stopped(prep_worker *w, moe_err *e)
{
    if (atomic_load(&w->p->failed))
        return moe_errf(e, "stopped (another file failed)");
    return 0;
}

static int emit_tokens(prep_worker *w, const uint8_t *tok, size_t n, moe_err *e)
{
    w->crc = store_crc32(w->crc, tok, n);
    w->n_tokens += n;
    return sink_append(&w->tokens, tok, n, e);
}

/* ---- fasta_stream callbacks --------------------------------------------- */

static int on_bases(const moe_fasta_record *rec, const uint8_t *seq, size_t n, void *ctx,
                    moe_err *e)
{
    prep_worker *w = ctx;
    const store_prepare_opts *o = w->p->o;
    if (stopped(w, e) < 0)
        return -1;
    if ((uint64_t)rec->len > o->max_record_bases)
        return moe_errf(e, "%s:%" PRIu64 ": record %" PRIu64 " '%s' is longer than the limit of %"
                        PRIu64 " bases (--max-record-bases)", rec->path, rec->line, rec->index + 1,
                        rec->header, o->max_record_bases);
    uint64_t total = atomic_fetch_add(&w->p->bases_total, n) + n;
    if (total > o->max_total_bases)
        return moe_errf(e, "%s: record '%s': the store would exceed the limit of %" PRIu64 " bases "
                        "in all (--max-total-bases)", rec->path, rec->header, o->max_total_bases);
    maybe_take_turn(w);
    if (!w->rec_open) {
        uint8_t bos = MOE_TOK_BOS;
        w->rec_start = w->n_tokens;
        w->rec_open = 1;
        if (emit_tokens(w, &bos, 1, e) < 0)
            return -1;
    }
    w->n_bases += n;
    for (size_t i = 0; i < n; i += ENCODE_PIECE) {
        size_t k = n - i < ENCODE_PIECE ? n - i : ENCODE_PIECE;
        tok_encode(seq + i, w->scratch, k);
        if (emit_tokens(w, w->scratch, k, e) < 0)
            return -1;
    }
    return 0;
}

static int on_record_end(const moe_fasta_record *rec, void *ctx, moe_err *e)
{
    prep_worker *w = ctx;
    uint8_t eos = MOE_TOK_EOS;
    if (emit_tokens(w, &eos, 1, e) < 0)
        return -1;
    size_t name_len = strlen(rec->header);
    store_record r = {
        .offset = w->rec_start, .length = w->n_tokens - w->rec_start,
        .name_offset = w->names.total, .file = (uint32_t)w->file, .name_len = (uint32_t)name_len,
    };
    w->rec_open = 0;
    w->n_records++;
    if (sink_append(&w->records, &r, sizeof r, e) < 0 ||
        sink_append(&w->names, rec->header, name_len + 1, e) < 0)
        return -1;
    return 0;
}

static int on_progress(uint64_t file_bytes, uint64_t text_bytes, void *ctx, moe_err *e)
{
    prep_worker *w = ctx;
    atomic_store(&w->file_bytes, file_bytes);
    double ratio = w->p->o->max_inflate_ratio;
    if (w->gzip && ratio > 0 && text_bytes > w->p->o->inflate_check_after &&
        text_bytes > ratio * (double)file_bytes)
        return moe_errf(e, "%s: %" PRIu64 " MB of text from %" PRIu64 " MB of gzip, more than %gx: a "
                        "decompression bomb? stopped at the limit (--max-inflate-ratio)",
                        w->p->paths[w->file], text_bytes >> 20, file_bytes >> 20, ratio);
    return 0;
}

static const moe_fasta_stream STREAM = {on_bases, on_record_end, on_progress};

/* ---- one file ----------------------------------------------------------- */

static int wait_turn(prep_worker *w)
{
    prep *p = w->p;
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->turn) != w->file && !atomic_load(&p->failed))
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return atomic_load(&p->failed) ? -1 : 0;
}

static int commit_file(prep_worker *w, moe_err *e)
{
    prep *p = w->p;
    if (!w->direct)
        take_turn(w);
    if (sink_drain(&w->tokens, p->tok_fd, p->tok_path, e) < 0 ||
        sink_drain(&w->records, p->rec_fd, p->rec_path, e) < 0 ||
        sink_drain(&w->names, p->names_fd, p->names_path, e) < 0)
        return -1;
    store_file *f = &p->files[w->file];
    f->first_record = p->n_records;
    f->n_records = w->n_records;
    f->tokens_offset = p->tok_off;
    f->n_tokens = w->n_tokens;
    f->tokens_crc32 = w->crc;
    p->crc_all = (uint32_t)crc32_combine(p->crc_all, w->crc, (z_off_t)w->n_tokens);
    p->tok_off += w->n_tokens;
    p->n_records += w->n_records;
    p->n_bases += w->n_bases;
    p->names_off += w->names.total;
    atomic_fetch_add(&p->bytes_done, f->size);
    atomic_store(&w->file_bytes, 0);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->turn, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static int process_file(prep_worker *w, size_t i, moe_err *e)
{
    const char *path = w->p->paths[i];
    size_t n = strlen(path);
    w->file = i;
    w->gzip = n > 3 && !strcmp(path + n - 3, ".gz");
    w->crc = 0;
    w->n_tokens = w->n_bases = w->n_records = 0;
    w->rec_open = w->direct = 0;
    sink_reset(&w->tokens);
    sink_reset(&w->records);
    sink_reset(&w->names);
    if (fasta_stream(path, &STREAM, w, e) < 0 || wait_turn(w) < 0)
        return -1;
    return commit_file(w, e);
}

static void fail(prep *p, const moe_err *e)
{
    pthread_mutex_lock(&p->mu);
    if (!atomic_load(&p->failed)) {
        p->err = *e;
        atomic_store(&p->failed, 1);
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *arg)
{
    prep_worker *w = arg;
    prep *p = w->p;
    moe_err e = {{0}};
    for (;;) {
        size_t i = atomic_fetch_add(&p->next_claim, 1);
        if (i >= p->n || atomic_load(&p->failed))
            break;
        if (process_file(w, i, &e) < 0) {
            if (!atomic_load(&p->failed) || strncmp(e.msg, "stopped", 7) != 0)
                fail(p, &e);
            break;
        }
    }
    return NULL;
}

static int worker_init(prep_worker *w, prep *p, int id, moe_err *e)
{
    char spill[4300];
    w->p = p;
    w->id = id;
    w->scratch = malloc(ENCODE_PIECE);
    if (!w->scratch)
        return moe_errf(e, "out of memory for a worker");
    snprintf(spill, sizeof spill, "%s/spill-%d.tokens", p->tmp_dir, id);
    if (sink_init(&w->tokens, "tokens", SINK_TOKENS, 1, spill, e) < 0)
        return -1;
    snprintf(spill, sizeof spill, "%s/spill-%d.records", p->tmp_dir, id);
    if (sink_init(&w->records, "records", SINK_RECORDS, sizeof(store_record), spill, e) < 0)
        return -1;
    snprintf(spill, sizeof spill, "%s/spill-%d.names", p->tmp_dir, id);
    if (sink_init(&w->names, "names", SINK_NAMES, 1, spill, e) < 0)
        return -1;
    w->records.fixup = fix_records;
    w->records.fixup_ctx = w;
    return 0;
}

static void worker_free(prep_worker *w)
{
    sink_free(&w->tokens);
    sink_free(&w->records);
    sink_free(&w->names);
    free(w->scratch);
}

/* Start the workers and the progress line, wait for all of them. */
int prep_run_workers(prep *p, int threads, moe_err *e)
{
    prep_worker *w = calloc((size_t)threads, sizeof *w);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    int started = 0, rc = -1;
    if (!w || !tid) {
        moe_errf(e, "out of memory for %d workers", threads);
        goto out;
    }
    p->workers = w;
    p->n_workers = threads;
    for (int i = 0; i < threads; i++)
        if (worker_init(&w[i], p, i, e) < 0)
            goto out;
    if (p->o->progress)
        prep_progress_start(p);
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, worker_main, &w[started]) != 0) {
            moe_errf(&p->err, "cannot start worker thread %d", started);
            atomic_store(&p->failed, 1);
            break;
        }
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    if (p->o->progress)
        prep_progress_stop(p);
    if (atomic_load(&p->failed)) {
        *e = p->err;
        goto out;
    }
    rc = 0;
out:
    for (int i = 0; w && i < threads; i++)
        worker_free(&w[i]);
    p->workers = NULL;
    free(w);
    free(tid);
    return rc;
}

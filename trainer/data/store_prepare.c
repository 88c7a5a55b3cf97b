/* moe-data prepare: FASTA files -> a token store, in parallel over files.
 *
 * Workers claim files in order and tokenize each through fasta_stream into
 * a job's bounded sinks (store_sink.h). Files are committed to the store
 * strictly in input order, so the same inputs always give the same store:
 * the job whose file is next writes straight into the store's files; a job
 * finished early is parked (its tokens in memory, spilled past the buffer)
 * and its worker goes on with another job, 2 per worker; whoever commits the
 * file ahead commits the parked ones that follow. Everything is written
 * under <out>.tmp-<host>-<pid>-<random> and renamed into place at the end
 * (store_dir.c, store_tmp.c). */
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
#define SINK_RECORDS (1u << 20)  /* 65,536 records */
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
    const prep_job *j = ctx;
    for (size_t i = 0; i + sizeof(store_record) <= n; i += sizeof(store_record)) {
        store_record r;
        memcpy(&r, data + i, sizeof r);
        r.offset += j->tok_base;
        r.name_offset += j->name_base;
        memcpy(data + i, &r, sizeof r);
    }
}

/* Called by the holder of the turn: the job's output places are final. */
static void take_turn(prep *p, prep_job *j)
{
    j->tok_base = p->tok_off;
    j->name_base = p->paths_size + p->names_off;
    j->tokens.direct_fd = p->tok_fd;
    j->tokens.direct_path = p->tok_path;
    j->records.direct_fd = p->rec_fd;
    j->records.direct_path = p->rec_path;
    j->names.direct_fd = p->names_fd;
    j->names.direct_path = p->names_path;
    j->direct = 1;
}

static void maybe_take_turn(prep_worker *w)
{
    if (!w->job->direct && atomic_load(&w->p->turn) == w->job->file)
        take_turn(w->p, w->job);
}

static int stopped(prep_worker *w, moe_err *e)
{
    if (atomic_load(&w->p->failed))
        return moe_errf(e, "stopped (another file failed)");
    return 0;
}

static int emit_tokens(prep_job *j, const uint8_t *tok, size_t n, moe_err *e)
{
    j->crc = store_crc32(j->crc, tok, n);
    j->n_tokens += n;
    return sink_append(&j->tokens, tok, n, e);
}

/* ---- fasta_stream callbacks --------------------------------------------- */

static int on_bases(const moe_fasta_record *rec, const uint8_t *seq, size_t n, void *ctx,
                    moe_err *e)
{
    prep_worker *w = ctx;
    prep_job *j = w->job;
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
    if (!j->rec_open) {
        uint8_t bos = MOE_TOK_BOS;
        j->rec_start = j->n_tokens;
        j->rec_open = 1;
        if (emit_tokens(j, &bos, 1, e) < 0)
            return -1;
    }
    j->n_bases += n;
    for (size_t i = 0; i < n; i += ENCODE_PIECE) {
        size_t k = n - i < ENCODE_PIECE ? n - i : ENCODE_PIECE;
        tok_encode(seq + i, w->scratch, k);
        if (emit_tokens(j, w->scratch, k, e) < 0)
            return -1;
    }
    return 0;
}

static int on_record_end(const moe_fasta_record *rec, void *ctx, moe_err *e)
{
    prep_job *j = ((prep_worker *)ctx)->job;
    uint8_t eos = MOE_TOK_EOS;
    if (emit_tokens(j, &eos, 1, e) < 0)
        return -1;
    size_t name_len = strlen(rec->header);
    store_record r = {.offset = j->rec_start, .name_offset = j->names.total};
    j->rec_open = 0;
    j->n_records++;
    if (sink_append(&j->records, &r, sizeof r, e) < 0 ||
        sink_append(&j->names, rec->header, name_len + 1, e) < 0)
        return -1;
    return 0;
}

static int on_progress(uint64_t file_bytes, uint64_t text_bytes, void *ctx, moe_err *e)
{
    prep_worker *w = ctx;
    atomic_store(&w->file_bytes, file_bytes);
    double ratio = w->p->o->max_inflate_ratio;
    if (w->job->gzip && ratio > 0 && text_bytes > w->p->o->inflate_check_after &&
        text_bytes > ratio * (double)file_bytes)
        return moe_errf(e, "%s: %" PRIu64 " MB of text from %" PRIu64 " MB of gzip, more than %gx: a "
                        "decompression bomb? stopped at the limit (--max-inflate-ratio)",
                        w->p->paths[w->job->file], text_bytes >> 20, file_bytes >> 20, ratio);
    return 0;
}

static const moe_fasta_stream STREAM = {on_bases, on_record_end, on_progress};

/* ---- jobs: taking, parking, committing ----------------------------------- */

static prep_job *take_job(prep *p)
{
    prep_job *j = NULL;
    pthread_mutex_lock(&p->mu);
    while (p->n_free == 0 && !atomic_load(&p->failed))
        pthread_cond_wait(&p->cv, &p->mu);
    if (p->n_free > 0)
        j = p->free_jobs[--p->n_free];
    pthread_mutex_unlock(&p->mu);
    return j;
}

/* Write job j (its file holds the turn) into the store. */
static int commit_one(prep *p, prep_job *j, moe_err *e)
{
    if (!j->direct)
        take_turn(p, j);
    if (sink_drain(&j->tokens, p->tok_fd, p->tok_path, e) < 0 ||
        sink_drain(&j->records, p->rec_fd, p->rec_path, e) < 0 ||
        sink_drain(&j->names, p->names_fd, p->names_path, e) < 0)
        return -1;
    store_file *f = &p->files[j->file];
    f->first_record = p->n_records;
    f->n_records = j->n_records;
    f->tokens_offset = p->tok_off;
    f->n_tokens = j->n_tokens;
    f->tokens_crc32 = j->crc;
    p->crc_all = (uint32_t)crc32_combine(p->crc_all, j->crc, (z_off_t)j->n_tokens);
    p->tok_off += j->n_tokens;
    p->n_records += j->n_records;
    p->n_bases += j->n_bases;
    p->names_off += j->names.total;
    return 0;
}

/* Commit j, then every parked job that follows it, freeing each. */
static int commit_chain(prep *p, prep_job *j, moe_err *e)
{
    while (j) {
        if (commit_one(p, j, e) < 0)
            return -1;
        pthread_mutex_lock(&p->mu);
        size_t next = atomic_fetch_add(&p->turn, 1) + 1;
        p->free_jobs[p->n_free++] = j;
        j = next < p->n ? p->parked[next] : NULL;
        if (j)
            p->parked[next] = NULL;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return 0;
}

/* The job's file is read: write it now if its turn has come, else park it. */
static int finish_job(prep *p, prep_job *j, moe_err *e)
{
    pthread_mutex_lock(&p->mu);
    int mine = atomic_load(&p->turn) == j->file;
    if (!mine)
        p->parked[j->file] = j;
    pthread_mutex_unlock(&p->mu);
    return mine ? commit_chain(p, j, e) : 0;
}

static void job_reset(prep_job *j, const char *path, size_t file)
{
    size_t n = strlen(path);
    j->file = file;
    j->gzip = n > 3 && !strcmp(path + n - 3, ".gz");
    j->crc = 0;
    j->n_tokens = j->n_bases = j->n_records = 0;
    j->rec_open = j->direct = 0;
    sink_reset(&j->tokens);
    sink_reset(&j->records);
    sink_reset(&j->names);
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
        /* a job first, then a file: a claimed file always has a job, so the
         * file holding the turn is always being read and the chain moves */
        if (!(w->job = take_job(p)))
            break;
        size_t i = atomic_fetch_add(&p->next_claim, 1);
        if (i >= p->n || atomic_load(&p->failed)) {
            pthread_mutex_lock(&p->mu);
            p->free_jobs[p->n_free++] = w->job;
            pthread_mutex_unlock(&p->mu);
            break;
        }
        job_reset(w->job, p->paths[i], i);
        int rc = fasta_stream(p->paths[i], &STREAM, w, &e);
        atomic_fetch_add(&p->bytes_done, p->files[i].size);
        atomic_store(&w->file_bytes, 0);
        if (rc < 0 || finish_job(p, w->job, &e) < 0) {
            fail(p, &e); /* the first failure is the one reported */
            break;
        }
    }
    return NULL;
}

static int job_init(prep_job *j, prep *p, int id, moe_err *e)
{
    char spill[4300];
    j->id = id;
    snprintf(spill, sizeof spill, "%s/spill-%d.tokens", p->tmp_dir, id);
    if (sink_init(&j->tokens, "tokens", SINK_TOKENS, 1, spill, e) < 0)
        return -1;
    snprintf(spill, sizeof spill, "%s/spill-%d.records", p->tmp_dir, id);
    if (sink_init(&j->records, "records", SINK_RECORDS, sizeof(store_record), spill, e) < 0)
        return -1;
    snprintf(spill, sizeof spill, "%s/spill-%d.names", p->tmp_dir, id);
    if (sink_init(&j->names, "names", SINK_NAMES, 1, spill, e) < 0)
        return -1;
    j->records.fixup = fix_records;
    j->records.fixup_ctx = j;
    return 0;
}

static void job_free(prep_job *j)
{
    sink_free(&j->tokens);
    sink_free(&j->records);
    sink_free(&j->names);
}

static int setup(prep *p, int threads, moe_err *e)
{
    p->n_workers = threads;
    p->n_jobs = 2 * threads;
    p->workers = calloc((size_t)threads, sizeof *p->workers);
    p->jobs = calloc((size_t)p->n_jobs, sizeof *p->jobs);
    p->free_jobs = calloc((size_t)p->n_jobs, sizeof *p->free_jobs);
    p->parked = calloc(p->n, sizeof *p->parked);
    if (!p->workers || !p->jobs || !p->free_jobs || !p->parked)
        return moe_errf(e, "out of memory for %d workers", threads);
    for (int i = 0; i < threads; i++) {
        p->workers[i].p = p;
        if (!(p->workers[i].scratch = malloc(ENCODE_PIECE)))
            return moe_errf(e, "out of memory for a worker");
    }
    for (int i = 0; i < p->n_jobs; i++) {
        if (job_init(&p->jobs[i], p, i, e) < 0)
            return -1;
        p->free_jobs[p->n_free++] = &p->jobs[i];
    }
    return 0;
}

static void teardown(prep *p)
{
    for (int i = 0; p->workers && i < p->n_workers; i++)
        free(p->workers[i].scratch);
    for (int i = 0; p->jobs && i < p->n_jobs; i++)
        job_free(&p->jobs[i]);
    free(p->workers);
    free(p->jobs);
    free(p->free_jobs);
    free(p->parked);
    p->workers = NULL;
    p->jobs = NULL;
    p->free_jobs = NULL;
    p->parked = NULL;
    p->n_workers = 0;
}

/* Start the workers and the progress line, wait for all of them. */
int prep_run_workers(prep *p, int threads, moe_err *e)
{
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    int started = 0, rc = -1;
    if (!tid) {
        moe_errf(e, "out of memory for %d workers", threads);
        goto out;
    }
    if (setup(p, threads, e) < 0)
        goto out;
    if (p->o->progress)
        prep_progress_start(p);
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, worker_main, &p->workers[started]) != 0) {
            moe_err why;
            moe_errf(&why, "cannot start worker thread %d", started);
            fail(p, &why);
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
    if (p->o->progress)
        prep_progress_stop(p);
    teardown(p);
    free(tid);
    return rc;
}

/* moe-data prepare internals: shared by the workers (store_prepare.c), the
 * progress line (store_progress.c) and the store directory handling
 * (store_dir.c). */
#ifndef MOE_STORE_PREPARE_H
#define MOE_STORE_PREPARE_H

#include <pthread.h>
#include <stdatomic.h>

#include "data.h"
#include "store.h"
#include "store_sink.h"

typedef struct prep prep;

/* One file on its way into the store: its tokens, records and names, kept
 * until the file's turn comes. A worker parks a finished job when the files
 * ahead of it are not written yet and goes on with a fresh one; whoever
 * writes the file ahead writes the parked ones that follow. */
typedef struct {
    int id;
    store_sink tokens, records, names;
    size_t file;               /* the file it holds */
    int gzip, direct, rec_open;
    uint32_t crc;              /* of this file's tokens so far */
    uint64_t n_tokens, n_bases, n_records, rec_start;
    uint64_t tok_base, name_base; /* where this file lands (set when its turn comes) */
} prep_job;

typedef struct {
    prep *p;
    prep_job *job;             /* the job being filled */
    uint8_t *scratch;          /* tokens of one piece of bases */
    _Atomic uint64_t file_bytes; /* read from the current file so far, for the progress line */
} prep_worker;

struct prep {
    const char *const *paths;
    size_t n;
    const store_prepare_opts *o;
    char tmp_dir[4200], tok_path[4300], rec_path[4300], names_path[4300];
    int tok_fd, rec_fd, names_fd;
    int lock_fd;               /* the temporary directory's owner lock (store_tmp.h) */
    store_file *files;         /* n entries: size and mtime up front, the rest at commit */
    uint64_t paths_size;       /* the names table starts with the file paths */
    uint64_t input_bytes;      /* sum of file sizes */
    /* owned by the worker that holds the turn */
    uint64_t tok_off, n_records, n_bases, names_off;
    uint32_t crc_all;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic size_t next_claim, turn;
    _Atomic int failed;
    _Atomic uint64_t bases_total, bytes_done;
    moe_err err;               /* the first failure */
    prep_worker *workers;
    int n_workers;
    prep_job *jobs;            /* 2 per worker */
    prep_job **free_jobs;      /* a stack of the idle ones */
    int n_jobs, n_free;
    prep_job **parked;         /* n entries: the finished job of file i waiting for its turn */
    /* the progress line */
    pthread_t progress_tid;
    _Atomic int progress_stop;
    double t_start;
};

int prep_run_workers(prep *p, int threads, moe_err *e);
void prep_progress_start(prep *p);
void prep_progress_stop(prep *p);
double prep_now(void);

#endif

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

typedef struct {
    prep *p;
    int id;
    store_sink tokens, records, names;
    uint8_t *scratch;          /* tokens of one piece of bases */
    size_t file;               /* the file being read */
    int gzip, direct, rec_open;
    uint32_t crc;              /* of this file's tokens so far */
    uint64_t n_tokens, n_bases, n_records, rec_start;
    uint64_t tok_base, name_base; /* where this file lands (set when its turn comes) */
    _Atomic uint64_t file_bytes; /* read from the file so far, for the progress line */
} prep_worker;

struct prep {
    const char *const *paths;
    size_t n;
    const store_prepare_opts *o;
    char tmp_dir[4200], tok_path[4300], rec_path[4300], names_path[4300];
    int tok_fd, rec_fd, names_fd;
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

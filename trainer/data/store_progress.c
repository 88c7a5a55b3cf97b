/* The progress line of moe-data prepare: input bytes read, rate, ETA.
 * On a terminal one line rewritten in place twice a second; otherwise (a
 * job's log) one line every 10 seconds. */
#include "store_prepare.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double prep_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t bytes_read(prep *p)
{
    uint64_t done = atomic_load(&p->bytes_done);
    for (int i = 0; i < p->n_workers; i++)
        done += atomic_load(&p->workers[i].file_bytes);
    return done < p->input_bytes ? done : p->input_bytes;
}

static void print_line(prep *p, int tty, const char *end)
{
    double dt = prep_now() - p->t_start;
    uint64_t done = bytes_read(p), total = p->input_bytes;
    double rate = dt > 0 ? (double)done / dt : 0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0;
    fprintf(stderr, "%smoe-data: %.2f of %.2f GB read (%.0f%%), %.1f MB/s, %.2f Gbases, ETA %.0f s%s",
            tty ? "\r" : "", (double)done / 1e9, (double)total / 1e9,
            total ? 100.0 * (double)done / (double)total : 100.0, rate / 1e6,
            (double)atomic_load(&p->bases_total) / 1e9, eta, end);
    fflush(stderr);
}

static void *progress_main(void *arg)
{
    prep *p = arg;
    int tty = isatty(2);
    int period_ticks = tty ? 5 : 100, tick = 0; /* ticks of 0.1 s */
    while (!atomic_load(&p->progress_stop)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (++tick % period_ticks == 0)
            print_line(p, tty, tty ? "\033[K" : "\n");
    }
    if (tty)
        print_line(p, tty, "\033[K\n");
    return NULL;
}

void prep_progress_start(prep *p)
{
    atomic_store(&p->progress_stop, 0);
    if (pthread_create(&p->progress_tid, NULL, progress_main, p) != 0)
        p->progress_tid = 0; /* no progress line; the work goes on */
}

void prep_progress_stop(prep *p)
{
    if (!p->progress_tid)
        return;
    atomic_store(&p->progress_stop, 1);
    pthread_join(p->progress_tid, NULL);
    p->progress_tid = 0;
}

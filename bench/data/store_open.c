/* What opening a token store costs: wall time and resident memory of
 * store_open (and, with --dataset T, of the dataset laid out on it for
 * train.seq_length T, which walks every record entry once).
 *   build/tests/bench_store_open STORE [--dataset T]
 * Prints one line: records, open seconds, RSS growth in KiB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../trainer/data/data.h"
#include "../../trainer/data/store.h"

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

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 2 && !(argc == 4 && !strcmp(argv[2], "--dataset"))) {
        fprintf(stderr, "usage: bench_store_open STORE [--dataset SEQ_LENGTH]\n");
        return 2;
    }
    moe_err e = {{0}};
    moe_store s;
    long r0 = rss_kib();
    double t0 = now();
    if (store_open(&s, argv[1], &e) < 0) {
        fprintf(stderr, "bench_store_open: %s\n", e.msg);
        return 1;
    }
    double t_open = now() - t0;
    long r_open = rss_kib() - r0;
    printf("%s: %llu records, store_open %.6f s, RSS +%ld KiB", argv[1],
           (unsigned long long)s.hdr->n_records, t_open, r_open);
    store_close(&s);
    if (argc == 4) {
        moe_data_cfg dc = {.store = "", .val_fraction = 0.01, .shuffle = 1, .pack = MOE_PACK_PACKED};
        snprintf(dc.store, sizeof dc.store, "%s", argv[1]);
        moe_dataset *ds;
        r0 = rss_kib();
        t0 = now();
        if (dataset_open(&ds, &dc, atoi(argv[3]), 1, 0, 1, NULL, &e) < 0) {
            fprintf(stderr, "\nbench_store_open: %s\n", e.msg);
            return 1;
        }
        printf(", dataset_open %.3f s, RSS +%ld KiB", now() - t0, rss_kib() - r0);
        dataset_close(ds);
    }
    printf("\n");
    return 0;
}

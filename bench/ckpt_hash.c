/* Checkpoint hashing and writing throughput on this machine:
 *   bench_ckpt_hash [MiB] [DIR]
 * SHA-256 of a buffer (libcrypto), the checkpoint writer's two digests
 * (whole file + 4 MiB blocks) without I/O, and hashed_file writing the
 * buffer to DIR (page cache, then fsync), in MB per CPU second, and the
 * write with its fsync in MB per wall-clock second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../trainer/ckpt/hashed_file.h"

/* CPU seconds of this process: on a shared machine the wall clock also
 * counts other jobs' time slices (the write's fsync wait is counted apart) */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 1024;
    const char *dir = argc > 2 ? argv[2] : "/tmp";
    size_t n = mib << 20, chunk = (size_t)64 << 20;
    unsigned char *buf = malloc(n);
    if (!buf || mib == 0)
        return 2;
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 2654435761u >> 13);
    moe_err e = {{0}};
    uint8_t d[SHA256_DIGEST_LEN];
    double t0 = now_s();
    if (sha256(buf, n, d, &e))
        return 1;
    double t_whole = now_s() - t0;
    char path[4200];
    snprintf(path, sizeof path, "%s/bench_ckpt_hash.%d", dir, (int)getpid());
    double t_write[2], w_write = 0;
    for (int pass = 0; pass < 2; pass++) { /* 0: hashes into /dev/null, 1: into a file */
        hashed_file f;
        if (hashed_file_create(&f, pass ? path : "/dev/null", (uint64_t)4 << 20, &e))
            return fprintf(stderr, "%s\n", e.msg), 1;
        t0 = now_s();
        double w0 = wall_s();
        for (size_t at = 0; at < n; at += chunk)
            if (hashed_file_write(&f, buf + at, n - at < chunk ? n - at : chunk, &e))
                return fprintf(stderr, "%s\n", e.msg), 1;
        if (hashed_file_finish(&f, &e))
            return fprintf(stderr, "%s\n", e.msg), 1;
        t_write[pass] = now_s() - t0;
        w_write = wall_s() - w0;
        hashed_file_free(&f);
    }
    unlink(path);
    double mb = (double)n / 1e6;
    printf("{\"MB\": %.0f, \"sha256_MBps_cpu\": %.0f, \"file_and_block_digests_MBps_cpu\": %.0f, "
           "\"hashed_write_MBps_cpu\": %.0f, \"hashed_write_fsync_MBps_wall\": %.0f}\n", mb,
           mb / t_whole, mb / t_write[0], mb / t_write[1], mb / w_write);
    free(buf);
    return 0;
}

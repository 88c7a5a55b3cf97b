/* moekit GPU tests: the small harness the standalone GPU test programs
 * share. Each case reports one "ok ..." / "not ok ..." line through result();
 * the program ends with `return summary();`, whose last line is
 * "<GPU_CHECK_NAME>: N passed, N failed". A failed CUDA runtime call ends the
 * run at once (the device state is unknown after it). Define GPU_CHECK_NAME
 * before including. */
#ifndef MOE_GPU_CHECK_H
#define MOE_GPU_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#ifndef GPU_CHECK_NAME
#error "define GPU_CHECK_NAME before including gpu_check.h"
#endif

static int passed, failed;

static int summary(void)
{
    printf("%s: %d passed, %d failed\n", GPU_CHECK_NAME, passed, failed);
    return failed ? 1 : 0;
}

#define CK(what, call)                                                                             \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            printf("  FAIL %s: %s: %s\n", (what), #call, cudaGetErrorString(err_));                \
            failed++;                                                                              \
            exit(summary());                                                                       \
        }                                                                                          \
    } while (0)

static void result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf(ok ? "ok " : "not ok ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok)
        passed++;
    else
        failed++;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("  FAIL out of host memory (%zu bytes)\n", n);
        failed++;
        exit(summary());
    }
    return p;
}

#endif

/* moekit: a minimal unit-test harness for the C tests.
 * Each test binary defines test functions, registers them in main with
 * RUN(fn), and ends with `return check_summary("name");`, which prints
 * "name: N passed, N failed" and returns non-zero if anything failed.
 * CHECK continues after a failure so one run reports every broken case. */
#ifndef MOE_CHECK_H
#define MOE_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_passed_, check_failed_, check_cur_failed_;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            check_cur_failed_ = 1;                                                   \
        }                                                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                         \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            check_cur_failed_ = 1;                                                   \
        }                                                                            \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                        \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %.3g)",   \
              (double)(a), (double)(b), (double)(tol))

#define RUN(fn)                                                                      \
    do {                                                                             \
        check_cur_failed_ = 0;                                                       \
        fn();                                                                        \
        if (check_cur_failed_) {                                                     \
            check_failed_++;                                                         \
            fprintf(stderr, "not ok %s\n", #fn);                                     \
        } else {                                                                     \
            check_passed_++;                                                         \
            fprintf(stderr, "ok %s\n", #fn);                                         \
        }                                                                            \
    } while (0)

static inline int check_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}

#endif

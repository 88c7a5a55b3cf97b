/* moekit: error reporting shared by every module.
 * Functions that can fail return 0 on success and -1 on failure, filling a
 * moe_err with one readable line that names what failed (file, line, key,
 * option) and why. The caller adds context with moe_err_prefix. */
#ifndef MOE_ERR_H
#define MOE_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_ERR_LEN 1024

typedef struct {
    char msg[MOE_ERR_LEN];
} moe_err;

/* Set the message (printf-style). Always returns -1 so callers can write
 * `return moe_errf(e, "...")`. A NULL e is allowed and ignored. */
int moe_errf(moe_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepend "context: " to the current message. Returns -1. */
int moe_err_prefix(moe_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append ": strerror(errnum)" style detail. Returns -1. */
int moe_err_errno(moe_err *e, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif

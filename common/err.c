#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* out = a + ": " + b, truncated to fit */
static void join(char *out, size_t n, const char *a, const char *b)
{
    size_t la = strnlen(a, n - 1);
    memcpy(out, a, la);
    size_t pos = la;
    for (const char *sep = ": "; *sep && pos + 1 < n; sep++)
        out[pos++] = *sep;
    size_t lb = strnlen(b, n - 1 - pos);
    memcpy(out + pos, b, lb);
    out[pos + lb] = 0;
}

int moe_errf(moe_err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int moe_err_prefix(moe_err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    char prefix[MOE_ERR_LEN], old[MOE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    join(e->msg, sizeof e->msg, prefix, old);
    return -1;
}

int moe_err_errno(moe_err *e, int errnum, const char *fmt, ...)
{
    if (!e)
        return -1;
    char what[MOE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    join(e->msg, sizeof e->msg, what, strerror(errnum));
    return -1;
}

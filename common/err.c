#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    snprintf(e->msg, sizeof e->msg, "%s: %s", prefix, old);
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
    snprintf(e->msg, sizeof e->msg, "%s: %s", what, strerror(errnum));
    return -1;
}

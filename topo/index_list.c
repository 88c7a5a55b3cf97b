/* moekit: integer lists as Slurm writes GPU indices ("0,1", "0-3", "0-1,4"). */
#include "topo.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_number(const char **p, const char *what, const char *whole, long *out,
                        moe_err *e)
{
    const char *s = *p;
    if (!isdigit((unsigned char)*s))
        return moe_errf(e, "%s=\"%s\": expected a GPU index (a number >= 0) at \"%s\"", what,
                        whole, s);
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || v > INT_MAX)
        return moe_errf(e, "%s=\"%s\": index \"%.*s\" is out of range", what, whole,
                        (int)(end - s), s);
    *p = end;
    *out = v;
    return 0;
}

int topo_parse_index_list(const char *s, const char *what, int *out, int max, int *n_out,
                          moe_err *e)
{
    *n_out = 0;
    if (!s)
        return moe_errf(e, "%s is not set", what);
    const char *p = s;
    int n = 0;
    while (*p) {
        long lo, hi;
        if (parse_number(&p, what, s, &lo, e))
            return -1;
        hi = lo;
        if (*p == '-') {
            p++;
            if (parse_number(&p, what, s, &hi, e))
                return -1;
            if (hi < lo)
                return moe_errf(e, "%s=\"%s\": range %ld-%ld runs backwards", what, s, lo, hi);
        }
        for (long v = lo; v <= hi; v++) {
            for (int i = 0; i < n; i++)
                if (out[i] == v)
                    return moe_errf(e, "%s=\"%s\": GPU %ld is listed twice", what, s, v);
            if (n == max)
                return moe_errf(e, "%s=\"%s\": more than %d GPUs", what, s, max);
            out[n++] = (int)v;
        }
        if (*p == ',') {
            p++;
            if (!*p)
                return moe_errf(e, "%s=\"%s\": trailing comma", what, s);
        } else if (*p) {
            return moe_errf(e, "%s=\"%s\": unexpected \"%c\" (write indices as 0,1 or 0-3)", what,
                            s, *p);
        }
    }
    *n_out = n;
    return 0;
}

void topo_format_index_list(char *buf, size_t len, const int *v, int n)
{
    size_t off = 0;
    if (len)
        buf[0] = '\0';
    for (int i = 0; i < n && off < len; i++) {
        int j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        int w = (j > i) ? snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", v[i], v[j])
                        : snprintf(buf + off, len - off, "%s%d", off ? "," : "", v[i]);
        off += (size_t)w;
        i = j;
    }
}

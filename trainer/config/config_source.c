#include "config_source.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

static int is_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '*';
}

/* An integer literal starting at s (digits, or 0x and hex digits), with the
 * sign before it: check that it fits in 32 bits, or 64 with L. Returns the
 * length of the literal, or -1 with a message. */
static long check_integer(const char *path, int line, const char *s, int negative, moe_err *e)
{
    const char *p = s;
    int hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    unsigned sig = 0; /* significant (hex) digits */
    uint64_t value = 0;
    int overflow = 0;
    if (hex) {
        for (p += 2; isxdigit((unsigned char)*p); p++)
            if (sig || *p != '0')
                sig++;
    } else {
        for (; isdigit((unsigned char)*p); p++) {
            unsigned d = (unsigned)(*p - '0');
            if (value > (UINT64_MAX - d) / 10)
                overflow = 1;
            else
                value = value * 10 + d;
        }
    }
    if (*p == '.' || *p == 'e' || *p == 'E')
        return p - s; /* a float: libconfig reads it as a double */
    int wide = 0;
    while (*p == 'L' && wide < 2) {
        wide++;
        p++;
    }
    int bits = wide ? 64 : 32;
    int fits;
    if (hex)
        fits = sig <= (unsigned)bits / 4;
    else {
        uint64_t limit = ((uint64_t)1 << (bits - 1)) - 1 + (negative ? 1 : 0);
        fits = !overflow && value <= limit;
    }
    if (!fits)
        return moe_errf(e,
                        "%s:%d: the integer %s%.*s does not fit in %d bits%s", path, line,
                        negative ? "-" : "", (int)(p - s), s, bits,
                        wide ? "" : " (libconfig would silently truncate it; write it with an "
                                    "L suffix for a 64-bit integer)");
    return p - s;
}

int config_source_check(const char *path, const char *text, moe_err *e)
{
    int line = 1;
    const char *p = text;
    while (*p) {
        if (*p == '\n') {
            line++;
            p++;
        } else if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
            while (*p && *p != '\n')
                p++;
        } else if (p[0] == '/' && p[1] == '*') {
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
                line += *p == '\n';
            p += *p ? 2 : 0;
        } else if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                line += *p == '\n';
            }
            p += *p ? 1 : 0;
        } else if (*p == '@') {
            if (strncmp(p + 1, "include", 7) == 0)
                return moe_errf(e,
                                "%s:%d: @include is not supported: name a parent config with "
                                "base = \"name\"; and override what differs",
                                path, line);
            p++;
        } else if (isalpha((unsigned char)*p) || *p == '*') {
            while (is_name_char(*p))
                p++; /* a setting name, true or false: digits in it are no number */
        } else if (*p == '.' && isdigit((unsigned char)p[1])) {
            for (p++; isdigit((unsigned char)*p) || *p == 'e' || *p == 'E' ||
                      ((*p == '+' || *p == '-') && (p[-1] == 'e' || p[-1] == 'E'));
                 p++)
                ; /* ".5e3": a float */
        } else if (isdigit((unsigned char)*p)) {
            long n = check_integer(path, line, p, p > text && p[-1] == '-', e);
            if (n < 0)
                return -1;
            p += n;
            /* the rest of a float (fraction, exponent) is not an integer */
            while (*p == '.' || isdigit((unsigned char)*p) || *p == 'e' || *p == 'E' ||
                   ((*p == '+' || *p == '-') && (p[-1] == 'e' || p[-1] == 'E')))
                p++;
        } else {
            p++;
        }
    }
    return 0;
}

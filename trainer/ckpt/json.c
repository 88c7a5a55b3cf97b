#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsio.h"

/* ---- arena: every value, array and string of a document ------------------ */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[]; /* aligned payload */
} chunk;

struct json_doc {
    chunk *chunks;
    json_value root;
};

#define CHUNK_MIN ((size_t)64 << 10)

static void *arena_alloc(json_doc *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
        chunk *nc = malloc(sizeof(chunk) + cap);
        if (!nc)
            return NULL;
        nc->used = 0;
        nc->cap = cap;
        /* A big allocation gets its own chunk behind the current one, so the
         * current chunk's free space is not wasted. */
        if (c && cap == n) {
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            d->chunks = nc;
        }
        c = nc;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

void json_free(json_doc *d)
{
    if (!d)
        return;
    chunk *c = d->chunks;
    while (c) {
        chunk *next = c->next;
        free(c);
        c = next;
    }
    free(d);
}

const json_value *json_root(const json_doc *d) { return d ? &d->root : NULL; }

/* ---- parser --------------------------------------------------------------- */

typedef struct {
    const char *p, *end;
    const char *line_start;
    int line;
    int depth, max_depth;
    json_doc *doc;
    moe_err *e;
} parser;

static int column_at(const parser *ps, const char *at) { return (int)(at - ps->line_start) + 1; }

static int fail_at(parser *ps, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_at(parser *ps, const char *at, const char *fmt, ...)
{
    char what[MOE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return moe_errf(ps->e, "line %d column %d: %s", ps->line, column_at(ps, at), what);
}

/* A byte shown in a message: printable as itself, else as \xNN. */
static const char *show_byte(char buf[8], unsigned char c)
{
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, 8, "'%c'", c);
    else
        snprintf(buf, 8, "\\x%02X", c);
    return buf;
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->line_start = ++ps->p;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            ps->p++;
        } else {
            break;
        }
    }
}

static int parse_value(parser *ps, json_value *out);

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* Length of a valid UTF-8 sequence starting at p (lead byte >= 0x80), or 0.
 * Rejects overlong forms, surrogates and code points above U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/* ps->p is at the opening quote. Two passes: find the closing quote (so the
 * decoded string, never longer than its source, gets one exact allocation),
 * then decode and validate. */
static int parse_string(parser *ps, const char **s_out, size_t *len_out)
{
    const char *open = ps->p;
    const char *q = open + 1;
    while (q < ps->end && *q != '"') {
        if (*q == '\\') {
            if (q + 1 >= ps->end) {
                q = ps->end; /* a backslash as the last byte: unterminated */
                break;
            }
            q += 2;
        } else {
            q++;
        }
    }
    if (q >= ps->end)
        return fail_at(ps, open, "string is not closed before the end of the input");
    const char *close = q;
    char *out = arena_alloc(ps->doc, (size_t)(close - open));
    if (!out)
        return fail_at(ps, open, "out of memory");
    char *o = out;
    const char *p = open + 1;
    char b[8];
    while (p < close) {
        unsigned char c = (unsigned char)*p;
        if (c == '\\') {
            char esc = p[1];
            switch (esc) {
            case '"': *o++ = '"'; p += 2; break;
            case '\\': *o++ = '\\'; p += 2; break;
            case '/': *o++ = '/'; p += 2; break;
            case 'b': *o++ = '\b'; p += 2; break;
            case 'f': *o++ = '\f'; p += 2; break;
            case 'n': *o++ = '\n'; p += 2; break;
            case 'r': *o++ = '\r'; p += 2; break;
            case 't': *o++ = '\t'; p += 2; break;
            case 'u': {
                unsigned cp;
                if (close - p < 6 || hex4(p + 2, &cp) != 0)
                    return fail_at(ps, p, "\\u must be followed by 4 hex digits");
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return fail_at(ps, p, "\\u%04X is a low surrogate without a high one before it", cp);
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned lo;
                    if (close - p < 12 || p[6] != '\\' || p[7] != 'u' || hex4(p + 8, &lo) != 0 ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return fail_at(ps, p, "\\u%04X is a high surrogate not followed by a low one (\\uDC00-\\uDFFF)", cp);
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
                o = put_utf8(o, cp);
                p += 6;
                break;
            }
            default:
                return fail_at(ps, p, "invalid escape \\%s in string", show_byte(b, (unsigned char)esc));
            }
        } else if (c < 0x20) {
            return fail_at(ps, p, "control character \\x%02X in string must be escaped", c);
        } else if (c < 0x80) {
            *o++ = (char)c;
            p++;
        } else {
            size_t n = utf8_seq((const unsigned char *)p, (const unsigned char *)close);
            if (n == 0)
                return fail_at(ps, p, "invalid UTF-8 byte \\x%02X in string", c);
            memcpy(o, p, n);
            o += n;
            p += n;
        }
    }
    *o = '\0';
    *s_out = out;
    *len_out = (size_t)(o - out);
    ps->p = close + 1;
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *ps, json_value *out)
{
    const char *start = ps->p, *p = ps->p, *end = ps->end;
    int neg = 0, is_int = 1;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || !is_digit(*p))
        return fail_at(ps, start, "'-' must be followed by a digit");
    if (*p == '0' && p + 1 < end && is_digit(p[1]))
        return fail_at(ps, start, "numbers may not have leading zeros");
    /* Integer part, accumulated exactly while it fits. */
    uint64_t mag = 0;
    int fits = 1;
    while (p < end && is_digit(*p)) {
        unsigned d = (unsigned)(*p - '0');
        if (mag > (UINT64_MAX - d) / 10)
            fits = 0;
        else
            mag = mag * 10 + d;
        p++;
    }
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= end || !is_digit(*p))
            return fail_at(ps, start, "a digit must follow the decimal point");
        while (p < end && is_digit(*p))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return fail_at(ps, start, "a digit must follow the exponent");
        while (p < end && is_digit(*p))
            p++;
    }
    /* strtod needs a NUL-terminated copy; the input buffer may not have one. */
    size_t n = (size_t)(p - start);
    char small[64];
    char *copy = n < sizeof small ? small : malloc(n + 1);
    if (!copy)
        return fail_at(ps, start, "out of memory");
    memcpy(copy, start, n);
    copy[n] = '\0';
    errno = 0;
    double v = strtod(copy, NULL);
    int range_err = errno == ERANGE && isinf(v);
    if (copy != small)
        free(copy);
    if (range_err)
        return fail_at(ps, start, "number %.*s is beyond the range of a double", (int)(n > 40 ? 40 : n), start);
    out->type = JSON_NUMBER;
    out->num.value = v;
    out->num.is_integer = 0;
    out->num.integer = 0;
    if (is_int && fits) {
        if (!neg && mag <= (uint64_t)INT64_MAX) {
            out->num.is_integer = 1;
            out->num.integer = (int64_t)mag;
        } else if (neg && mag <= (uint64_t)INT64_MAX + 1) {
            out->num.is_integer = 1;
            out->num.integer = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        }
    }
    ps->p = p;
    return 0;
}

static int parse_literal(parser *ps, const char *word, json_value *out, json_type type, int b)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail_at(ps, ps->p, "invalid literal (expected %s)", word);
    out->type = type;
    out->boolean = b;
    ps->p += n;
    return 0;
}

/* Growable scratch vector for one container's children before they move to
 * the arena: amortised linear, freed on every path. */
typedef struct {
    void *data;
    size_t n, cap, elem;
} vec;

static void *vec_push(vec *v)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        void *d = realloc(v->data, cap * v->elem);
        if (!d)
            return NULL;
        v->data = d;
        v->cap = cap;
    }
    return (char *)v->data + v->elem * v->n++;
}

static void *vec_to_arena(parser *ps, vec *v)
{
    if (v->n == 0)
        return NULL;
    void *dst = arena_alloc(ps->doc, v->n * v->elem);
    if (dst)
        memcpy(dst, v->data, v->n * v->elem);
    return dst;
}

static int enter(parser *ps, const char *at)
{
    if (++ps->depth > ps->max_depth)
        return fail_at(ps, at, "nesting deeper than %d levels", ps->max_depth);
    return 0;
}

static int parse_array(parser *ps, json_value *out)
{
    const char *open = ps->p;
    if (enter(ps, open) != 0)
        return -1;
    ps->p++;
    vec items = {NULL, 0, 0, sizeof(json_value)};
    int rc = -1;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
    } else {
        for (;;) {
            json_value *slot = vec_push(&items);
            if (!slot) {
                fail_at(ps, ps->p, "out of memory");
                goto done;
            }
            if (parse_value(ps, slot) != 0)
                goto done;
            skip_ws(ps);
            if (ps->p >= ps->end) {
                fail_at(ps, ps->p, "array opened at line %d column %d is not closed", out->line, out->column);
                goto done;
            }
            char c = *ps->p;
            if (c == ']') {
                ps->p++;
                break;
            }
            if (c != ',') {
                char b[8];
                fail_at(ps, ps->p, "expected ',' or ']' in array, found %s", show_byte(b, (unsigned char)c));
                goto done;
            }
            ps->p++;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ']') {
                fail_at(ps, ps->p, "trailing comma before ']'");
                goto done;
            }
        }
    }
    out->type = JSON_ARRAY;
    out->arr.n = items.n;
    out->arr.items = vec_to_arena(ps, &items);
    if (items.n && !out->arr.items) {
        fail_at(ps, open, "out of memory");
        goto done;
    }
    rc = 0;
done:
    free(items.data);
    ps->depth--;
    return rc;
}

static int cmp_member_ptr(const void *a, const void *b)
{
    const json_member *x = *(const json_member *const *)a, *y = *(const json_member *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    if (x->key_len != y->key_len)
        return x->key_len < y->key_len ? -1 : 1;
    /* Equal keys: file order, so the report names the second one. */
    return x < y ? -1 : (x > y);
}

/* Sorting pointers keeps this O(n log n) even for a 100 MB safetensors header. */
static int check_duplicate_keys(parser *ps, const json_member *m, size_t n)
{
    if (n < 2)
        return 0;
    const json_member **ptrs = malloc(n * sizeof *ptrs);
    if (!ptrs)
        return moe_errf(ps->e, "line %d column %d: out of memory", m[0].line, m[0].column);
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &m[i];
    qsort(ptrs, n, sizeof *ptrs, cmp_member_ptr);
    int rc = 0;
    for (size_t i = 1; i < n; i++) {
        const json_member *a = ptrs[i - 1], *b = ptrs[i];
        if (a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0) {
            rc = moe_errf(ps->e, "line %d column %d: duplicate key \"%.200s\" (first at line %d column %d)",
                          b->line, b->column, b->key, a->line, a->column);
            break;
        }
    }
    free(ptrs);
    return rc;
}

static int parse_object(parser *ps, json_value *out)
{
    const char *open = ps->p;
    if (enter(ps, open) != 0)
        return -1;
    ps->p++;
    vec members = {NULL, 0, 0, sizeof(json_member)};
    int rc = -1;
    char b[8];
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
    } else {
        for (;;) {
            if (ps->p >= ps->end) {
                fail_at(ps, ps->p, "object opened at line %d column %d is not closed", out->line, out->column);
                goto done;
            }
            if (*ps->p != '"') {
                fail_at(ps, ps->p, "expected a string key in object, found %s", show_byte(b, (unsigned char)*ps->p));
                goto done;
            }
            json_member *m = vec_push(&members);
            if (!m) {
                fail_at(ps, ps->p, "out of memory");
                goto done;
            }
            m->line = ps->line;
            m->column = column_at(ps, ps->p);
            if (parse_string(ps, &m->key, &m->key_len) != 0)
                goto done;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                if (ps->p >= ps->end)
                    fail_at(ps, ps->p, "expected ':' after key \"%.200s\", found the end of the input", m->key);
                else
                    fail_at(ps, ps->p, "expected ':' after key \"%.200s\", found %s", m->key,
                            show_byte(b, (unsigned char)*ps->p));
                goto done;
            }
            ps->p++;
            if (parse_value(ps, &m->value) != 0)
                goto done;
            skip_ws(ps);
            if (ps->p >= ps->end) {
                fail_at(ps, ps->p, "object opened at line %d column %d is not closed", out->line, out->column);
                goto done;
            }
            char c = *ps->p;
            if (c == '}') {
                ps->p++;
                break;
            }
            if (c != ',') {
                fail_at(ps, ps->p, "expected ',' or '}' in object, found %s", show_byte(b, (unsigned char)c));
                goto done;
            }
            ps->p++;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == '}') {
                fail_at(ps, ps->p, "trailing comma before '}'");
                goto done;
            }
        }
    }
    if (check_duplicate_keys(ps, members.data, members.n) != 0)
        goto done;
    out->type = JSON_OBJECT;
    out->obj.n = members.n;
    out->obj.members = vec_to_arena(ps, &members);
    if (members.n && !out->obj.members) {
        fail_at(ps, open, "out of memory");
        goto done;
    }
    rc = 0;
done:
    free(members.data);
    ps->depth--;
    return rc;
}

static int parse_value(parser *ps, json_value *out)
{
    skip_ws(ps);
    memset(out, 0, sizeof *out);
    out->line = ps->line;
    out->column = column_at(ps, ps->p);
    if (ps->p >= ps->end)
        return fail_at(ps, ps->p, "unexpected end of input, expected a value");
    char c = *ps->p;
    char b[8];
    switch (c) {
    case '{': return parse_object(ps, out);
    case '[': return parse_array(ps, out);
    case '"':
        out->type = JSON_STRING;
        return parse_string(ps, &out->str.s, &out->str.len);
    case 't': return parse_literal(ps, "true", out, JSON_BOOL, 1);
    case 'f': return parse_literal(ps, "false", out, JSON_BOOL, 0);
    case 'n': return parse_literal(ps, "null", out, JSON_NULL, 0);
    default:
        if (c == '-' || is_digit(c))
            return parse_number(ps, out);
        return fail_at(ps, ps->p, "unexpected %s, expected a value", show_byte(b, (unsigned char)c));
    }
}

int json_parse(const char *text, size_t len, const json_limits *lim, json_doc **out, moe_err *e)
{
    *out = NULL;
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : JSON_DEFAULT_MAX_BYTES;
    int max_depth = lim && lim->max_depth ? lim->max_depth : JSON_DEFAULT_MAX_DEPTH;
    if (len > max_bytes)
        return moe_errf(e, "input is %zu bytes, over the limit of %zu", len, max_bytes);
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        return moe_errf(e, "line 1 column 1: byte-order mark at the start (JSON must not have one)");
    json_doc *d = calloc(1, sizeof *d);
    if (!d)
        return moe_errf(e, "out of memory");
    parser ps = {text, text + len, text, 1, 0, max_depth, d, e};
    if (parse_value(&ps, &d->root) != 0) {
        json_free(d);
        return -1;
    }
    skip_ws(&ps);
    if (ps.p < ps.end) {
        char b[8];
        fail_at(&ps, ps.p, "unexpected %s after the end of the JSON value", show_byte(b, (unsigned char)*ps.p));
        json_free(d);
        return -1;
    }
    *out = d;
    return 0;
}

int json_parse_file(const char *path, const json_limits *lim, json_doc **out, moe_err *e)
{
    *out = NULL;
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : JSON_DEFAULT_MAX_BYTES;
    char *text;
    size_t len;
    if (fsio_read_all(path, max_bytes, &text, &len, e) != 0)
        return -1;
    int rc = json_parse(text, len, lim, out, e);
    free(text);
    if (rc != 0)
        return moe_err_prefix(e, "%s", path);
    return 0;
}

const json_value *json_get(const json_value *v, const char *key)
{
    if (!v || v->type != JSON_OBJECT)
        return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < v->obj.n; i++) {
        const json_member *m = &v->obj.members[i];
        if (m->key_len == n && memcmp(m->key, key, n) == 0)
            return &m->value;
    }
    return NULL;
}

const char *json_type_name(json_type t)
{
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

/* ---- writer --------------------------------------------------------------- */

static void jw_fail(json_writer *w, const char *msg)
{
    if (!w->error[0])
        snprintf(w->error, sizeof w->error, "%s", msg);
}

void jw_raw(json_writer *w, const char *s, size_t n)
{
    if (w->error[0])
        return;
    if (w->cap - w->len < n + 1) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap - w->len < n + 1)
            cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) {
            jw_fail(w, "out of memory");
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

void jw_init(json_writer *w, int indent)
{
    memset(w, 0, sizeof *w);
    w->indent = indent;
}

void jw_free(json_writer *w)
{
    free(w->buf);
    w->buf = NULL;
    w->len = w->cap = 0;
}

static void newline_indent(json_writer *w, int depth)
{
    if (!w->indent)
        return;
    jw_raw(w, "\n", 1);
    for (int i = 0; i < depth * w->indent; i++)
        jw_raw(w, " ", 1);
}

/* Called before every value or key: commas and layout live here. */
static void before_item(json_writer *w, int is_key)
{
    if (w->want_value) {
        if (is_key)
            jw_fail(w, "a key was written where its value belongs");
        w->want_value = 0;
        return;
    }
    if (w->depth == 0 && w->has_items[0]) {
        jw_fail(w, "more than one top-level value");
        return;
    }
    if (w->depth > 0 && w->in_object[w->depth] && !is_key) {
        jw_fail(w, "a value inside an object needs a key first");
        return;
    }
    if (is_key && (w->depth == 0 || !w->in_object[w->depth])) {
        jw_fail(w, "a key outside an object");
        return;
    }
    if (w->has_items[w->depth])
        jw_raw(w, ",", 1);
    if (w->depth > 0)
        newline_indent(w, w->depth);
    w->has_items[w->depth] = 1;
}

static void open_container(json_writer *w, char c, int is_object)
{
    before_item(w, 0);
    if (w->depth >= JW_MAX_DEPTH) {
        jw_fail(w, "nesting deeper than JW_MAX_DEPTH");
        return;
    }
    jw_raw(w, &c, 1);
    w->depth++;
    w->has_items[w->depth] = 0;
    w->in_object[w->depth] = (unsigned char)is_object;
}

static void close_container(json_writer *w, char c, int is_object)
{
    if (w->depth == 0 || w->in_object[w->depth] != is_object || w->want_value) {
        jw_fail(w, "unbalanced end of array/object");
        return;
    }
    int had = w->has_items[w->depth];
    w->depth--;
    if (had)
        newline_indent(w, w->depth);
    jw_raw(w, &c, 1);
}

void jw_object_begin(json_writer *w) { open_container(w, '{', 1); }
void jw_object_end(json_writer *w) { close_container(w, '}', 1); }
void jw_array_begin(json_writer *w) { open_container(w, '[', 0); }
void jw_array_end(json_writer *w) { close_container(w, ']', 0); }

static void put_escaped(json_writer *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    jw_raw(w, "\"", 1);
    size_t run = 0; /* bytes since the last escape, copied in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[7];
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20) {
            memcpy(ubuf, "\\u00", 4);
            ubuf[4] = hex[c >> 4];
            ubuf[5] = hex[c & 15];
            ubuf[6] = '\0';
            esc = ubuf;
        }
        if (esc) {
            jw_raw(w, s + i - run, run);
            run = 0;
            jw_raw(w, esc, strlen(esc));
        } else {
            run++;
        }
    }
    jw_raw(w, s + n - run, run);
    jw_raw(w, "\"", 1);
}

void jw_key(json_writer *w, const char *key)
{
    before_item(w, 1);
    put_escaped(w, key, strlen(key));
    jw_raw(w, w->indent ? ": " : ":", w->indent ? 2 : 1);
    w->want_value = 1;
}

void jw_string_n(json_writer *w, const char *s, size_t n)
{
    before_item(w, 0);
    put_escaped(w, s, n);
}

void jw_string(json_writer *w, const char *s) { jw_string_n(w, s, strlen(s)); }

void jw_int(json_writer *w, int64_t v)
{
    char b[32];
    int n = snprintf(b, sizeof b, "%lld", (long long)v);
    before_item(w, 0);
    jw_raw(w, b, (size_t)n);
}

void jw_double(json_writer *w, double v)
{
    if (!isfinite(v)) {
        jw_fail(w, "NaN or infinity has no JSON representation");
        return;
    }
    char b[40];
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v)
            break;
    }
    if (!strpbrk(b, ".eEn"))
        n += snprintf(b + n, sizeof b - (size_t)n, ".0");
    before_item(w, 0);
    jw_raw(w, b, (size_t)n);
}

void jw_bool(json_writer *w, int v)
{
    before_item(w, 0);
    jw_raw(w, v ? "true" : "false", v ? 4 : 5);
}

void jw_null(json_writer *w)
{
    before_item(w, 0);
    jw_raw(w, "null", 4);
}

int jw_finish(json_writer *w, moe_err *e)
{
    if (w->error[0])
        return moe_errf(e, "JSON writer: %s", w->error);
    if (w->depth != 0 || w->want_value || !w->has_items[0])
        return moe_errf(e, "JSON writer: document is incomplete (unclosed array/object or no value)");
    return 0;
}

int jw_write_file(json_writer *w, const char *path, moe_err *e)
{
    int rc = jw_finish(w, e) ? moe_err_prefix(e, "%s", path)
                             : fsio_write_all(path, w->buf, w->len, e);
    jw_free(w);
    return rc;
}

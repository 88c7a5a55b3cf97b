/* moekit: typed values of configuration keys: parsing them from override
 * text and from libconfig settings, range checks, and writing them back. */
#include "config_schema.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_intern.h"
#include "config_suggest.h"

static void *field(moe_config *cfg, size_t offset) { return (char *)cfg + offset; }
static const void *cfield(const moe_config *cfg, size_t offset)
{
    return (const char *)cfg + offset;
}

/* ---- ranges ---------------------------------------------------------- */

void config_key_range_text(const config_key *k, char *buf, size_t size)
{
    switch (k->type) {
    case KEY_INT:
    case KEY_U64:
        if (k->imax == INT_MAX && k->type == KEY_INT)
            snprintf(buf, size, ">= %lld", k->imin);
        else
            snprintf(buf, size, "%lld..%lld", k->imin, k->imax);
        break;
    case KEY_FLOAT:
    case KEY_FLOAT_PAIR:
        if (isinf(k->fmax))
            snprintf(buf, size, "%s %g", k->fmin_open ? ">" : ">=", k->fmin);
        else
            snprintf(buf, size, "%c%g, %g%c", k->fmin_open ? '(' : '[', k->fmin, k->fmax,
                     k->fmax_open ? ')' : ']');
        break;
    case KEY_BOOL:
        snprintf(buf, size, "true or false");
        break;
    case KEY_STRING:
        snprintf(buf, size, "text of at most %zu characters", k->size - 1);
        break;
    case KEY_STRING_LIST:
        snprintf(buf, size, "at least %lld paths of at most %zu characters", k->imin, k->size - 1);
        break;
    case KEY_BLEND:
        snprintf(buf, size, "a list of { store = \"DIR\"; weight = W; } with W > 0");
        break;
    case KEY_ENUM: {
        size_t used = 0;
        buf[0] = '\0';
        for (int i = 0; k->choices[i] && used < size; i++)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                                     k->choices[i]);
        break;
    }
    }
}

static int out_of_range(const config_key *k, const char *what, const char *value, moe_err *e)
{
    char range[256];
    config_key_range_text(k, range, sizeof range);
    return moe_errf(e, "%s = %s is out of range (allowed %s)", what, value, range);
}

static int check_int(const config_key *k, long long v, moe_err *e)
{
    if (v >= k->imin && v <= k->imax)
        return 0;
    char text[32];
    snprintf(text, sizeof text, "%lld", v);
    return out_of_range(k, k->path, text, e);
}

static int check_float(const config_key *k, const char *what, double v, moe_err *e)
{
    int low_ok = k->fmin_open ? v > k->fmin : v >= k->fmin;
    int high_ok = k->fmax_open ? v < k->fmax : v <= k->fmax;
    if (isfinite(v) && low_ok && high_ok)
        return 0;
    char text[32];
    snprintf(text, sizeof text, "%g", v);
    return out_of_range(k, what, text, e);
}

/* Index of `s` in the choices (case-insensitive), or -1 with a message. */
static int find_choice(const config_key *k, const char *s, moe_err *e)
{
    size_t n = 0;
    for (; k->choices[n]; n++)
        if (strcasecmp(k->choices[n], s) == 0)
            return (int)n;
    char range[256];
    config_key_range_text(k, range, sizeof range);
    char lower[64];
    size_t len = 0;
    for (; s[len] && len < sizeof lower - 1; len++)
        lower[len] = (char)tolower((unsigned char)s[len]);
    lower[len] = '\0';
    const char *hint = closest_word(lower, k->choices, n);
    if (hint)
        moe_errf(e, "%s: '%.80s' is not one of %s (did you mean '%.80s'?)", k->path, s, range,
                 hint);
    else
        moe_errf(e, "%s: '%.80s' is not one of %s", k->path, s, range);
    return -1;
}

static int store_string(const config_key *k, char *dst, const char *what, const char *s,
                        size_t len, moe_err *e)
{
    if (len >= k->size)
        return moe_errf(e, "%s is %zu characters long; at most %zu are allowed", what, len,
                        k->size - 1);
    /* Zero the whole buffer so equal configs are equal bytes (round-trip tests
     * and checkpoint comparisons rely on it). */
    memset(dst, 0, k->size);
    memcpy(dst, s, len);
    return 0;
}

/* ---- from override text ---------------------------------------------- */

static int parse_int_text(const config_key *k, const char *s, long long *out, moe_err *e)
{
    if (!*s || isspace((unsigned char)*s))
        return moe_errf(e, "%s: '%.80s' is not an integer", k->path, s);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end)
        return moe_errf(e, "%s: '%.80s' is not an integer", k->path, s);
    if (errno == ERANGE) {
        char range[64];
        config_key_range_text(k, range, sizeof range);
        return moe_errf(e, "%s: '%.80s' does not fit in 64 bits (allowed %s)", k->path, s, range);
    }
    *out = v;
    return 0;
}

static int parse_double_text(const char *what, const char *s, double *out, moe_err *e)
{
    if (!*s || isspace((unsigned char)*s))
        return moe_errf(e, "%s: '%.80s' is not a number", what, s);
    char *end;
    double v = strtod(s, &end);
    if (*end)
        return moe_errf(e, "%s: '%.80s' is not a number", what, s);
    if (!isfinite(v))
        return moe_errf(e, "%s: '%.80s' is not a finite number", what, s);
    *out = v;
    return 0;
}

static int parse_bool_text(const config_key *k, const char *s, int *out, moe_err *e)
{
    static const char *const yes[] = {"true", "yes", "1"}, *const no[] = {"false", "no", "0"};
    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    }
    return moe_errf(e, "%s: '%.80s' is not a bool (use true/false, yes/no or 1/0)", k->path, s);
}

/* A list written as "a,b" or "[a,b]": the text between the brackets. */
static void list_body(const char *s, const char **begin, const char **end)
{
    const char *b = s, *x = s + strlen(s);
    while (isspace((unsigned char)*b))
        b++;
    while (x > b && isspace((unsigned char)x[-1]))
        x--;
    if (x - b >= 2 && *b == '[' && x[-1] == ']') {
        b++;
        x--;
    }
    *begin = b;
    *end = x;
}

/* The next comma-separated item of [*cur, end), trimmed of blanks and of
 * quotes a shell user may have kept ("[\"a.fa\", \"b.fa\"]"). Returns 1
 * when a comma follows, so "a," ends in an empty item the caller rejects. */
static int next_item(const char **cur, const char *end, const char **ib, size_t *ilen)
{
    const char *b = *cur, *comma = memchr(b, ',', (size_t)(end - b));
    const char *x = comma ? comma : end;
    *cur = comma ? comma + 1 : end;
    while (b < x && isspace((unsigned char)*b))
        b++;
    while (x > b && isspace((unsigned char)x[-1]))
        x--;
    if (x - b >= 2 && ((*b == '"' && x[-1] == '"') || (*b == '\'' && x[-1] == '\''))) {
        b++;
        x--;
    }
    *ib = b;
    *ilen = (size_t)(x - b);
    return comma != NULL;
}

static int set_pair_text(const config_key *k, moe_config *cfg, const char *s, moe_err *e)
{
    const char *cur, *end;
    list_body(s, &cur, &end);
    double v[2] = {0, 0};
    int n = 0, more = 1;
    while (more) {
        const char *ib;
        size_t len;
        more = next_item(&cur, end, &ib, &len);
        char item[64], what[96];
        if (n == 2 || len >= sizeof item)
            return moe_errf(e, "%s: '%.80s' is not a pair of numbers like 0.9,0.95", k->path, s);
        memcpy(item, ib, len);
        item[len] = '\0';
        snprintf(what, sizeof what, "%s[%d]", k->path, n);
        if (parse_double_text(what, item, &v[n], e) || check_float(k, what, v[n], e))
            return -1;
        n++;
    }
    if (n != 2)
        return moe_errf(e, "%s: '%.80s' is not a pair of numbers like 0.9,0.95", k->path, s);
    *(double *)field(cfg, k->offset) = v[0];
    *(double *)field(cfg, k->offset2) = v[1];
    return 0;
}

/* A growing list of interned strings, interned as a whole when complete. */
typedef struct {
    const char **items;
    size_t n, cap;
} str_list;

static int list_push(str_list *l, const config_key *k, const char *what, const char *s, size_t len,
                     moe_err *e)
{
    if (len >= k->size)
        return moe_errf(e, "%s is %zu characters long; at most %zu are allowed", what, len,
                        k->size - 1);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        const char **p = realloc(l->items, cap * sizeof *p);
        if (!p)
            return moe_errf(e, "%s: out of memory", what);
        l->items = p;
        l->cap = cap;
    }
    if (!(l->items[l->n] = config_intern_str(s, len)))
        return moe_errf(e, "%s: out of memory", what);
    l->n++;
    return 0;
}

static int list_store(const config_key *k, moe_config *cfg, str_list *l, moe_err *e)
{
    const void *arr = config_intern(l->items, l->n * sizeof *l->items);
    free(l->items);
    l->items = NULL;
    if (!arr)
        return moe_errf(e, "%s: out of memory", k->path);
    memcpy(field(cfg, k->offset), &arr, sizeof arr);
    *(int *)field(cfg, k->offset2) = (int)l->n;
    return 0;
}

static int set_list_text(const config_key *k, moe_config *cfg, const char *s, moe_err *e)
{
    const char *cur, *end;
    list_body(s, &cur, &end);
    if (cur == end)
        return moe_errf(e, "%s: needs at least one path", k->path);
    str_list l = {0};
    int more = 1;
    while (more) {
        const char *ib;
        size_t len;
        more = next_item(&cur, end, &ib, &len);
        char what[96];
        snprintf(what, sizeof what, "%s[%zu]", k->path, l.n);
        if (len == 0) {
            free(l.items);
            return moe_errf(e, "%s is empty in '%.80s'", what, s);
        }
        if (list_push(&l, k, what, ib, len, e)) {
            free(l.items);
            return -1;
        }
    }
    return list_store(k, cfg, &l, e);
}

/* data.blend entries, interned as one array. */
static int blend_store(const config_key *k, moe_config *cfg, moe_blend_entry *v, int n, moe_err *e)
{
    const void *arr = n ? config_intern(v, (size_t)n * sizeof *v) : NULL;
    if (n && !arr)
        return moe_errf(e, "%s: out of memory", k->path);
    memcpy(field(cfg, k->offset), &arr, sizeof arr);
    *(int *)field(cfg, k->offset2) = n;
    return 0;
}

static int blend_entry(const config_key *k, moe_blend_entry *out, int i, const char *store,
                       size_t len, double weight, moe_err *e)
{
    if (len == 0 || len >= MOE_PATH_MAX)
        return moe_errf(e, "%s[%d].store: a path of 1..%d characters", k->path, i,
                        MOE_PATH_MAX - 1);
    if (!(weight > 0) || !isfinite(weight))
        return moe_errf(e, "%s[%d].weight = %g: must be > 0", k->path, i, weight);
    if (!(out->store = config_intern_str(store, len)))
        return moe_errf(e, "%s: out of memory", k->path);
    out->weight = weight;
    return 0;
}

/* Override text: STORE:WEIGHT,STORE:WEIGHT (the weight after the last ':'). */
static int set_blend_text(const config_key *k, moe_config *cfg, const char *s, moe_err *e)
{
    const char *cur, *end;
    list_body(s, &cur, &end);
    if (end - cur == 2 && cur[0] == '(' && cur[1] == ')')
        cur = end; /* "()": no blend, as the file syntax writes it */
    moe_blend_entry *v = NULL;
    int n = 0, more = cur != end, rc = 0;
    while (more && !rc) {
        const char *ib;
        size_t len;
        more = next_item(&cur, end, &ib, &len);
        const char *colon = NULL;
        for (const char *q = ib; q < ib + len; q++)
            colon = *q == ':' ? q : colon;
        char num[64] = "", *stop;
        if (colon && (size_t)(ib + len - colon - 1) < sizeof num)
            memcpy(num, colon + 1, (size_t)(ib + len - colon - 1));
        double w = strtod(num, &stop);
        moe_blend_entry *nv = realloc(v, (size_t)(n + 1) * sizeof *v);
        if (!nv)
            rc = moe_errf(e, "%s: out of memory", k->path);
        else if (!colon || !num[0] || *stop)
            rc = moe_errf(e, "%s[%d]: '%.*s' is not STORE:WEIGHT (e.g. data.blend=a:0.7,b:0.3)",
                          k->path, n, (int)len, ib);
        else
            rc = blend_entry(k, &nv[n], n, ib, (size_t)(colon - ib), w, e);
        if (nv)
            v = nv;
        n++;
    }
    if (!rc)
        rc = blend_store(k, cfg, v, n, e);
    free(v);
    return rc;
}

int config_key_set_text(const config_key *k, moe_config *cfg, const char *text, moe_err *e)
{
    switch (k->type) {
    case KEY_INT: {
        long long v = 0;
        if (parse_int_text(k, text, &v, e) || check_int(k, v, e))
            return -1;
        *(int *)field(cfg, k->offset) = (int)v;
        return 0;
    }
    case KEY_U64: {
        /* strtoull would quietly wrap "-1"; a seed is never negative. */
        if (*text == '-')
            return out_of_range(k, k->path, text, e);
        if (!*text || isspace((unsigned char)*text))
            return moe_errf(e, "%s: '%.80s' is not an integer", k->path, text);
        char *end;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (*end)
            return moe_errf(e, "%s: '%.80s' is not an integer", k->path, text);
        if (errno == ERANGE || v > (unsigned long long)k->imax)
            return out_of_range(k, k->path, text, e);
        *(uint64_t *)field(cfg, k->offset) = v;
        return 0;
    }
    case KEY_FLOAT: {
        double v = 0;
        if (parse_double_text(k->path, text, &v, e) || check_float(k, k->path, v, e))
            return -1;
        *(double *)field(cfg, k->offset) = v;
        return 0;
    }
    case KEY_BOOL:
        return parse_bool_text(k, text, field(cfg, k->offset), e);
    case KEY_STRING:
        return store_string(k, field(cfg, k->offset), k->path, text, strlen(text), e);
    case KEY_FLOAT_PAIR:
        return set_pair_text(k, cfg, text, e);
    case KEY_STRING_LIST:
        return set_list_text(k, cfg, text, e);
    case KEY_BLEND:
        return set_blend_text(k, cfg, text, e);
    case KEY_ENUM: {
        int i = find_choice(k, text, e);
        if (i < 0)
            return -1;
        memcpy(field(cfg, k->offset), &i, sizeof i);
        return 0;
    }
    }
    return moe_errf(e, "%s: key of unknown type %d", k->path, (int)k->type);
}

/* ---- from libconfig settings ----------------------------------------- */

static const char *setting_type_name(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_INT: return "an integer";
    case CONFIG_TYPE_INT64: return "a 64-bit integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a bool";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    default: return "nothing";
    }
}

static int wrong_type(const config_key *k, const char *what, const char *expected,
                      const config_setting_t *s, moe_err *e)
{
    if (config_setting_type(s) == CONFIG_TYPE_FLOAT)
        return moe_errf(e, "%s: expected %s, found a float (%g)", what, expected,
                        config_setting_get_float(s));
    if (config_setting_type(s) == CONFIG_TYPE_STRING)
        return moe_errf(e, "%s: expected %s, found a string (\"%.80s\")", what, expected,
                        config_setting_get_string(s));
    return moe_errf(e, "%s: expected %s, found %s", what, expected, setting_type_name(s));
}

static int is_integer(const config_setting_t *s)
{
    return config_setting_type(s) == CONFIG_TYPE_INT ||
           config_setting_type(s) == CONFIG_TYPE_INT64;
}

/* Users write 1 where they mean 1.0: an integer is a fine float. */
static int setting_double(const config_key *k, const char *what, const config_setting_t *s,
                          double *out, moe_err *e)
{
    if (is_integer(s))
        *out = (double)config_setting_get_int64(s);
    else if (config_setting_type(s) == CONFIG_TYPE_FLOAT)
        *out = config_setting_get_float(s);
    else
        return wrong_type(k, what, "a number", s, e);
    return check_float(k, what, *out, e);
}

static int set_pair_setting(const config_key *k, moe_config *cfg, const config_setting_t *s,
                            moe_err *e)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_ARRAY && t != CONFIG_TYPE_LIST)
        return wrong_type(k, k->path, "a pair of numbers like [0.9, 0.95]", s, e);
    if (config_setting_length(s) != 2)
        return moe_errf(e, "%s: expected a pair of numbers like [0.9, 0.95], found %d values",
                        k->path, config_setting_length(s));
    double v[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s[%d]", k->path, i);
        if (setting_double(k, what, config_setting_get_elem(s, (unsigned)i), &v[i], e))
            return -1;
    }
    *(double *)field(cfg, k->offset) = v[0];
    *(double *)field(cfg, k->offset2) = v[1];
    return 0;
}

static int set_list_setting(const config_key *k, moe_config *cfg, const config_setting_t *s,
                            moe_err *e)
{
    int t = config_setting_type(s);
    str_list l = {0};
    if (t == CONFIG_TYPE_STRING) {
        /* A single path is a list of one. */
        const char *p = config_setting_get_string(s);
        if (list_push(&l, k, k->path, p, strlen(p), e))
            goto fail;
    } else if (t == CONFIG_TYPE_ARRAY || t == CONFIG_TYPE_LIST) {
        int n = config_setting_length(s);
        for (int i = 0; i < n; i++) {
            const config_setting_t *x = config_setting_get_elem(s, (unsigned)i);
            char what[96];
            snprintf(what, sizeof what, "%s[%d]", k->path, i);
            if (config_setting_type(x) != CONFIG_TYPE_STRING) {
                wrong_type(k, what, "a string (a path)", x, e);
                goto fail;
            }
            const char *p = config_setting_get_string(x);
            if (list_push(&l, k, what, p, strlen(p), e))
                goto fail;
        }
    } else {
        return wrong_type(k, k->path, "a list of paths like [\"a.fa.gz\"]", s, e);
    }
    return list_store(k, cfg, &l, e);
fail:
    free(l.items);
    return -1;
}

/* ( { store = "A"; weight = 0.7; }, ... ) */
static int set_blend_setting(const config_key *k, moe_config *cfg, const config_setting_t *s,
                             moe_err *e)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY)
        return wrong_type(k, k->path, "a list like ( { store = \"A\"; weight = 0.7; } )", s, e);
    int n = config_setting_length(s), rc = 0;
    moe_blend_entry *v = calloc((size_t)(n ? n : 1), sizeof *v);
    if (!v)
        return moe_errf(e, "%s: out of memory", k->path);
    for (int i = 0; i < n && !rc; i++) {
        const config_setting_t *x = config_setting_get_elem(s, (unsigned)i);
        const char *store = NULL;
        double w = 0;
        int wi = 0;
        if (!config_setting_is_group(x))
            rc = moe_errf(e, "%s[%d]: expected a group { store = \"DIR\"; weight = W; }", k->path, i);
        else if (config_setting_length(x) != 2 || !config_setting_lookup_string(x, "store", &store) ||
                 !(config_setting_lookup_float(x, "weight", &w) ||
                   (config_setting_lookup_int(x, "weight", &wi) && (w = wi, 1))))
            rc = moe_errf(e, "%s[%d]: needs exactly store (a string) and weight (a number)",
                          k->path, i);
        else
            rc = blend_entry(k, &v[i], i, store, strlen(store), w, e);
    }
    if (!rc)
        rc = blend_store(k, cfg, v, n, e);
    free(v);
    return rc;
}

int config_key_set_setting(const config_key *k, moe_config *cfg, const config_setting_t *s,
                           moe_err *e)
{
    switch (k->type) {
    case KEY_INT:
    case KEY_U64: {
        if (!is_integer(s))
            return wrong_type(k, k->path, "an integer", s, e);
        long long v = config_setting_get_int64(s);
        if (check_int(k, v, e))
            return -1;
        if (k->type == KEY_INT)
            *(int *)field(cfg, k->offset) = (int)v;
        else
            *(uint64_t *)field(cfg, k->offset) = (uint64_t)v;
        return 0;
    }
    case KEY_FLOAT: {
        double v = 0;
        if (setting_double(k, k->path, s, &v, e))
            return -1;
        *(double *)field(cfg, k->offset) = v;
        return 0;
    }
    case KEY_BOOL:
        if (config_setting_type(s) != CONFIG_TYPE_BOOL)
            return wrong_type(k, k->path, "a bool (true or false)", s, e);
        *(int *)field(cfg, k->offset) = config_setting_get_bool(s) ? 1 : 0;
        return 0;
    case KEY_STRING:
    case KEY_ENUM:
        if (config_setting_type(s) != CONFIG_TYPE_STRING)
            return wrong_type(k, k->path, "a string", s, e);
        return config_key_set_text(k, cfg, config_setting_get_string(s), e);
    case KEY_FLOAT_PAIR:
        return set_pair_setting(k, cfg, s, e);
    case KEY_STRING_LIST:
        return set_list_setting(k, cfg, s, e);
    case KEY_BLEND:
        return set_blend_setting(k, cfg, s, e);
    }
    return moe_errf(e, "%s: key of unknown type %d", k->path, (int)k->type);
}

/* ---- checks of stored values ----------------------------------------- */

int config_key_check(const config_key *k, const moe_config *cfg, moe_err *e)
{
    const void *p = cfield(cfg, k->offset);
    switch (k->type) {
    case KEY_INT:
        return check_int(k, *(const int *)p, e);
    case KEY_U64:
        if (*(const uint64_t *)p > (uint64_t)k->imax) {
            char text[32];
            snprintf(text, sizeof text, "%" PRIu64, *(const uint64_t *)p);
            return out_of_range(k, k->path, text, e);
        }
        return 0;
    case KEY_FLOAT:
        return check_float(k, k->path, *(const double *)p, e);
    case KEY_BOOL: {
        int v = *(const int *)p;
        if (v != 0 && v != 1)
            return moe_errf(e, "%s = %d is not a bool (0 or 1)", k->path, v);
        return 0;
    }
    case KEY_STRING:
        if (!memchr(p, '\0', k->size))
            return moe_errf(e, "%s is not a terminated string", k->path);
        return 0;
    case KEY_FLOAT_PAIR: {
        char what[96];
        snprintf(what, sizeof what, "%s[0]", k->path);
        if (check_float(k, what, *(const double *)p, e))
            return -1;
        snprintf(what, sizeof what, "%s[1]", k->path);
        return check_float(k, what, *(const double *)cfield(cfg, k->offset2), e);
    }
    case KEY_STRING_LIST: {
        int n = *(const int *)cfield(cfg, k->offset2);
        const char *const *files;
        memcpy(&files, p, sizeof files);
        if (n < k->imin)
            return moe_errf(e, "%s is empty: name at least one FASTA file", k->path);
        for (int i = 0; i < n; i++)
            if (!files[i][0])
                return moe_errf(e, "%s[%d] is an empty path", k->path, i);
        return 0;
    }
    case KEY_BLEND: {
        int n = *(const int *)cfield(cfg, k->offset2);
        const moe_blend_entry *v;
        memcpy(&v, p, sizeof v);
        for (int i = 0; i < n; i++)
            if (!v[i].store[0] || !(v[i].weight > 0))
                return moe_errf(e, "%s[%d]: needs a store path and a weight > 0", k->path, i);
        return 0;
    }
    case KEY_ENUM: {
        int v;
        memcpy(&v, p, sizeof v);
        int n = 0;
        while (k->choices[n])
            n++;
        if (v < 0 || v >= n)
            return moe_errf(e, "%s = %d is not a valid choice", k->path, v);
        return 0;
    }
    }
    return moe_errf(e, "%s: key of unknown type %d", k->path, (int)k->type);
}

/* ---- writing --------------------------------------------------------- */

/* The shortest text that reads back as exactly v, always recognisable by
 * libconfig as a float (so "1" is written "1.0"). */
static void format_double(double v, char *buf, size_t size)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".eEni"))
        strncat(buf, ".0", size - strlen(buf) - 1);
}

static void write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (*c < 0x20 || *c == 0x7f)
                fprintf(f, "\\x%02x", *c);
            else
                fputc(*c, f);
        }
    }
    fputc('"', f);
}

int config_key_write_value(const config_key *k, const moe_config *cfg, FILE *f)
{
    const void *p = cfield(cfg, k->offset);
    char a[40], b[40];
    switch (k->type) {
    case KEY_INT:
        return fprintf(f, "%d", *(const int *)p) < 0 ? -1 : 0;
    case KEY_U64:
        /* L: a 64-bit literal, or libconfig would truncate it to 32 bits. */
        return fprintf(f, "%" PRIu64 "L", *(const uint64_t *)p) < 0 ? -1 : 0;
    case KEY_FLOAT:
        format_double(*(const double *)p, a, sizeof a);
        return fputs(a, f) < 0 ? -1 : 0;
    case KEY_BOOL:
        return fputs(*(const int *)p ? "true" : "false", f) < 0 ? -1 : 0;
    case KEY_STRING:
        write_string(f, p);
        return ferror(f) ? -1 : 0;
    case KEY_ENUM: {
        int v;
        memcpy(&v, p, sizeof v);
        write_string(f, k->choices[v]);
        return ferror(f) ? -1 : 0;
    }
    case KEY_FLOAT_PAIR:
        format_double(*(const double *)p, a, sizeof a);
        format_double(*(const double *)cfield(cfg, k->offset2), b, sizeof b);
        return fprintf(f, "[%s, %s]", a, b) < 0 ? -1 : 0;
    case KEY_STRING_LIST: {
        int n = *(const int *)cfield(cfg, k->offset2);
        const char *const *files;
        memcpy(&files, p, sizeof files);
        fputc('[', f);
        for (int i = 0; i < n; i++) {
            if (i)
                fputs(", ", f);
            write_string(f, files[i]);
        }
        fputc(']', f);
        return ferror(f) ? -1 : 0;
    }
    case KEY_BLEND: {
        int n = *(const int *)cfield(cfg, k->offset2);
        const moe_blend_entry *v;
        memcpy(&v, p, sizeof v);
        fputc('(', f);
        for (int i = 0; i < n; i++) {
            format_double(v[i].weight, a, sizeof a);
            fputs(i ? ", { store = " : " { store = ", f);
            write_string(f, v[i].store);
            fprintf(f, "; weight = %s; }", a);
        }
        fputs(n ? " )" : ")", f);
        return ferror(f) ? -1 : 0;
    }
    }
    return -1;
}

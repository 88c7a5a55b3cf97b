#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"
#include "../numerics/half.h"
#include "json.h"

/* The file format is little-endian; so are the machines moekit runs on.
 * Reading F32 straight into the caller's buffer depends on it. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

struct st_file {
    char *path;
    int fd;
    json_doc *header; /* owns the names and metadata strings */
    st_info *tensors; /* sorted by name */
    int n;
    st_meta *meta;
    int n_meta;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_NUM_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1},        [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1},  [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_F8_E8M0] = {"F8_E8M0", 1},  [ST_I16] = {"I16", 2},   [ST_U16] = {"U16", 2},
    [ST_F16] = {"F16", 2},          [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},          [ST_F32] = {"F32", 4},   [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8},          [ST_U64] = {"U64", 8},
};

/* Valid in the format but not byte-addressable (packed sub-byte) or not
 * used by moekit: named so the error says "not supported", not "unknown". */
static const char *const unsupported_dtypes[] = {"F4", "F6_E2M3", "F6_E3M2", "C64"};

size_t st_dtype_size(st_dtype t) { return (unsigned)t < ST_NUM_DTYPES ? dtypes[t].size : 0; }
const char *st_dtype_name(st_dtype t) { return (unsigned)t < ST_NUM_DTYPES ? dtypes[t].name : "?"; }

int st_dtype_parse(const char *name, st_dtype *out)
{
    for (int i = 0; i < ST_NUM_DTYPES; i++) {
        if (strcmp(name, dtypes[i].name) == 0) {
            *out = (st_dtype)i;
            return 0;
        }
    }
    return -1;
}

static void format_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

/* numel and bytes of a shape, 0 on success, -1 when either overflows int64. */
static int shape_size(int ndim, const int64_t *shape, size_t elem, int64_t *numel, uint64_t *nbytes)
{
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        if (shape[i] != 0 && count > INT64_MAX / shape[i])
            return -1;
        count *= shape[i];
    }
    if (count > INT64_MAX / (int64_t)elem)
        return -1;
    *numel = count;
    *nbytes = (uint64_t)count * elem;
    return 0;
}

/* ---- reader --------------------------------------------------------------- */

void st_close(st_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    json_free(f->header);
    free(f->tensors);
    free(f->meta);
    free(f->path);
    free(f);
}

const char *st_path(const st_file *f) { return f->path; }
int st_count(const st_file *f) { return f->n; }
int st_meta_count(const st_file *f) { return f->n_meta; }

const st_info *st_tensor_info(const st_file *f, int index)
{
    return index >= 0 && index < f->n ? &f->tensors[index] : NULL;
}

const st_meta *st_meta_at(const st_file *f, int index)
{
    return index >= 0 && index < f->n_meta ? &f->meta[index] : NULL;
}

const char *st_meta_get(const st_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

int st_find(const st_file *f, const char *name)
{
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int parse_metadata(st_file *f, const json_value *v, moe_err *e)
{
    if (v->type == JSON_NULL)
        return 0;
    if (v->type != JSON_OBJECT)
        return moe_errf(e, "%s: __metadata__ must be an object of strings, got %s", f->path,
                        json_type_name(v->type));
    f->meta = calloc(v->obj.n ? v->obj.n : 1, sizeof *f->meta);
    if (!f->meta)
        return moe_errf(e, "%s: out of memory", f->path);
    for (size_t i = 0; i < v->obj.n; i++) {
        const json_member *m = &v->obj.members[i];
        if (m->value.type != JSON_STRING)
            return moe_errf(e, "%s: __metadata__ \"%.200s\" must be a string, got %s", f->path, m->key,
                            json_type_name(m->value.type));
        f->meta[i].key = m->key;
        f->meta[i].value = m->value.str.s;
    }
    f->n_meta = (int)v->obj.n;
    return 0;
}

static int get_u64(const json_value *v, uint64_t *out)
{
    if (v->type != JSON_NUMBER || !v->num.is_integer || v->num.integer < 0)
        return -1;
    *out = (uint64_t)v->num.integer;
    return 0;
}

/* One header entry -> info (offset still relative to the data buffer). */
static int parse_entry(const st_file *f, const json_member *m, uint64_t data_size, st_info *t,
                       uint64_t *begin_out, moe_err *e)
{
    const char *name = m->key;
    if (strlen(name) != m->key_len)
        return moe_errf(e, "%s: tensor \"%.200s\": name contains a NUL byte", f->path, name);
    const json_value *v = &m->value;
    if (v->type != JSON_OBJECT)
        return moe_errf(e, "%s: tensor \"%.200s\": entry must be an object with dtype, shape and data_offsets, got %s",
                        f->path, name, json_type_name(v->type));
    const json_value *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (size_t i = 0; i < v->obj.n; i++) {
        const json_member *k = &v->obj.members[i];
        if (strcmp(k->key, "dtype") == 0)
            dtype = &k->value;
        else if (strcmp(k->key, "shape") == 0)
            shape = &k->value;
        else if (strcmp(k->key, "data_offsets") == 0)
            offsets = &k->value;
        else
            return moe_errf(e, "%s: tensor \"%.200s\": unknown field \"%.100s\" (expected dtype, shape, data_offsets)",
                            f->path, name, k->key);
    }
    if (!dtype || !shape || !offsets)
        return moe_errf(e, "%s: tensor \"%.200s\": missing \"%s\"", f->path, name,
                        !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

    t->name = name;
    if (dtype->type != JSON_STRING)
        return moe_errf(e, "%s: tensor \"%.200s\": dtype must be a string, got %s", f->path, name,
                        json_type_name(dtype->type));
    if (st_dtype_parse(dtype->str.s, &t->dtype) != 0) {
        for (size_t i = 0; i < sizeof unsupported_dtypes / sizeof *unsupported_dtypes; i++)
            if (strcmp(dtype->str.s, unsupported_dtypes[i]) == 0)
                return moe_errf(e, "%s: tensor \"%.200s\": dtype %s is not supported by moekit", f->path, name,
                                dtype->str.s);
        return moe_errf(e, "%s: tensor \"%.200s\": unknown dtype \"%.40s\"", f->path, name, dtype->str.s);
    }

    if (shape->type != JSON_ARRAY)
        return moe_errf(e, "%s: tensor \"%.200s\": shape must be a list of non-negative integers, got %s", f->path,
                        name, json_type_name(shape->type));
    if (shape->arr.n > ST_MAX_DIMS)
        return moe_errf(e, "%s: tensor \"%.200s\": rank %zu is over moekit's limit of %d dimensions", f->path, name,
                        shape->arr.n, ST_MAX_DIMS);
    t->ndim = (int)shape->arr.n;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d;
        if (get_u64(&shape->arr.items[i], &d) != 0)
            return moe_errf(e, "%s: tensor \"%.200s\": shape[%d] must be a non-negative integer", f->path, name, i);
        t->shape[i] = (int64_t)d;
    }
    char shp[160];
    format_shape(shp, sizeof shp, t->ndim, t->shape);
    if (shape_size(t->ndim, t->shape, st_dtype_size(t->dtype), &t->numel, &t->nbytes) != 0)
        return moe_errf(e, "%s: tensor \"%.200s\": shape %s has more bytes than a 64-bit size can hold", f->path,
                        name, shp);

    uint64_t begin, end;
    if (offsets->type != JSON_ARRAY || offsets->arr.n != 2 || get_u64(&offsets->arr.items[0], &begin) != 0 ||
        get_u64(&offsets->arr.items[1], &end) != 0)
        return moe_errf(e, "%s: tensor \"%.200s\": data_offsets must be [begin, end] with non-negative integers",
                        f->path, name);
    if (begin > end)
        return moe_errf(e, "%s: tensor \"%.200s\": data_offsets [%llu, %llu] begin after end", f->path, name,
                        (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return moe_errf(e, "%s: tensor \"%.200s\": data_offsets [%llu, %llu] run past the data buffer (%llu bytes)",
                        f->path, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)data_size);
    if (end - begin != t->nbytes)
        return moe_errf(e, "%s: tensor \"%.200s\": data_offsets [%llu, %llu] span %llu bytes but %s %s needs %llu",
                        f->path, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)(end - begin), dtypes[t->dtype].name, shp,
                        (unsigned long long)t->nbytes);
    *begin_out = begin;
    return 0;
}

typedef struct {
    uint64_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_info_name(const void *a, const void *b)
{
    return strcmp(((const st_info *)a)->name, ((const st_info *)b)->name);
}

/* The tensors must tile [0, data_size) exactly: no overlap, no hole, nothing
 * after the last one (the reference reader refuses all three too). */
static int check_tiling(const st_file *f, uint64_t data_start, uint64_t data_size, moe_err *e)
{
    if (f->n == 0) {
        if (data_size != 0)
            return moe_errf(e, "%s: %llu bytes of data after a header that lists no tensors", f->path,
                            (unsigned long long)data_size);
        return 0;
    }
    span *s = malloc((size_t)f->n * sizeof *s);
    if (!s)
        return moe_errf(e, "%s: out of memory", f->path);
    for (int i = 0; i < f->n; i++) {
        s[i].begin = f->tensors[i].offset - data_start;
        s[i].end = s[i].begin + f->tensors[i].nbytes;
        s[i].name = f->tensors[i].name;
    }
    qsort(s, (size_t)f->n, sizeof *s, cmp_span);
    int rc = 0;
    uint64_t expect = 0;
    for (int i = 0; i < f->n && rc == 0; i++) {
        if (s[i].begin < expect)
            rc = moe_errf(e, "%s: tensor \"%.200s\" (bytes [%llu, %llu)) overlaps tensor \"%.200s\" (bytes [%llu, %llu))",
                          f->path, s[i].name, (unsigned long long)s[i].begin, (unsigned long long)s[i].end,
                          s[i - 1].name, (unsigned long long)s[i - 1].begin, (unsigned long long)s[i - 1].end);
        else if (s[i].begin > expect)
            rc = moe_errf(e, "%s: bytes [%llu, %llu) of the data buffer belong to no tensor (the next is \"%.200s\")",
                          f->path, (unsigned long long)expect, (unsigned long long)s[i].begin, s[i].name);
        expect = s[i].end;
    }
    if (rc == 0 && expect != data_size)
        rc = moe_errf(e, "%s: the last %llu bytes of the file belong to no tensor", f->path,
                      (unsigned long long)(data_size - expect));
    free(s);
    return rc;
}

static int load_header(st_file *f, moe_err *e)
{
    f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return moe_err_errno(e, errno, "%s", f->path);
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return moe_err_errno(e, errno, "%s: stat", f->path);
    if (!S_ISREG(st.st_mode))
        return moe_errf(e, "%s: not a regular file", f->path);
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8)
        return moe_errf(e, "%s: file is %llu bytes, too short for a safetensors file (8-byte header length first)",
                        f->path, (unsigned long long)size);
    unsigned char lenbuf[8];
    if (fsio_pread_full(f->fd, lenbuf, 8, 0) != 8)
        return moe_err_errno(e, errno, "%s: read header length", f->path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | lenbuf[i];
    if (n > ST_MAX_HEADER_BYTES)
        return moe_errf(e, "%s: header length %llu is over the %llu-byte limit (corrupt, or not a safetensors file)",
                        f->path, (unsigned long long)n, (unsigned long long)ST_MAX_HEADER_BYTES);
    if (n > size - 8)
        return moe_errf(e, "%s: header length %llu runs past the end of the file (%llu bytes)", f->path,
                        (unsigned long long)n, (unsigned long long)size);
    if (n < 2)
        return moe_errf(e, "%s: header length %llu is too short for a JSON object", f->path, (unsigned long long)n);
    char *text = malloc(n);
    if (!text)
        return moe_errf(e, "%s: out of memory for a %llu-byte header", f->path, (unsigned long long)n);
    if (fsio_pread_full(f->fd, text, n, 8) != (ssize_t)n) {
        free(text);
        return moe_err_errno(e, errno, "%s: read header", f->path);
    }
    int rc = 0;
    if (text[0] != '{')
        rc = moe_errf(e, "%s: header does not start with '{' (not a safetensors file?)", f->path);
    json_limits lim = {(size_t)n, 8};
    if (rc == 0 && json_parse(text, n, &lim, &f->header, e) != 0)
        rc = moe_err_prefix(e, "%s: header", f->path);
    free(text);
    if (rc != 0)
        return -1;

    const json_value *root = json_root(f->header);
    if (root->type != JSON_OBJECT)
        return moe_errf(e, "%s: header must be a JSON object", f->path);
    uint64_t data_start = 8 + n, data_size = size - data_start;
    f->tensors = calloc(root->obj.n ? root->obj.n : 1, sizeof *f->tensors);
    if (!f->tensors)
        return moe_errf(e, "%s: out of memory", f->path);
    for (size_t i = 0; i < root->obj.n; i++) {
        const json_member *m = &root->obj.members[i];
        if (strcmp(m->key, "__metadata__") == 0 && m->key_len == strlen("__metadata__")) {
            if (parse_metadata(f, &m->value, e) != 0)
                return -1;
            continue;
        }
        st_info *t = &f->tensors[f->n];
        uint64_t begin = 0;
        if (parse_entry(f, m, data_size, t, &begin, e) != 0)
            return -1;
        t->offset = data_start + begin;
        f->n++;
    }
    if (check_tiling(f, data_start, data_size, e) != 0)
        return -1;
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_info_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return moe_errf(e, "%s: tensor \"%.200s\" is listed twice", f->path, f->tensors[i].name);
    return 0;
}

int st_open(const char *path, st_file **out, moe_err *e)
{
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return moe_errf(e, "%s: out of memory", path);
    }
    f->fd = -1;
    if (load_header(f, e) != 0) {
        st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

static const st_info *lookup(const st_file *f, const char *name, moe_err *e)
{
    int i = st_find(f, name);
    if (i < 0) {
        moe_errf(e, "%s: no tensor named \"%.200s\" (the file has %d)", f->path, name, f->n);
        return NULL;
    }
    return &f->tensors[i];
}

static int read_bytes(const st_file *f, const st_info *t, void *dst, uint64_t n, uint64_t at, moe_err *e)
{
    ssize_t r = fsio_pread_full(f->fd, dst, (size_t)n, (off_t)at);
    if (r < 0)
        return moe_err_errno(e, errno, "%s: tensor \"%.200s\": read", f->path, t->name);
    if ((uint64_t)r != n)
        return moe_errf(e, "%s: tensor \"%.200s\": file ended early (truncated after it was opened?)", f->path,
                        t->name);
    return 0;
}

int st_read_raw(st_file *f, const char *name, void *dst, size_t dst_bytes, moe_err *e)
{
    const st_info *t = lookup(f, name, e);
    if (!t)
        return -1;
    if (dst_bytes != t->nbytes)
        return moe_errf(e, "%s: tensor \"%.200s\" is %llu bytes, the buffer %zu", f->path, name,
                        (unsigned long long)t->nbytes, dst_bytes);
    return t->nbytes ? read_bytes(f, t, dst, t->nbytes, t->offset, e) : 0;
}

int st_read_f32(st_file *f, const char *name, int ndim, const int64_t *shape, float *dst, moe_err *e)
{
    const st_info *t = lookup(f, name, e);
    if (!t)
        return -1;
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char have[160], want[160];
        format_shape(have, sizeof have, t->ndim, t->shape);
        format_shape(want, sizeof want, ndim > ST_MAX_DIMS ? ST_MAX_DIMS : (ndim < 0 ? 0 : ndim), shape);
        return moe_errf(e, "%s: tensor \"%.200s\" has shape %s, expected %s", f->path, name, have, want);
    }
    if (t->dtype == ST_F32)
        return t->nbytes ? read_bytes(f, t, dst, t->nbytes, t->offset, e) : 0;
    if (t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F64)
        return moe_errf(e, "%s: tensor \"%.200s\" is %s; only F32, BF16, F16 and F64 convert to fp32", f->path, name,
                        dtypes[t->dtype].name);
    /* Convert through a bounded buffer rather than a full-size copy. */
    enum { CHUNK = 64 << 10 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf)
        return moe_errf(e, "%s: out of memory", f->path);
    size_t es = dtypes[t->dtype].size, per = CHUNK / es;
    int rc = 0;
    for (int64_t done = 0; done < t->numel && rc == 0;) {
        size_t k = (size_t)(t->numel - done) < per ? (size_t)(t->numel - done) : per;
        rc = read_bytes(f, t, buf, k * es, t->offset + (uint64_t)done * es, e);
        for (size_t i = 0; rc == 0 && i < k; i++) {
            if (t->dtype == ST_BF16) {
                uint16_t h;
                memcpy(&h, buf + 2 * i, 2);
                dst[done + (int64_t)i] = bf16_to_f32(h);
            } else if (t->dtype == ST_F16) {
                uint16_t h;
                memcpy(&h, buf + 2 * i, 2);
                dst[done + (int64_t)i] = f16_to_f32(h);
            } else {
                double d;
                memcpy(&d, buf + 8 * i, 8);
                dst[done + (int64_t)i] = (float)d;
            }
        }
        done += (int64_t)k;
    }
    free(buf);
    return rc;
}

/* ---- writer --------------------------------------------------------------- */

typedef struct {
    const st_tensor *t;
    int64_t numel;
    uint64_t nbytes, begin;
} plan_entry;

static int cmp_plan_name(const void *a, const void *b)
{
    return strcmp(((const plan_entry *)a)->t->name, ((const plan_entry *)b)->t->name);
}

/* Largest elements first keeps every tensor aligned to its element size. */
static int cmp_plan_layout(const void *a, const void *b)
{
    const plan_entry *x = a, *y = b;
    size_t sx = st_dtype_size(x->t->dtype), sy = st_dtype_size(y->t->dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

static int cmp_meta_key(const void *a, const void *b)
{
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

static int check_tensor(const char *path, int i, const st_tensor *t, plan_entry *p, int need_data, moe_err *e)
{
    if (!t->name || !t->name[0])
        return moe_errf(e, "%s: tensor #%d has no name", path, i);
    if (strcmp(t->name, "__metadata__") == 0)
        return moe_errf(e, "%s: \"__metadata__\" is reserved and cannot name a tensor", path);
    if ((unsigned)t->dtype >= ST_NUM_DTYPES)
        return moe_errf(e, "%s: tensor \"%.200s\": invalid dtype %d", path, t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
        return moe_errf(e, "%s: tensor \"%.200s\": rank %d is outside 0..%d", path, t->name, t->ndim, ST_MAX_DIMS);
    if (shape_size(t->ndim, t->shape, st_dtype_size(t->dtype), &p->numel, &p->nbytes) != 0) {
        char shp[160];
        format_shape(shp, sizeof shp, t->ndim, t->shape);
        return moe_errf(e, "%s: tensor \"%.200s\": shape %s has a negative dimension or overflows", path, t->name,
                        shp);
    }
    if (t->data_is_f32 && t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return moe_errf(e, "%s: tensor \"%.200s\": fp32 data converts only to F32, BF16 or F16, not %s", path,
                        t->name, st_dtype_name(t->dtype));
    if (need_data && p->nbytes && !t->data)
        return moe_errf(e, "%s: tensor \"%.200s\": data is NULL", path, t->name);
    p->t = t;
    return 0;
}

static int build_header(const char *path, plan_entry *plan, int n, const st_meta *meta, int n_meta,
                        json_writer *w, moe_err *e)
{
    jw_init(w, 0);
    jw_object_begin(w);
    if (n_meta > 0) {
        jw_key(w, "__metadata__");
        jw_object_begin(w);
        for (int i = 0; i < n_meta; i++) {
            jw_key(w, meta[i].key);
            jw_string(w, meta[i].value);
        }
        jw_object_end(w);
    }
    for (int i = 0; i < n; i++) {
        const st_tensor *t = plan[i].t;
        jw_key(w, t->name);
        jw_object_begin(w);
        jw_key(w, "dtype");
        jw_string(w, st_dtype_name(t->dtype));
        jw_key(w, "shape");
        jw_array_begin(w);
        for (int d = 0; d < t->ndim; d++)
            jw_int(w, t->shape[d]);
        jw_array_end(w);
        jw_key(w, "data_offsets");
        jw_array_begin(w);
        jw_int(w, (int64_t)plan[i].begin);
        jw_int(w, (int64_t)(plan[i].begin + plan[i].nbytes));
        jw_array_end(w);
        jw_object_end(w);
    }
    jw_object_end(w);
    /* Spaces are JSON whitespace: pad so the data starts 8-aligned. */
    while ((8 + w->len) % 8)
        jw_raw(w, " ", 1);
    if (jw_finish(w, e) != 0)
        return moe_err_prefix(e, "%s", path);
    if (w->len > ST_MAX_HEADER_BYTES)
        return moe_errf(e, "%s: header would be %zu bytes, over the %llu-byte limit readers accept", path, w->len,
                        (unsigned long long)ST_MAX_HEADER_BYTES);
    return 0;
}

static int write_tensor_data(int fd, const plan_entry *p)
{
    const st_tensor *t = p->t;
    if (!t->data_is_f32 || t->dtype == ST_F32)
        return fsio_write_full(fd, t->data, (size_t)p->nbytes);
    enum { PER = 32 << 10 };
    uint16_t buf[PER];
    const float *src = t->data;
    for (int64_t done = 0; done < p->numel;) {
        size_t k = (size_t)(p->numel - done) < PER ? (size_t)(p->numel - done) : PER;
        for (size_t i = 0; i < k; i++)
            buf[i] = t->dtype == ST_BF16 ? f32_to_bf16(src[done + (int64_t)i]) : f32_to_f16(src[done + (int64_t)i]);
        if (fsio_write_full(fd, buf, k * 2) != 0)
            return -1;
        done += (int64_t)k;
    }
    return 0;
}

int st_write(const char *path, const st_tensor *tensors, int n, const st_meta *meta, int n_meta, moe_err *e)
{
    if (n < 0 || n_meta < 0 || (n > 0 && !tensors) || (n_meta > 0 && !meta))
        return moe_errf(e, "%s: invalid tensor or metadata list", path);
    plan_entry *plan = calloc(n ? (size_t)n : 1, sizeof *plan);
    st_meta *msorted = calloc(n_meta ? (size_t)n_meta : 1, sizeof *msorted);
    json_writer w;
    jw_init(&w, 0);
    int fd = -1, rc = -1, created = 0;
    if (!plan || !msorted) {
        moe_errf(e, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (check_tensor(path, i, &tensors[i], &plan[i], 1, e) != 0)
            goto done;
    qsort(plan, (size_t)n, sizeof *plan, cmp_plan_name);
    for (int i = 1; i < n; i++) {
        if (strcmp(plan[i - 1].t->name, plan[i].t->name) == 0) {
            moe_errf(e, "%s: two tensors are named \"%.200s\"", path, plan[i].t->name);
            goto done;
        }
    }
    for (int i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value) {
            moe_errf(e, "%s: metadata entry #%d has a NULL key or value", path, i);
            goto done;
        }
        msorted[i] = meta[i];
    }
    qsort(msorted, (size_t)n_meta, sizeof *msorted, cmp_meta_key);
    for (int i = 1; i < n_meta; i++) {
        if (strcmp(msorted[i - 1].key, msorted[i].key) == 0) {
            moe_errf(e, "%s: metadata key \"%.200s\" given twice", path, msorted[i].key);
            goto done;
        }
    }

    /* Offsets follow the layout order; the header then lists names sorted. */
    qsort(plan, (size_t)n, sizeof *plan, cmp_plan_layout);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        plan[i].begin = off;
        off += plan[i].nbytes;
    }
    qsort(plan, (size_t)n, sizeof *plan, cmp_plan_name);
    if (build_header(path, plan, n, msorted, n_meta, &w, e) != 0)
        goto done;

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        moe_err_errno(e, errno, "%s: create", path);
        goto done;
    }
    created = 1;
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)w.len >> (8 * i));
    if (fsio_write_full(fd, lenbuf, 8) != 0 || fsio_write_full(fd, w.buf, w.len) != 0) {
        moe_err_errno(e, errno, "%s: write header", path);
        goto done;
    }
    qsort(plan, (size_t)n, sizeof *plan, cmp_plan_layout);
    for (int i = 0; i < n; i++) {
        if (write_tensor_data(fd, &plan[i]) != 0) {
            moe_err_errno(e, errno, "%s: write tensor \"%.200s\"", path, plan[i].t->name);
            goto done;
        }
    }
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0) {
        moe_err_errno(e, errno, "%s: close", path);
        goto done;
    }
    rc = 0;
done:
    if (fd >= 0)
        close(fd);
    if (rc != 0 && created)
        unlink(path); /* never leave a partial file that looks like a tensor file */
    jw_free(&w);
    free(plan);
    free(msorted);
    return rc;
}

int st_header_make(const char *path, const st_tensor *tensors, int n, const st_meta *meta, int n_meta,
                   char **header, size_t *len, uint64_t *data_bytes, moe_err *e)
{
    *header = NULL;
    plan_entry *plan = calloc(n ? (size_t)n : 1, sizeof *plan);
    if (!plan)
        return moe_errf(e, "%s: out of memory", path);
    json_writer w;
    jw_init(&w, 0);
    int rc = 0;
    uint64_t off = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = check_tensor(path, i, &tensors[i], &plan[i], 0, e);
        plan[i].begin = off; /* in the caller's order */
        off += plan[i].nbytes;
    }
    if (!rc) {
        qsort(plan, (size_t)n, sizeof *plan, cmp_plan_name);
        for (int i = 1; i < n && !rc; i++)
            if (strcmp(plan[i - 1].t->name, plan[i].t->name) == 0)
                rc = moe_errf(e, "%s: two tensors are named \"%.200s\"", path, plan[i].t->name);
    }
    if (!rc)
        rc = build_header(path, plan, n, meta, n_meta, &w, e);
    free(plan);
    if (rc) {
        jw_free(&w);
        return -1;
    }
    char *h = malloc(8 + w.len);
    if (!h) {
        jw_free(&w);
        return moe_errf(e, "%s: out of memory", path);
    }
    for (int i = 0; i < 8; i++)
        h[i] = (char)((uint64_t)w.len >> (8 * i));
    memcpy(h + 8, w.buf, w.len);
    *header = h;
    *len = 8 + w.len;
    *data_bytes = off;
    jw_free(&w);
    return 0;
}

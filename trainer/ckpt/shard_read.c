/* moekit checkpoints: slices from a checkpoint in any layout (shard_read.h). */
#include "shard_read.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"
#include "../numerics/half.h"
#include "hashed_file.h"
#include "hf_dir.h"
#include "json.h"

typedef struct {
    char *name;
    int fd;
    uint64_t size;
    sha256_hexbuf *blocks; /* NULL: not block-hashed (verified by MANIFEST) */
    int n_blocks;
} sfile;

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t start, count, offset;
    int file;
} spiece;

struct shard_set {
    char dir[4096];
    uint64_t block_bytes;
    sfile *files;
    int n_files, cap_files;
    spiece *pieces;
    int n_pieces, cap_pieces;
    shard_tensor *tensors; /* distinct names, sorted; first piece of each in first[] */
    int *first, *n_of;
    int n_tensors;
    uint8_t *block_buf;    /* one verified block, cached */
    int cached_file;
    uint64_t cached_block;
    uint64_t bytes_read;
};

/* ---- building the set ------------------------------------------------------ */

static int add_file(shard_set *s, const char *name, moe_err *e)
{
    if (s->n_files == s->cap_files) {
        int cap = s->cap_files ? 2 * s->cap_files : 16;
        sfile *f = realloc(s->files, (size_t)cap * sizeof *f);
        if (!f)
            return moe_errf(e, "%s: out of memory", s->dir);
        s->files = f;
        s->cap_files = cap;
    }
    if (strchr(name, '/') || !strcmp(name, "..") || !name[0])
        return moe_errf(e, "%s: \"%.200s\" is not a file name in the directory", s->dir, name);
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    sfile *f = &s->files[s->n_files];
    memset(f, 0, sizeof *f);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return moe_err_errno(e, errno, "%s", path);
    struct stat st;
    if (fstat(f->fd, &st) != 0) {
        int err = errno;
        close(f->fd);
        return moe_err_errno(e, err, "%s: stat", path);
    }
    f->size = (uint64_t)st.st_size;
    if (!(f->name = strdup(name))) {
        close(f->fd);
        return moe_errf(e, "%s: out of memory", s->dir);
    }
    s->n_files++;
    return 0;
}

static int add_piece(shard_set *s, const spiece *p, moe_err *e)
{
    if (s->n_pieces == s->cap_pieces) {
        int cap = s->cap_pieces ? 2 * s->cap_pieces : 256;
        spiece *v = realloc(s->pieces, (size_t)cap * sizeof *v);
        if (!v)
            return moe_errf(e, "%s: out of memory", s->dir);
        s->pieces = v;
        s->cap_pieces = cap;
    }
    s->pieces[s->n_pieces] = *p;
    if (!(s->pieces[s->n_pieces].name = strdup(p->name)))
        return moe_errf(e, "%s: out of memory", s->dir);
    s->n_pieces++;
    return 0;
}

/* Every tensor of an opened safetensors file as one whole piece. */
static int add_st_file(shard_set *s, const char *name, moe_err *e)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    st_file *st;
    if (st_open(path, &st, e) || add_file(s, name, e))
        return st ? (st_close(st), -1) : -1;
    int rc = 0;
    for (int i = 0; i < st_count(st) && !rc; i++) {
        const st_info *t = st_tensor_info(st, i);
        spiece p = {(char *)t->name, t->dtype, t->ndim, {0}, 0, (uint64_t)t->numel, t->offset,
                    s->n_files - 1};
        memcpy(p.shape, t->shape, sizeof p.shape);
        rc = add_piece(s, &p, e);
    }
    st_close(st);
    return rc;
}

/* The shard files model.safetensors.index.json names, each once. */
static int add_hf_shards(shard_set *s, moe_err *e)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", s->dir, HF_INDEX_FILE);
    json_doc *doc;
    if (json_parse_file(path, NULL, &doc, e))
        return -1;
    const json_value *wm = json_get(json_root(doc), "weight_map");
    int rc = 0;
    if (!wm || wm->type != JSON_OBJECT)
        rc = moe_errf(e, "%s: no \"weight_map\" object", path);
    for (size_t i = 0; wm && wm->type == JSON_OBJECT && i < wm->obj.n && !rc; i++) {
        const json_value *v = &wm->obj.members[i].value;
        if (v->type != JSON_STRING) {
            rc = moe_errf(e, "%s:%d: a weight_map value is not a file name", path, v->line);
            break;
        }
        int seen = 0;
        for (int f = 0; f < s->n_files && !seen; f++)
            seen = !strcmp(s->files[f].name, v->str.s);
        if (!seen)
            rc = add_st_file(s, v->str.s, e);
    }
    json_free(doc);
    return rc;
}

static int get_u64(const json_value *o, const char *key, uint64_t *out)
{
    const json_value *v = json_get(o, key);
    if (!v || v->type != JSON_NUMBER || !v->num.is_integer || v->num.integer < 0)
        return -1;
    *out = (uint64_t)v->num.integer;
    return 0;
}

static int parse_piece(shard_set *s, const json_value *pv, const char *path, moe_err *e)
{
    const json_value *name = json_get(pv, "name"), *dt = json_get(pv, "dtype"),
                     *shape = json_get(pv, "shape");
    spiece p = {0};
    p.file = s->n_files - 1;
    if (!name || name->type != JSON_STRING || !dt || dt->type != JSON_STRING ||
        st_dtype_parse(dt->str.s, &p.dtype) || !shape || shape->type != JSON_ARRAY ||
        shape->arr.n > ST_MAX_DIMS || get_u64(pv, "start", &p.start) ||
        get_u64(pv, "count", &p.count) || get_u64(pv, "offset", &p.offset))
        return moe_errf(e, "%s:%d: malformed piece", path, pv->line);
    p.name = (char *)name->str.s;
    p.ndim = (int)shape->arr.n;
    uint64_t numel = 1;
    for (int d = 0; d < p.ndim; d++) {
        const json_value *x = &shape->arr.items[d];
        if (x->type != JSON_NUMBER || !x->num.is_integer || x->num.integer < 0)
            return moe_errf(e, "%s:%d: malformed shape", path, pv->line);
        p.shape[d] = x->num.integer;
        numel *= (uint64_t)x->num.integer;
    }
    uint64_t bytes = p.count * st_dtype_size(p.dtype);
    if (p.start + p.count > numel || p.offset + bytes > s->files[p.file].size ||
        p.offset + bytes < p.offset)
        return moe_errf(e, "%s:%d: piece of %s lies outside its tensor or beyond the end of %s",
                        path, pv->line, p.name, s->files[p.file].name);
    return add_piece(s, &p, e);
}

static int parse_file_entry(shard_set *s, const json_value *fv, const char *path, moe_err *e)
{
    const json_value *file = json_get(fv, "file"), *blocks = json_get(fv, "blocks"),
                     *pieces = json_get(fv, "pieces");
    uint64_t size;
    if (!file || file->type != JSON_STRING || get_u64(fv, "size", &size) || !blocks ||
        blocks->type != JSON_ARRAY || !pieces || pieces->type != JSON_ARRAY)
        return moe_errf(e, "%s:%d: malformed file entry", path, fv->line);
    if (add_file(s, file->str.s, e))
        return -1;
    sfile *f = &s->files[s->n_files - 1];
    if (f->size != size)
        return moe_errf(e, "%s/%s: %" PRIu64 " bytes, the index says %" PRIu64
                           " (truncated or replaced)", s->dir, f->name, f->size, size);
    uint64_t want = s->block_bytes ? (size + s->block_bytes - 1) / s->block_bytes : 0;
    if (blocks->arr.n != want)
        return moe_errf(e, "%s:%d: %zu block digests for %" PRIu64 " blocks", path, fv->line,
                        blocks->arr.n, want);
    f->blocks = calloc(want ? want : 1, sizeof *f->blocks);
    if (!f->blocks)
        return moe_errf(e, "%s: out of memory", path);
    f->n_blocks = (int)want;
    for (size_t b = 0; b < want; b++) {
        const json_value *h = &blocks->arr.items[b];
        if (h->type != JSON_STRING || h->str.len != SHA256_HEX_LEN)
            return moe_errf(e, "%s:%d: malformed block digest", path, h->line);
        memcpy(f->blocks[b], h->str.s, SHA256_HEX_LEN + 1);
    }
    for (size_t i = 0; i < pieces->arr.n; i++)
        if (parse_piece(s, &pieces->arr.items[i], path, e))
            return -1;
    return 0;
}

static int add_index(shard_set *s, moe_err *e)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", s->dir, CKPT_INDEX_FILE);
    json_doc *doc;
    json_limits lim = {(size_t)1 << 30, 0};
    if (json_parse_file(path, &lim, &doc, e))
        return -1;
    const json_value *root = json_root(doc), *fmt = json_get(root, "format"),
                     *files = json_get(root, "files");
    int rc = 0;
    if (!fmt || fmt->type != JSON_STRING || strcmp(fmt->str.s, CKPT_INDEX_FORMAT))
        rc = moe_errf(e, "%s: not a %s index", path, CKPT_INDEX_FORMAT);
    else if (get_u64(root, "block_bytes", &s->block_bytes) || s->block_bytes == 0 ||
             s->block_bytes > ((uint64_t)1 << 30) || !files || files->type != JSON_ARRAY)
        rc = moe_errf(e, "%s: missing or malformed block_bytes or files", path);
    for (size_t i = 0; !rc && i < files->arr.n; i++)
        rc = parse_file_entry(s, &files->arr.items[i], path, e);
    json_free(doc);
    if (!rc && !(s->block_buf = malloc(s->block_bytes)))
        rc = moe_errf(e, "%s: out of memory", path);
    return rc;
}

static int cmp_piece(const void *a, const void *b)
{
    const spiece *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->start > y->start) - (x->start < y->start);
}

/* Pieces sorted by (name, start); one shard_tensor per name, pieces of a
 * name agreeing on dtype and shape and not overlapping. */
static int index_tensors(shard_set *s, moe_err *e)
{
    if (s->n_pieces)
        qsort(s->pieces, (size_t)s->n_pieces, sizeof *s->pieces, cmp_piece);
    size_t n = (size_t)s->n_pieces + 1;
    s->tensors = calloc(n, sizeof *s->tensors);
    s->first = calloc(n, sizeof *s->first);
    s->n_of = calloc(n, sizeof *s->n_of);
    if (!s->tensors || !s->first || !s->n_of)
        return moe_errf(e, "%s: out of memory", s->dir);
    for (int i = 0; i < s->n_pieces; i++) {
        const spiece *p = &s->pieces[i], *q = i ? &s->pieces[i - 1] : NULL;
        if (q && !strcmp(p->name, q->name)) {
            if (p->dtype != q->dtype || p->ndim != q->ndim ||
                memcmp(p->shape, q->shape, sizeof p->shape) || q->start + q->count > p->start)
                return moe_errf(e, "%s: the pieces of %s disagree on dtype or shape, or overlap",
                                s->dir, p->name);
            s->n_of[s->n_tensors - 1]++;
            continue;
        }
        shard_tensor *t = &s->tensors[s->n_tensors];
        *t = (shard_tensor){p->name, p->dtype, p->ndim, {0}};
        memcpy(t->shape, p->shape, sizeof t->shape);
        s->first[s->n_tensors] = i;
        s->n_of[s->n_tensors++] = 1;
    }
    return 0;
}

int shard_set_open(const char *dir, shard_set **out, moe_err *e)
{
    *out = NULL;
    shard_set *s = calloc(1, sizeof *s);
    if (!s)
        return moe_errf(e, "%s: out of memory", dir);
    s->cached_file = -1;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    char path[4400];
    int rc;
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_INDEX_FILE);
    if (access(path, F_OK) == 0) {
        rc = add_index(s, e);
    } else {
        snprintf(path, sizeof path, "%s/%s", dir, HF_SINGLE_FILE);
        int single = access(path, F_OK) == 0;
        snprintf(path, sizeof path, "%s/%s", dir, HF_INDEX_FILE);
        if (single)
            rc = add_st_file(s, HF_SINGLE_FILE, e);
        else if (access(path, F_OK) == 0)
            rc = add_hf_shards(s, e);
        else
            rc = moe_errf(e, "%s: no %s, %s or %s", dir, CKPT_INDEX_FILE, HF_SINGLE_FILE,
                          HF_INDEX_FILE);
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        if (!rc && access(path, F_OK) == 0)
            rc = add_st_file(s, "optimizer.safetensors", e);
    }
    if (!rc)
        rc = index_tensors(s, e);
    if (rc) {
        shard_set_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void shard_set_close(shard_set *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_files; i++) {
        close(s->files[i].fd);
        free(s->files[i].name);
        free(s->files[i].blocks);
    }
    for (int i = 0; i < s->n_pieces; i++)
        free(s->pieces[i].name);
    free(s->files);
    free(s->pieces);
    free(s->tensors);
    free(s->first);
    free(s->n_of);
    free(s->block_buf);
    free(s);
}

int shard_set_count(const shard_set *s) { return s->n_tensors; }
const shard_tensor *shard_set_tensor(const shard_set *s, int i)
{
    return i >= 0 && i < s->n_tensors ? &s->tensors[i] : NULL;
}
uint64_t shard_set_bytes_read(const shard_set *s) { return s->bytes_read; }

static int cmp_name_tensor(const void *name, const void *t)
{
    return strcmp(name, ((const shard_tensor *)t)->name);
}

static int find_index(const shard_set *s, const char *name)
{
    const shard_tensor *t =
        s->n_tensors ? bsearch(name, s->tensors, (size_t)s->n_tensors, sizeof *t, cmp_name_tensor)
                     : NULL;
    return t ? (int)(t - s->tensors) : -1;
}

const shard_tensor *shard_set_find(const shard_set *s, const char *name)
{
    int i = find_index(s, name);
    return i < 0 ? NULL : &s->tensors[i];
}

/* ---- reading ------------------------------------------------------------------ */

static int pread_exact(shard_set *s, const sfile *f, void *dst, uint64_t n, uint64_t at,
                       moe_err *e)
{
    ssize_t r = fsio_pread_full(f->fd, dst, (size_t)n, (off_t)at);
    if (r < 0)
        return moe_err_errno(e, errno, "%s/%s: read", s->dir, f->name);
    if ((uint64_t)r != n)
        return moe_errf(e, "%s/%s: ends at byte %" PRIu64 ", expected data up to %" PRIu64
                           " (truncated)", s->dir, f->name, at + (uint64_t)r, at + n);
    s->bytes_read += n;
    return 0;
}

static int check_block(shard_set *s, const sfile *f, uint64_t b, const void *data, uint64_t n,
                       moe_err *e)
{
    uint8_t d[SHA256_DIGEST_LEN];
    sha256_hexbuf hex;
    if (sha256(data, (size_t)n, d, e))
        return -1;
    sha256_hex(d, hex);
    if (strcmp(hex, f->blocks[b]))
        return moe_errf(e, "%s/%s: bytes %" PRIu64 "-%" PRIu64 " do not match their SHA-256 in %s:"
                           " the file is corrupt", s->dir, f->name, b * s->block_bytes,
                        b * s->block_bytes + n, CKPT_INDEX_FILE);
    return 0;
}

/* n bytes at `at` of file fi into dst, each block verified once: blocks the
 * range covers whole are read straight into dst, its ragged ends through the
 * one-block cache (the next read usually continues in it). */
static int read_verified(shard_set *s, int fi, uint64_t at, uint64_t n, uint8_t *dst, moe_err *e)
{
    const sfile *f = &s->files[fi];
    if (!f->blocks)
        return pread_exact(s, f, dst, n, at, e);
    uint64_t B = s->block_bytes, end = at + n;
    while (at < end) {
        uint64_t b = at / B, b0 = b * B, blen = f->size - b0 < B ? f->size - b0 : B;
        uint64_t take = (b0 + blen < end ? b0 + blen : end) - at;
        if (at == b0 && take == blen) {
            if (pread_exact(s, f, dst, blen, b0, e) || check_block(s, f, b, dst, blen, e))
                return -1;
        } else {
            if (s->cached_file != fi || s->cached_block != b) {
                s->cached_file = -1;
                if (pread_exact(s, f, s->block_buf, blen, b0, e) ||
                    check_block(s, f, b, s->block_buf, blen, e))
                    return -1;
                s->cached_file = fi;
                s->cached_block = b;
            }
            memcpy(dst, s->block_buf + (at - b0), (size_t)take);
        }
        dst += take;
        at += take;
    }
    return 0;
}

static void convert_to_f32(st_dtype from, const uint8_t *src, float *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        if (from == ST_F64) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        } else {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = from == ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
    }
}

/* Stored elements to a BF16 slice (moments kept in bf16), through fp32. */
static void convert_to_bf16(st_dtype from, const uint8_t *src, uint16_t *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        float f;
        if (from == ST_F32)
            memcpy(&f, src + 4 * i, 4);
        else
            convert_to_f32(from, src + st_dtype_size(from) * i, &f, 1);
        dst[i] = f32_to_bf16(f);
    }
}

/* One contiguous run of a piece into a slice: elements [first, first + n)
 * of the slice, stored from byte `at` of file fi. */
typedef struct {
    int fi, slice;
    uint64_t at, first, n;
    st_dtype from;
} read_op;

static int cmp_op(const void *a, const void *b)
{
    const read_op *x = a, *y = b;
    if (x->fi != y->fi)
        return x->fi - y->fi;
    return (x->at > y->at) - (x->at < y->at);
}

static int run_op(shard_set *s, const read_op *op, const ckpt_slice *sl, uint8_t *staging,
                  size_t staging_bytes, moe_err *e)
{
    size_t src = st_dtype_size(op->from), dst = st_dtype_size(sl->dtype);
    int conv = op->from != sl->dtype;
    uint64_t per = staging_bytes / (conv ? src + dst : dst);
    if (per == 0)
        return moe_errf(e, "checkpoint.staging_bytes %zu holds no element", staging_bytes);
    for (uint64_t done = 0; done < op->n; done += per) {
        uint64_t k = op->n - done < per ? op->n - done : per;
        uint8_t *raw = conv ? staging + per * dst : staging;
        if (read_verified(s, op->fi, op->at + done * src, k * src, raw, e))
            return moe_err_prefix(e, "reading %s", sl->name);
        if (conv && sl->dtype == ST_BF16)
            convert_to_bf16(op->from, raw, (uint16_t *)staging, k);
        else if (conv)
            convert_to_f32(op->from, raw, (float *)staging, k);
        if (sl->put(sl, op->first + done, k, staging, e))
            return moe_err_prefix(e, "loading %s", sl->name);
    }
    return 0;
}

static int shape_matches(const shard_tensor *t, const ckpt_slice *sl)
{
    return t->ndim == sl->ndim && !memcmp(t->shape, sl->shape, sizeof(int64_t) * (size_t)t->ndim);
}

/* The read ops of one slice, appended to ops (sized by the caller). */
static int plan_slice(const shard_set *s, const ckpt_slice_list *want, int w, read_op *ops,
                      int *n_ops, moe_err *e)
{
    const ckpt_slice *sl = &want->v[w];
    int ti = find_index(s, sl->name);
    if (ti < 0)
        return moe_errf(e, "%s: no tensor %s", s->dir, sl->name);
    const shard_tensor *t = &s->tensors[ti];
    /* F32 slices take any float; BF16 slices (bf16 moments) too, rounded */
    int is_float = t->dtype == ST_F32 || t->dtype == ST_BF16 || t->dtype == ST_F16 ||
                   t->dtype == ST_F64;
    int conv_ok = (sl->dtype == ST_F32 || sl->dtype == ST_BF16) && is_float;
    if (!shape_matches(t, sl) || (t->dtype != sl->dtype && !conv_ok)) {
        char a[96] = "", b[96] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s%" PRId64, d ? "," : "", t->shape[d]);
        for (int d = 0; d < sl->ndim; d++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%" PRId64, d ? "," : "", sl->shape[d]);
        return moe_errf(e, "%s: %s is %s [%s], this model needs %s [%s]", s->dir, sl->name,
                        st_dtype_name(t->dtype), a, st_dtype_name(sl->dtype), b);
    }
    uint64_t lo = sl->start, hi = sl->start + sl->count, covered = lo;
    for (int k = s->first[ti]; k < s->first[ti] + s->n_of[ti] && covered < hi; k++) {
        const spiece *p = &s->pieces[k];
        uint64_t a = p->start > covered ? p->start : covered;
        uint64_t b = p->start + p->count < hi ? p->start + p->count : hi;
        if (a >= b)
            continue;
        if (a != covered)
            break; /* a gap */
        ops[(*n_ops)++] = (read_op){p->file, w, p->offset + (a - p->start) * st_dtype_size(p->dtype),
                                    a - lo, b - a, p->dtype};
        covered = b;
    }
    if (covered < hi)
        return moe_errf(e, "%s: elements %" PRIu64 "..%" PRIu64 " of %s are in no file", s->dir,
                        covered, hi, sl->name);
    return 0;
}

int shard_set_fill(shard_set *s, const ckpt_slice_list *want, void *staging, size_t staging_bytes,
                   moe_err *e)
{
    size_t bound = 1; /* a slice reads at most every piece of its tensor */
    for (int w = 0; w < want->n; w++) {
        int ti = find_index(s, want->v[w].name);
        bound += ti >= 0 ? (size_t)s->n_of[ti] : 0;
    }
    read_op *ops = calloc(bound, sizeof *ops);
    if (!ops)
        return moe_errf(e, "%s: out of memory", s->dir);
    int n_ops = 0, rc = 0;
    for (int w = 0; w < want->n && !rc; w++)
        rc = plan_slice(s, want, w, ops, &n_ops, e);
    if (!rc && n_ops)
        qsort(ops, (size_t)n_ops, sizeof *ops, cmp_op); /* front to back through each file */
    for (int i = 0; i < n_ops && !rc; i++)
        rc = run_op(s, &ops[i], &want->v[ops[i].slice], staging, staging_bytes, e);
    free(ops);
    return rc;
}

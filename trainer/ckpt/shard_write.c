/* moekit checkpoints: writing one rank's slices (shard_write.h). */
#include "shard_write.h"

#include <inttypes.h>
#include <stdio.h>

#include "fsio.h"
#include "hashed_file.h"
#include "shard_read.h"

static int whole(const ckpt_slice *s) { return s->start == 0 && s->count == ckpt_slice_numel(s); }

static void piece_name(const ckpt_slice *s, char *out, size_t n)
{
    if (whole(s))
        snprintf(out, n, "%s", s->name);
    else
        snprintf(out, n, "%s@%" PRIu64, s->name, s->start);
}

/* The safetensors header of the file: one tensor per slice, in list order. */
static int make_header(const char *path, const ckpt_slice_list *l, char **hdr, size_t *len,
                       moe_err *e)
{
    st_tensor *t = calloc((size_t)l->n + 1, sizeof *t);
    char(*names)[CKPT_NAME_MAX + 24] = calloc((size_t)l->n + 1, sizeof *names);
    int rc = -1;
    if (!t || !names) {
        moe_errf(e, "%s: out of memory", path);
    } else {
        for (int i = 0; i < l->n; i++) {
            const ckpt_slice *s = &l->v[i];
            piece_name(s, names[i], sizeof names[i]);
            t[i].name = names[i];
            t[i].dtype = s->dtype;
            t[i].ndim = whole(s) ? s->ndim : 1;
            for (int d = 0; d < t[i].ndim; d++)
                t[i].shape[d] = whole(s) ? s->shape[d] : (int64_t)s->count;
        }
        static const st_meta meta[] = {{"format", "moekit-shard"}};
        uint64_t data_bytes;
        rc = st_header_make(path, t, l->n, meta, 1, hdr, len, &data_bytes, e);
    }
    free(t);
    free(names);
    return rc;
}

static void record_piece(json_writer *w, const ckpt_slice *s, uint64_t offset)
{
    jw_object_begin(w);
    jw_key(w, "name");
    jw_string(w, s->name);
    jw_key(w, "dtype");
    jw_string(w, st_dtype_name(s->dtype));
    jw_key(w, "shape");
    jw_array_begin(w);
    for (int d = 0; d < s->ndim; d++)
        jw_int(w, s->shape[d]);
    jw_array_end(w);
    jw_key(w, "start");
    jw_int(w, (int64_t)s->start);
    jw_key(w, "count");
    jw_int(w, (int64_t)s->count);
    jw_key(w, "offset");
    jw_int(w, (int64_t)offset);
    jw_object_end(w);
}

static void record_file(json_writer *w, const char *file_name, const hashed_file *f)
{
    jw_key(w, "file");
    jw_string(w, file_name);
    jw_key(w, "size");
    jw_int(w, (int64_t)f->size);
    jw_key(w, "sha256");
    jw_string(w, f->hex);
    jw_key(w, "blocks");
    jw_array_begin(w);
    for (int b = 0; b < f->n_blocks; b++)
        jw_string(w, f->blocks[b]);
    jw_array_end(w);
}

/* Stream slice s into f through the staging buffer. */
static int write_slice(hashed_file *f, const ckpt_slice *s, void *staging, size_t staging_bytes,
                       moe_err *e)
{
    size_t esz = st_dtype_size(s->dtype);
    uint64_t per = staging_bytes / esz;
    if (per == 0)
        return moe_errf(e, "checkpoint.staging_bytes %zu is smaller than one %s element",
                        staging_bytes, st_dtype_name(s->dtype));
    for (uint64_t first = 0; first < s->count; first += per) {
        uint64_t n = s->count - first < per ? s->count - first : per;
        if (s->get(s, first, n, staging, e))
            return moe_err_prefix(e, "reading %s for the checkpoint", s->name);
        if (hashed_file_write(f, staging, (size_t)(n * esz), e))
            return -1;
    }
    return 0;
}

int shard_write(const char *dir, const char *file_name, const ckpt_slice_list *l,
                uint64_t block_bytes, void *staging, size_t staging_bytes, json_writer *record,
                moe_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file_name);
    char *hdr = NULL;
    size_t hlen = 0;
    hashed_file f;
    if (make_header(path, l, &hdr, &hlen, e))
        return -1;
    if (hashed_file_create(&f, path, block_bytes, e)) {
        free(hdr);
        return -1;
    }
    int rc = hashed_file_write(&f, hdr, hlen, e);
    free(hdr);
    for (int i = 0; i < l->n && !rc; i++)
        rc = write_slice(&f, &l->v[i], staging, staging_bytes, e);
    if (!rc)
        rc = hashed_file_finish(&f, e);
    if (rc) {
        hashed_file_abort(&f);
        return -1;
    }
    jw_object_begin(record);
    record_file(record, file_name, &f);
    jw_key(record, "pieces");
    jw_array_begin(record);
    uint64_t off = hlen;
    for (int i = 0; i < l->n; i++) {
        record_piece(record, &l->v[i], off);
        off += l->v[i].count * st_dtype_size(l->v[i].dtype);
    }
    jw_array_end(record);
    jw_object_end(record);
    hashed_file_free(&f);
    return 0;
}

int shard_index_write(const char *dir, const char *layout, uint64_t block_bytes,
                      const char *texts, const size_t *lens, int n, moe_err *e)
{
    json_writer w;
    jw_init(&w, 0);
    jw_object_begin(&w);
    jw_key(&w, "format");
    jw_string(&w, CKPT_INDEX_FORMAT);
    jw_key(&w, "layout");
    jw_string(&w, layout);
    jw_key(&w, "block_bytes");
    jw_int(&w, (int64_t)block_bytes);
    jw_key(&w, "files");
    jw_array_begin(&w);
    for (int r = 0; r < n; r++) {
        if (r)
            jw_raw(&w, ",", 1);
        jw_raw(&w, texts, lens[r]); /* each record is one JSON object */
        texts += lens[r];
    }
    jw_array_end(&w);
    jw_object_end(&w);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_INDEX_FILE);
    return jw_write_file(&w, path, e);
}

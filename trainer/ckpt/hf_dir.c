#include "hf_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsio.h"
#include "json.h"

typedef struct {
    const char *name; /* owned by its shard's st_file */
    int shard, index;
} entry;

struct hf_dir {
    char path[4096];
    st_file **shards;
    int n_shards;
    entry *entries; /* sorted by name */
    int n;
};

void hf_dir_close(hf_dir *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->n_shards; i++)
        st_close(d->shards[i]);
    free(d->shards);
    free(d->entries);
    free(d);
}

static int cmp_entry(const void *a, const void *b) { return strcmp(((const entry *)a)->name, ((const entry *)b)->name); }
static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static const entry *find(const hf_dir *d, const char *name)
{
    entry key = {name, 0, 0};
    return d->n ? bsearch(&key, d->entries, (size_t)d->n, sizeof key, cmp_entry) : NULL;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int open_single(hf_dir *d, const char *file, moe_err *e)
{
    d->shards = calloc(1, sizeof *d->shards);
    if (!d->shards)
        return moe_errf(e, "%s: out of memory", d->path);
    if (st_open(file, &d->shards[0], e) != 0)
        return -1;
    d->n_shards = 1;
    d->n = st_count(d->shards[0]);
    d->entries = calloc(d->n ? (size_t)d->n : 1, sizeof *d->entries);
    if (!d->entries)
        return moe_errf(e, "%s: out of memory", d->path);
    for (int i = 0; i < d->n; i++)
        d->entries[i] = (entry){st_tensor_info(d->shards[0], i)->name, 0, i};
    return 0;
}

/* A shard must be a plain file name inside the directory: an index is
 * untrusted input and must not point the loader elsewhere. */
static int check_shard_name(const char *index, const json_member *m, moe_err *e)
{
    const json_value *v = &m->value;
    if (v->type != JSON_STRING)
        return moe_errf(e, "%s: line %d column %d: weight_map[\"%.200s\"] must be a file name string, got %s", index,
                        v->line, v->column, m->key, json_type_name(v->type));
    const char *s = v->str.s;
    if (!s[0] || strlen(s) != v->str.len || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return moe_errf(e, "%s: line %d column %d: weight_map[\"%.200s\"] = \"%.200s\" is not a file name in the directory",
                        index, v->line, v->column, m->key, s);
    return 0;
}

static int open_sharded(hf_dir *d, const char *index, moe_err *e)
{
    json_doc *doc;
    if (json_parse_file(index, NULL, &doc, e) != 0)
        return -1;
    int rc = -1;
    const char **names = NULL;
    const json_value *root = json_root(doc);
    const json_value *map = json_get(root, "weight_map");
    if (root->type != JSON_OBJECT || !map || map->type != JSON_OBJECT) {
        moe_errf(e, "%s: expected an object with a \"weight_map\" object (tensor name -> shard file)", index);
        goto done;
    }
    size_t n = map->obj.n;
    names = calloc(n ? n : 1, sizeof *names);
    d->entries = calloc(n ? n : 1, sizeof *d->entries);
    if (!names || !d->entries) {
        moe_errf(e, "%s: out of memory", index);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (check_shard_name(index, &map->obj.members[i], e) != 0)
            goto done;
        names[i] = map->obj.members[i].value.str.s;
    }
    /* Distinct shard files, each opened (and validated) once. */
    qsort(names, n, sizeof *names, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0)
            names[u++] = names[i];
    d->shards = calloc(u ? u : 1, sizeof *d->shards);
    if (!d->shards) {
        moe_errf(e, "%s: out of memory", index);
        goto done;
    }
    for (size_t i = 0; i < u; i++) {
        char shard_path[4096];
        if (fsio_join(shard_path, sizeof shard_path, d->path, names[i], e) != 0)
            goto done;
        if (st_open(shard_path, &d->shards[i], e) != 0) {
            moe_err_prefix(e, "%s lists shard %s", index, names[i]);
            goto done;
        }
        d->n_shards++;
    }
    for (size_t i = 0; i < n; i++) {
        const json_member *m = &map->obj.members[i];
        const char **hit = bsearch(&m->value.str.s, names, u, sizeof *names, cmp_str);
        int s = (int)(hit - names);
        int t = st_find(d->shards[s], m->key);
        if (t < 0) {
            moe_errf(e, "%s: tensor \"%.200s\" is mapped to %s, which does not contain it", index, m->key,
                     m->value.str.s);
            goto done;
        }
        d->entries[i] = (entry){st_tensor_info(d->shards[s], t)->name, s, t};
    }
    d->n = (int)n;
    rc = 0;
done:
    free(names);
    json_free(doc);
    return rc;
}

int hf_dir_open(const char *path, hf_dir **out, moe_err *e)
{
    *out = NULL;
    hf_dir *d = calloc(1, sizeof *d);
    if (!d)
        return moe_errf(e, "%s: out of memory", path);
    int w = snprintf(d->path, sizeof d->path, "%s", path);
    char single[4096], index[4096];
    int rc;
    if (w < 0 || (size_t)w >= sizeof d->path || fsio_join(single, sizeof single, path, HF_SINGLE_FILE, e) != 0 ||
        fsio_join(index, sizeof index, path, HF_INDEX_FILE, e) != 0) {
        rc = moe_errf(e, "%s: path too long", path);
    } else if (file_exists(single)) {
        rc = open_single(d, single, e);
    } else if (file_exists(index)) {
        rc = open_sharded(d, index, e);
    } else {
        struct stat st;
        if (stat(path, &st) != 0)
            rc = moe_err_errno(e, errno, "%s", path);
        else if (!S_ISDIR(st.st_mode))
            rc = moe_errf(e, "%s: not a directory", path);
        else
            rc = moe_errf(e, "%s: no %s or %s: not a Hugging Face safetensors model directory", path,
                          HF_SINGLE_FILE, HF_INDEX_FILE);
    }
    if (rc != 0) {
        hf_dir_close(d);
        return -1;
    }
    qsort(d->entries, (size_t)d->n, sizeof *d->entries, cmp_entry);
    *out = d;
    return 0;
}

int hf_dir_has(const hf_dir *d, const char *name) { return find(d, name) != NULL; }
int hf_dir_count(const hf_dir *d) { return d->n; }
const char *hf_dir_name(const hf_dir *d, int index) { return index >= 0 && index < d->n ? d->entries[index].name : NULL; }

int hf_dir_tensor_info(const hf_dir *d, const char *name, st_info *out, moe_err *e)
{
    const entry *en = find(d, name);
    if (!en)
        return moe_errf(e, "%s: no tensor named \"%.200s\" (the checkpoint has %d)", d->path, name, d->n);
    *out = *st_tensor_info(d->shards[en->shard], en->index);
    return 0;
}

int hf_dir_read_f32(hf_dir *d, const char *name, int ndim, const int64_t *shape, float *dst, moe_err *e)
{
    const entry *en = find(d, name);
    if (!en)
        return moe_errf(e, "%s: no tensor named \"%.200s\" (the checkpoint has %d)", d->path, name, d->n);
    return st_read_f32(d->shards[en->shard], name, ndim, shape, dst, e);
}

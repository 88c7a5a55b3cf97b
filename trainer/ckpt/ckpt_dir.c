#include "ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"
#include "sha256.h"

#define MANIFEST_HEADER "# moekit-manifest 2 (check it with: sha256sum -c MANIFEST)"
#define MANIFEST_V1_HEADER "moekit-manifest 1"
/* Files up to this size are hashed when a resume looks for the newest
 * checkpoint; the larger tensor files are verified block by block as read. */
#define QUICK_HASH_MAX_BYTES ((uint64_t)64 << 20)
#define MANIFEST_MAX_BYTES ((size_t)64 << 20)

/* ---- names in a checkpoint root ------------------------------------------ */

typedef enum { NAME_STEP, NAME_TMP, NAME_OLD, NAME_DEL, NAME_OTHER } name_kind;

/* Decimal digits at *p into a non-negative int64; advances *p. */
static int parse_count(const char **p, int64_t *out)
{
    const char *s = *p;
    int64_t v = 0;
    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (INT64_MAX - (*s - '0')) / 10)
            return -1;
        v = v * 10 + (*s - '0');
    }
    *p = s;
    *out = v;
    return 0;
}

/* step_N, or .tmp-step_N-PID / .old-step_N-PID / .del-step_N-PID, or
 * .tmp-final_model-PID (a temp dir too, of no step: -1). */
static name_kind classify(const char *name, int64_t *step, int64_t *pid)
{
    static const struct {
        const char *prefix;
        name_kind kind;
    } kinds[] = {{".tmp-", NAME_TMP}, {".old-", NAME_OLD}, {".del-", NAME_DEL}, {"", NAME_STEP}};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        size_t n = strlen(kinds[i].prefix);
        if (strncmp(name, kinds[i].prefix, n) != 0)
            continue;
        const char *p = name + n;
        if (kinds[i].kind == NAME_TMP && strncmp(p, "final_model-", 12) == 0) {
            p += 12;
            *step = -1;
            return parse_count(&p, pid) == 0 && *p == '\0' ? NAME_TMP : NAME_OTHER;
        }
        if (strncmp(p, "step_", 5) != 0)
            return NAME_OTHER;
        p += 5;
        if (parse_count(&p, step) != 0)
            return NAME_OTHER;
        if (kinds[i].kind == NAME_STEP)
            return *p == '\0' ? NAME_STEP : NAME_OTHER;
        if (*p++ != '-' || parse_count(&p, pid) != 0 || *p != '\0')
            return NAME_OTHER;
        return kinds[i].kind;
    }
    return NAME_OTHER;
}

static int step_name(char *buf, size_t n, const char *root, int64_t step, moe_err *e)
{
    int w = snprintf(buf, n, "%s/step_%08lld", root, (long long)step);
    if (w < 0 || (size_t)w >= n)
        return moe_errf(e, "%s: checkpoint root path too long", root);
    return 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int pid_alive(int64_t pid)
{
    if (pid <= 0 || pid > INT32_MAX)
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* Leftovers of killed writers. Failures are ignored: a stale directory is
 * never read as a checkpoint, so it costs only disk space. A parked .old
 * whose replacement never arrived is the only copy of its step: restore it. */
static void sweep_stale(const char *root)
{
    DIR *d = opendir(root);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step, pid;
        name_kind k = classify(de->d_name, &step, &pid);
        if ((k != NAME_TMP && k != NAME_OLD && k != NAME_DEL) || pid == getpid() || pid_alive(pid))
            continue;
        char path[4096], final_dir[4096];
        if (fsio_join(path, sizeof path, root, de->d_name, NULL) != 0 ||
            step_name(final_dir, sizeof final_dir, root, step, NULL) != 0)
            continue;
        if (k == NAME_OLD && !is_dir(final_dir) && rename(path, final_dir) == 0)
            continue;
        fsio_rm_rf(path, NULL);
    }
    closedir(d);
}

void ckpt_sweep(const char *root) { sweep_stale(root); }

/* ---- begin / abort -------------------------------------------------------- */

int ckpt_begin(ckpt_txn *t, const char *ckpt_root, int64_t step, moe_err *e)
{
    memset(t, 0, sizeof *t);
    if (!ckpt_root || !ckpt_root[0])
        return moe_errf(e, "checkpoint: empty checkpoint directory");
    if (step < 0)
        return moe_errf(e, "%s: checkpoint step %lld is negative", ckpt_root, (long long)step);
    int w = snprintf(t->root, sizeof t->root, "%s", ckpt_root);
    if (w < 0 || (size_t)w >= sizeof t->root)
        return moe_errf(e, "%s: checkpoint root path too long", ckpt_root);
    if (fsio_mkdir_p(t->root, 0755, e) != 0)
        return moe_err_prefix(e, "checkpoint root");
    sweep_stale(t->root);
    if (step_name(t->final_dir, sizeof t->final_dir, t->root, step, e) != 0)
        return -1;
    w = snprintf(t->tmp_dir, sizeof t->tmp_dir, "%s/.tmp-step_%08lld-%d", t->root, (long long)step, (int)getpid());
    if (w < 0 || (size_t)w >= sizeof t->tmp_dir) {
        t->tmp_dir[0] = '\0';
        return moe_errf(e, "%s: checkpoint root path too long", ckpt_root);
    }
    /* Our own earlier attempt at this step, abandoned without ckpt_abort. */
    if (fsio_rm_rf(t->tmp_dir, e) != 0) {
        t->tmp_dir[0] = '\0';
        return -1;
    }
    if (mkdir(t->tmp_dir, 0755) != 0) {
        moe_err_errno(e, errno, "%s: mkdir", t->tmp_dir);
        t->tmp_dir[0] = '\0';
        return -1;
    }
    t->step = step;
    return 0;
}

void ckpt_abort(ckpt_txn *t)
{
    if (t->tmp_dir[0])
        fsio_rm_rf(t->tmp_dir, NULL);
    t->tmp_dir[0] = '\0';
}

/* ---- listing files -------------------------------------------------------- */

typedef struct {
    char **names;
    size_t n, cap;
} name_list;

static void names_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static int names_add(name_list *l, const char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **p = realloc(l->names, cap * sizeof *p);
        if (!p)
            return -1;
        l->names = p;
        l->cap = cap;
    }
    if (!(l->names[l->n] = strdup(s)))
        return -1;
    l->n++;
    return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The regular files of a checkpoint directory, MANIFEST excluded, sorted.
 * Anything else (a subdirectory, a link, a name with a newline) is an
 * error: MANIFEST could not describe it. */
static int list_files(const char *dir, name_list *out, int *has_manifest, moe_err *e)
{
    memset(out, 0, sizeof *out);
    *has_manifest = 0;
    DIR *d = opendir(dir);
    if (!d)
        return moe_err_errno(e, errno, "%s", dir);
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while (rc == 0 && (de = readdir(d))) {
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            rc = moe_err_errno(e, errno, "%s/%s", dir, name);
        else if (!S_ISREG(st.st_mode))
            rc = moe_errf(e, "%s/%s: not a regular file (checkpoints hold only plain files)", dir, name);
        else if (strchr(name, '\n'))
            rc = moe_errf(e, "%s: a file name contains a newline", dir);
        else if (strcmp(name, CKPT_MANIFEST) == 0)
            *has_manifest = 1;
        else if (names_add(out, name) != 0)
            rc = moe_errf(e, "%s: out of memory", dir);
        errno = 0;
    }
    if (rc == 0 && errno)
        rc = moe_err_errno(e, errno, "%s: readdir", dir);
    closedir(d);
    if (rc != 0)
        names_free(out);
    else if (out->n)
        qsort(out->names, out->n, sizeof *out->names, cmp_name);
    return rc;
}

/* Open a file of a checkpoint without following links. */
static int open_member(const char *dir, const char *name, char *path, size_t n, moe_err *e)
{
    if (fsio_join(path, n, dir, name, e) != 0)
        return -1;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        moe_err_errno(e, err, "%s", path);
        errno = err; /* callers tell a missing file from other failures */
        return -1;
    }
    return fd;
}

/* ---- commit --------------------------------------------------------------- */

static const ckpt_hashed *find_hashed(const ckpt_hashed *pre, int n_pre, const char *name)
{
    for (int i = 0; i < n_pre; i++)
        if (strcmp(pre[i].name, name) == 0)
            return &pre[i];
    return NULL;
}

/* One file's MANIFEST lines: its digest (computed here, and the file
 * fsynced, unless its writer hashed and fsynced it: then only its size is
 * checked) in sha256sum's format, then its size in a comment line. */
static int manifest_file(const char *dir, const char *name, const ckpt_hashed *pre, FILE *mem,
                         moe_err *e)
{
    char path[4096], hex[SHA256_HEX_LEN + 1];
    int fd = open_member(dir, name, path, sizeof path, e);
    if (fd < 0)
        return -1;
    uint64_t size;
    int rc = 0;
    if (pre) {
        struct stat st;
        if (fstat(fd, &st) != 0)
            rc = moe_err_errno(e, errno, "%s: stat", path);
        else if ((uint64_t)st.st_size != pre->size)
            rc = moe_errf(e, "%s: %llu bytes, its writer wrote %llu", path,
                          (unsigned long long)st.st_size, (unsigned long long)pre->size);
        size = pre->size;
        memcpy(hex, pre->hex, sizeof hex);
    } else {
        uint8_t digest[SHA256_DIGEST_LEN];
        if (sha256_fd(fd, path, digest, &size, e) != 0)
            rc = -1;
        else if (fsync(fd) != 0)
            rc = moe_err_errno(e, errno, "%s: fsync", path);
        sha256_hex(digest, hex);
    }
    close(fd);
    if (rc == 0)
        fprintf(mem, "%s  %s\n# size %llu\n", hex, name, (unsigned long long)size);
    return rc;
}

/* Hash and fsync every file, then write MANIFEST (fsynced) into the temp dir. */
static int write_manifest(const char *dir, const ckpt_hashed *pre, int n_pre, moe_err *e)
{
    name_list files;
    int has_manifest;
    if (list_files(dir, &files, &has_manifest, e) != 0)
        return -1;
    int rc = 0, fd = -1;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        rc = moe_errf(e, "%s: out of memory", dir);
    if (rc == 0 && has_manifest)
        rc = moe_errf(e, "%s/%s: the name MANIFEST is reserved for the checkpoint's own file list", dir,
                      CKPT_MANIFEST);
    if (rc == 0)
        fprintf(mem, "%s\n", MANIFEST_HEADER);
    for (size_t i = 0; rc == 0 && i < files.n; i++) {
        if (strchr(files.names[i], '\\'))
            rc = moe_errf(e, "%s/%s: a backslash in a file name (sha256sum -c would misread it)", dir,
                          files.names[i]);
        else
            rc = manifest_file(dir, files.names[i], find_hashed(pre, n_pre, files.names[i]), mem, e);
    }
    if (rc == 0)
        fprintf(mem, "# end %zu\n", files.n);
    if (mem && fclose(mem) != 0 && rc == 0)
        rc = moe_errf(e, "%s: out of memory", dir);
    char path[4096];
    if (rc == 0 && (rc = fsio_join(path, sizeof path, dir, CKPT_MANIFEST, e)) == 0) {
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
            rc = moe_err_errno(e, errno, "%s: create", path);
        else if (fsio_write_full(fd, text, len) != 0)
            rc = moe_err_errno(e, errno, "%s: write", path);
        else if (fsync(fd) != 0)
            rc = moe_err_errno(e, errno, "%s: fsync", path);
        if (fd >= 0 && close(fd) != 0 && rc == 0)
            rc = moe_err_errno(e, errno, "%s: close", path);
    }
    free(text);
    names_free(&files);
    return rc;
}

/* Make tmp the step dir. An existing one is exchanged atomically, so there
 * is no instant without a step_N; where RENAME_EXCHANGE is missing (some
 * network file systems) it is parked as .old-... first, which sweep_stale
 * and ckpt_latest both know how to recover. */
static int publish(const ckpt_txn *t, moe_err *e)
{
    if (rename(t->tmp_dir, t->final_dir) == 0)
        return 0;
    if (errno != ENOTEMPTY && errno != EEXIST)
        return moe_err_errno(e, errno, "rename %s -> %s", t->tmp_dir, t->final_dir);
    if (renameat2(AT_FDCWD, t->tmp_dir, AT_FDCWD, t->final_dir, RENAME_EXCHANGE) == 0) {
        /* The temp name now holds the replaced checkpoint. */
        if (fsio_fsync_path(t->root, e) != 0)
            return -1;
        return fsio_rm_rf(t->tmp_dir, e);
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return moe_err_errno(e, errno, "exchange %s <-> %s", t->tmp_dir, t->final_dir);
    char old[4096];
    int w = snprintf(old, sizeof old, "%s/.old-step_%08lld-%d", t->root, (long long)t->step, (int)getpid());
    if (w < 0 || (size_t)w >= sizeof old)
        return moe_errf(e, "%s: checkpoint root path too long", t->root);
    if (rename(t->final_dir, old) != 0)
        return moe_err_errno(e, errno, "rename %s -> %s", t->final_dir, old);
    if (rename(t->tmp_dir, t->final_dir) != 0) {
        int err = errno;
        rename(old, t->final_dir);
        return moe_err_errno(e, err, "rename %s -> %s", t->tmp_dir, t->final_dir);
    }
    if (fsio_fsync_path(t->root, e) != 0)
        return -1;
    return fsio_rm_rf(old, e);
}

typedef struct {
    int64_t step;
    char name[64];
    int parked; /* an .old- dir whose step dir is missing */
} candidate;

static int cmp_candidate_newest_first(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->step != y->step)
        return x->step > y->step ? -1 : 1;
    return x->parked - y->parked;
}

/* Committed checkpoints of a root, newest first; parked ones too when asked. */
static int list_candidates(const char *root, int with_parked, candidate **out, size_t *n, moe_err *e)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d)
        return errno == ENOENT ? 1 : moe_err_errno(e, errno, "%s", root);
    candidate *c = NULL;
    size_t cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step, pid;
        name_kind k = classify(de->d_name, &step, &pid);
        if (k != NAME_STEP && !(with_parked && k == NAME_OLD))
            continue;
        if (strlen(de->d_name) >= sizeof c->name)
            continue;
        char path[4096];
        if (fsio_join(path, sizeof path, root, de->d_name, NULL) != 0 || !is_dir(path))
            continue;
        if (k == NAME_OLD) {
            char final_dir[4096];
            if (step_name(final_dir, sizeof final_dir, root, step, NULL) != 0 || is_dir(final_dir))
                continue;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            candidate *nc = realloc(c, cap * sizeof *nc);
            if (!nc) {
                rc = moe_errf(e, "%s: out of memory", root);
                break;
            }
            c = nc;
        }
        c[*n].step = step;
        c[*n].parked = k == NAME_OLD;
        memcpy(c[*n].name, de->d_name, strlen(de->d_name) + 1); /* length checked above */
        (*n)++;
    }
    closedir(d);
    if (rc != 0) {
        free(c);
        *n = 0;
        return -1;
    }
    if (*n)
        qsort(c, *n, sizeof *c, cmp_candidate_newest_first);
    *out = c;
    return 0;
}

/* Rename first: a half-deleted directory must never be a step_N. */
static int discard(const char *root, const char *name, moe_err *e)
{
    char path[4096], doomed[4096];
    int w = snprintf(doomed, sizeof doomed, "%s/.del-%s-%d", root, name, (int)getpid());
    if (fsio_join(path, sizeof path, root, name, e) != 0 || w < 0 || (size_t)w >= sizeof doomed)
        return moe_errf(e, "%s: path too long", root);
    if (rename(path, doomed) != 0)
        return moe_err_errno(e, errno, "rename %s -> %s", path, doomed);
    return fsio_rm_rf(doomed, e);
}

static int prune(const ckpt_txn *t, int max_keep, moe_err *e)
{
    if (max_keep == 0)
        return 0;
    candidate *c;
    size_t n;
    int rc = list_candidates(t->root, 0, &c, &n, e);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    for (size_t i = (size_t)max_keep; i < n && rc == 0; i++) {
        if (c[i].step == t->step)
            continue;
        rc = discard(t->root, c[i].name, e);
    }
    free(c);
    return rc;
}

int ckpt_commit(ckpt_txn *t, int max_keep, moe_err *e) { return ckpt_commit_hashed(t, max_keep, NULL, 0, e); }

int ckpt_commit_hashed(ckpt_txn *t, int max_keep, const ckpt_hashed *pre, int n_pre, moe_err *e)
{
    if (!t->tmp_dir[0])
        return moe_errf(e, "checkpoint commit: no checkpoint in progress (call ckpt_begin first)");
    if (max_keep < 0)
        return moe_errf(e, "%s: max_keep %d is negative", t->root, max_keep);
    if (write_manifest(t->tmp_dir, pre, n_pre, e) != 0 || fsio_fsync_path(t->tmp_dir, e) != 0 || publish(t, e) != 0)
        return moe_err_prefix(e, "checkpoint step %lld not committed", (long long)t->step);
    t->tmp_dir[0] = '\0';
    if (fsio_fsync_path(t->root, e) != 0 || prune(t, max_keep, e) != 0)
        return moe_err_prefix(e, "checkpoint %s committed, but cleaning up after it failed", t->final_dir);
    return 0;
}

/* ---- verify / latest ------------------------------------------------------ */

typedef struct {
    char *name;
    uint64_t size;
    char hex[SHA256_HEX_LEN + 1];
} manifest_entry;

static int is_lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int cmp_entry_name(const void *a, const void *b)
{
    return strcmp(((const manifest_entry *)a)->name, ((const manifest_entry *)b)->name);
}

static int valid_member_name(const char *name)
{
    return name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
           strcmp(name, CKPT_MANIFEST) != 0;
}

/* One line after the header: v1 "<hex> <size> <name>" / "end <n>", v2
 * "<hex>  <name>" followed by "# size <n>", and "# end <n>". */
static int parse_line(const char *path, size_t ln, char *line, int v2, manifest_entry *m, size_t *n,
                      int *ended, int *want_size, moe_err *e)
{
    const char *end_tag = v2 ? "# end " : "end ";
    int64_t count;
    if (*want_size) {
        const char *p = line + 7;
        if (strncmp(line, "# size ", 7) != 0 || parse_count(&p, &count) != 0 || *p != '\0')
            return moe_errf(e, "%s: line %zu: expected \"# size <bytes>\"", path, ln);
        m[*n - 1].size = (uint64_t)count;
        *want_size = 0;
        return 0;
    }
    if (strncmp(line, end_tag, strlen(end_tag)) == 0) {
        const char *p = line + strlen(end_tag);
        if (parse_count(&p, &count) != 0 || *p != '\0')
            return moe_errf(e, "%s: line %zu: malformed end line", path, ln);
        if ((uint64_t)count != *n)
            return moe_errf(e, "%s: end line says %lld files, %zu are listed", path, (long long)count, *n);
        *ended = 1;
        return 0;
    }
    const char *p = line + SHA256_HEX_LEN + 1, *name;
    int64_t size = 0;
    if (strlen(line) < SHA256_HEX_LEN + 3 || line[SHA256_HEX_LEN] != ' ' || !is_lower_hex(line, SHA256_HEX_LEN) ||
        (v2 ? *p != ' ' : (parse_count(&p, &size) != 0 || *p != ' ')))
        return moe_errf(e, "%s: line %zu: expected \"%s\"", path, ln,
                        v2 ? "<sha256 hex>  <name>" : "<sha256 hex> <size> <name>");
    name = p + 1;
    if (!valid_member_name(name))
        return moe_errf(e, "%s: line %zu: \"%.200s\" is not a file name in the checkpoint", path, ln, name);
    memcpy(m[*n].hex, line, SHA256_HEX_LEN);
    m[*n].hex[SHA256_HEX_LEN] = '\0';
    m[*n].size = (uint64_t)size;
    m[*n].name = (char *)name;
    (*n)++;
    *want_size = v2;
    return 0;
}

/* Strict parse: any deviation from what write_manifest writes (or wrote, in
 * version 1) is damage. *v2: the version-2 format. */
static int parse_manifest(const char *path, char *text, size_t len, manifest_entry **out, size_t *n_out, int *v2,
                          moe_err *e)
{
    *out = NULL;
    *n_out = 0;
    if (len == 0 || text[len - 1] != '\n')
        return moe_errf(e, "%s: truncated (no final newline)", path);
    if (memchr(text, '\0', len))
        return moe_errf(e, "%s: contains a NUL byte", path);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    manifest_entry *m = calloc(lines, sizeof *m);
    if (!m)
        return moe_errf(e, "%s: out of memory", path);
    size_t n = 0;
    int rc = 0, ended = 0, want_size = 0;
    char *line = text;
    for (size_t ln = 1; rc == 0 && line < text + len; ln++) {
        char *nl = strchr(line, '\n');
        *nl = '\0';
        if (ended) {
            rc = moe_errf(e, "%s: line %zu: text after the end line", path, ln);
        } else if (ln == 1) {
            *v2 = strcmp(line, MANIFEST_HEADER) == 0;
            if (!*v2 && strcmp(line, MANIFEST_V1_HEADER) != 0)
                rc = moe_errf(e, "%s: line 1: expected \"%s\"", path, MANIFEST_HEADER);
        } else {
            rc = parse_line(path, ln, line, *v2, m, &n, &ended, &want_size, e);
        }
        line = nl + 1;
    }
    if (rc == 0 && (!ended || want_size))
        rc = moe_errf(e, "%s: truncated (no end line)", path);
    if (rc == 0) {
        qsort(m, n, sizeof *m, cmp_entry_name);
        for (size_t i = 1; i < n && rc == 0; i++)
            if (strcmp(m[i - 1].name, m[i].name) == 0)
                rc = moe_errf(e, "%s: \"%.200s\" is listed twice", path, m[i].name);
    }
    if (rc != 0) {
        free(m);
        return -1;
    }
    *out = m;
    *n_out = n;
    return 0;
}

/* quick: hash only files up to QUICK_HASH_MAX_BYTES (the others' size is checked) */
static int verify_file(const char *dir, const manifest_entry *m, int quick, moe_err *e)
{
    char path[4096];
    int fd = open_member(dir, m->name, path, sizeof path, e);
    if (fd < 0)
        return errno == ENOENT ? moe_errf(e, "%s: listed in MANIFEST but missing", path) : -1;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = moe_err_errno(e, errno, "%s: stat", path);
    else if (!S_ISREG(st.st_mode))
        rc = moe_errf(e, "%s: not a regular file", path);
    else if ((uint64_t)st.st_size != m->size)
        rc = moe_errf(e, "%s: %llu bytes, MANIFEST says %llu (truncated or replaced)", path,
                      (unsigned long long)st.st_size, (unsigned long long)m->size);
    uint8_t digest[SHA256_DIGEST_LEN];
    uint64_t size;
    int hash = !quick || m->size <= QUICK_HASH_MAX_BYTES;
    if (rc == 0 && hash && sha256_fd(fd, path, digest, &size, e) != 0)
        rc = -1;
    close(fd);
    if (rc == 0 && hash) {
        char hex[SHA256_HEX_LEN + 1];
        sha256_hex(digest, hex);
        if (strcmp(hex, m->hex) != 0)
            rc = moe_errf(e, "%s: SHA-256 %.16s... does not match MANIFEST's %.16s...: the file is corrupt", path, hex,
                          m->hex);
    }
    return rc;
}

/* quick: version-2 checkpoints only have their small files hashed */
static int verify_dir(const char *dir, int quick, moe_err *e)
{
    char path[4096];
    if (fsio_join(path, sizeof path, dir, CKPT_MANIFEST, e) != 0)
        return -1;
    char *text;
    size_t len;
    if (fsio_read_all(path, MANIFEST_MAX_BYTES, &text, &len, e) != 0) {
        if (errno == ENOENT || access(path, F_OK) != 0)
            return moe_errf(e, "%s: no MANIFEST (not a committed checkpoint)", dir);
        return -1;
    }
    manifest_entry *m = NULL;
    size_t n = 0;
    name_list files = {0};
    int has_manifest;
    int v2 = 0;
    int rc = parse_manifest(path, text, len, &m, &n, &v2, e);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = verify_file(dir, &m[i], quick && v2, e);
    if (rc == 0)
        rc = list_files(dir, &files, &has_manifest, e);
    for (size_t i = 0; rc == 0 && i < files.n; i++) {
        manifest_entry key = {files.names[i], 0, ""};
        if (!bsearch(&key, m, n, sizeof *m, cmp_entry_name))
            rc = moe_errf(e, "%s/%s: not listed in MANIFEST", dir, files.names[i]);
    }
    names_free(&files);
    free(m);
    free(text);
    return rc;
}

int ckpt_verify(const char *dir, moe_err *e) { return verify_dir(dir, 0, e); }

int ckpt_latest(const char *ckpt_root, char *dir_out, size_t n, int64_t *step_out, moe_err *e)
{
    if (e)
        e->msg[0] = '\0';
    candidate *c;
    size_t nc;
    int rc = list_candidates(ckpt_root, 1, &c, &nc, e);
    if (rc != 0)
        return rc;
    char skipped[MOE_ERR_LEN] = "";
    size_t used = 0;
    rc = 1;
    for (size_t i = 0; i < nc; i++) {
        char path[4096];
        moe_err ve;
        if (fsio_join(path, sizeof path, ckpt_root, c[i].name, &ve) != 0 || verify_dir(path, 1, &ve) != 0) {
            int w = snprintf(skipped + used, sizeof skipped - used, "%sskipped broken checkpoint %s",
                             used ? "; " : "", ve.msg);
            if (w > 0)
                used = used + (size_t)w < sizeof skipped ? used + (size_t)w : sizeof skipped - 1;
            continue;
        }
        int w = snprintf(dir_out, n, "%s", path);
        if (w < 0 || (size_t)w >= n) {
            rc = moe_errf(e, "%s: path does not fit the %zu-byte buffer", path, n);
        } else {
            *step_out = c[i].step;
            rc = 0;
        }
        break;
    }
    free(c);
    if (rc != -1 && e)
        snprintf(e->msg, sizeof e->msg, "%s", skipped);
    return rc;
}

int ckpt_count(const char *root, int64_t *newest, moe_err *e)
{
    candidate *c;
    size_t n;
    int rc = list_candidates(root, 1, &c, &n, e);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    *newest = n ? c[0].step : -1;
    free(c);
    return (int)n;
}

int ckpt_remove_all(const char *root, moe_err *e)
{
    candidate *c;
    size_t n;
    int rc = list_candidates(root, 1, &c, &n, e);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = discard(root, c[i].name, e);
    free(c);
    return rc;
}

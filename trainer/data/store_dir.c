/* moe-data prepare around the workers: the inputs' sizes and dates, the
 * up-to-date check, the temporary directory (store_tmp.h: its own name and
 * owner lock, so concurrent prepares never remove each other's), the index,
 * and the rename that makes a finished store appear at once. */
#include "store_prepare.h"
#include "store_tmp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


static int stat_inputs(prep *p, moe_err *e)
{
    for (size_t i = 0; i < p->n; i++) {
        struct stat st;
        const char *path = p->paths[i];
        if (stat(path, &st) != 0)
            return moe_err_errno(e, errno, "%s: cannot open FASTA file", path);
        if (S_ISDIR(st.st_mode))
            return moe_errf(e, "%s: is a directory, not a FASTA file", path);
        if (S_ISFIFO(st.st_mode))
            return moe_errf(e, "%s: is a FIFO (named pipe), not a regular file: write the FASTA to "
                            "a file first", path);
        if (!S_ISREG(st.st_mode))
            return moe_errf(e, "%s: is not a regular file", path);
        size_t len = strlen(path);
        if (len >= UINT32_MAX)
            return moe_errf(e, "input %zu: path too long", i);
        p->files[i].path_offset = p->paths_size;
        p->files[i].path_len = (uint32_t)len;
        p->files[i].size = (uint64_t)st.st_size;
        p->files[i].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        p->paths_size += len + 1;
        p->input_bytes += (uint64_t)st.st_size;
    }
    return 0;
}

/* 1 when dir holds a store of exactly these inputs (paths, sizes, mtimes). */
static int up_to_date(const prep *p, const char *dir)
{
    moe_store s;
    moe_err ignored;
    if (store_open(&s, dir, &ignored) < 0)
        return 0;
    int same = s.hdr->n_files == p->n;
    for (size_t i = 0; same && i < p->n; i++) {
        store_file f;
        const char *path;
        same = store_file_at(&s, i, &f, &path, &ignored) == 0 && f.size == p->files[i].size &&
               f.mtime_ns == p->files[i].mtime_ns && !strcmp(path, p->paths[i]);
    }
    store_close(&s);
    return same;
}

/* out may be replaced only when it is a store (or a damaged one): a
 * directory holding nothing but a store's files. */
static int check_replaceable(const char *out, moe_err *e)
{
    struct stat st;
    if (lstat(out, &st) != 0)
        return errno == ENOENT ? 0 : moe_err_errno(e, errno, "%s", out);
    if (!S_ISDIR(st.st_mode))
        return moe_errf(e, "%s exists and is not a token store directory: not replacing it", out);
    DIR *d = opendir(out);
    if (!d)
        return moe_err_errno(e, errno, "%s", out);
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            strcmp(de->d_name, STORE_TOKENS_FILE) && strcmp(de->d_name, STORE_INDEX_FILE)) {
            rc = moe_errf(e, "%s exists and holds '%s', which is not part of a token store: not "
                          "replacing it (choose another --out)", out, de->d_name);
            break;
        }
    closedir(d);
    return rc;
}

static int open_out(const char *dir, const char *name, char *path, size_t cap, moe_err *e)
{
    snprintf(path, cap, "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return moe_err_errno(e, errno, "cannot create %s", path);
    return fd;
}

static int make_tmp(prep *p, const char *out, moe_err *e)
{
    if (store_tmp_create(out, p->tmp_dir, sizeof p->tmp_dir, &p->lock_fd, e) < 0) {
        p->tmp_dir[0] = '\0';
        return -1;
    }
    if ((p->tok_fd = open_out(p->tmp_dir, STORE_TOKENS_FILE, p->tok_path, sizeof p->tok_path, e)) < 0 ||
        (p->rec_fd = open_out(p->tmp_dir, "records.tmp", p->rec_path, sizeof p->rec_path, e)) < 0 ||
        (p->names_fd = open_out(p->tmp_dir, "names.tmp", p->names_path, sizeof p->names_path, e)) < 0)
        return -1;
    return 0;
}

/* The CRC-32 of every STORE_CHUNK_BYTES of the tables, as they are written. */
typedef struct {
    uint32_t *crc;
    uint64_t n, pos;           /* chunks; bytes of the tables so far */
} chunk_sums;

static void chunk_feed(chunk_sums *c, const uint8_t *p, uint64_t n)
{
    while (n > 0) {
        uint64_t room = STORE_CHUNK_BYTES - c->pos % STORE_CHUNK_BYTES, take = n < room ? n : room;
        uint64_t k = c->pos / STORE_CHUNK_BYTES;
        c->crc[k] = store_crc32(c->crc[k], p, take);
        c->pos += take;
        p += take;
        n -= take;
    }
}

static int write_table(int fd, const char *path, const void *data, size_t n, chunk_sums *c,
                       moe_err *e)
{
    chunk_feed(c, data, n);
    return write_all(fd, data, n, path, e);
}

/* Append the whole of src_fd to fd, through the chunk sums. */
static int copy_into(int fd, const char *path, int src_fd, const char *src, chunk_sums *c,
                     moe_err *e)
{
    static __thread uint8_t buf[1 << 20];
    if (lseek(src_fd, 0, SEEK_SET) != 0)
        return moe_err_errno(e, errno, "cannot rewind %s", src);
    for (;;) {
        ssize_t r = read(src_fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return moe_err_errno(e, errno, "cannot read %s", src);
        if (r == 0)
            return 0;
        if (write_table(fd, path, buf, (size_t)r, c, e) < 0)
            return -1;
    }
}

static int write_index(prep *p, moe_err *e)
{
    char path[4300];
    int fd = open_out(p->tmp_dir, STORE_INDEX_FILE, path, sizeof path, e);
    if (fd < 0)
        return -1;
    store_header h = {.version = STORE_VERSION, .header_size = sizeof h};
    memcpy(h.magic, STORE_MAGIC, 8);
    snprintf(h.tokenizer, sizeof h.tokenizer, "%s", STORE_TOKENIZER);
    h.n_files = p->n;
    h.n_records = p->n_records;
    h.n_tokens = p->tok_off;
    h.n_bases = p->n_bases;
    h.files_offset = sizeof h;
    h.records_offset = h.files_offset + p->n * sizeof(store_file);
    h.names_offset = h.records_offset + p->n_records * sizeof(store_record);
    h.names_size = p->paths_size + p->names_off;
    h.tokens_crc32 = p->crc_all;
    uint64_t tables = h.names_offset + h.names_size - sizeof h;
    chunk_sums c = {.n = (tables + STORE_CHUNK_BYTES - 1) / STORE_CHUNK_BYTES};
    int rc = -1;
    if (!(c.crc = calloc(c.n ? c.n : 1, sizeof *c.crc))) {
        moe_errf(e, "%s: out of memory for %" PRIu64 " chunk checksums", path, c.n);
        goto out;
    }
    if (lseek(fd, sizeof h, SEEK_SET) != (off_t)sizeof h ||
        write_table(fd, path, p->files, p->n * sizeof(store_file), &c, e) < 0 ||
        copy_into(fd, path, p->rec_fd, p->rec_path, &c, e) < 0)
        goto out;
    for (size_t i = 0; i < p->n; i++)
        if (write_table(fd, path, p->paths[i], p->files[i].path_len + 1, &c, e) < 0)
            goto out;
    if (copy_into(fd, path, p->names_fd, p->names_path, &c, e) < 0)
        goto out;
    if (c.pos != tables) {
        moe_errf(e, "%s: wrote %" PRIu64 " bytes of tables, expected %" PRIu64, path, c.pos, tables);
        goto out;
    }
    if (write_all(fd, c.crc, c.n * sizeof *c.crc, path, e) < 0)
        goto out;
    h.chunks_crc32 = store_crc32(0, c.crc, c.n * sizeof *c.crc);
    h.header_crc32 = store_crc32(0, &h, sizeof h);
    if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || fsync(fd) != 0) {
        moe_err_errno(e, errno, "cannot write %s", path);
        goto out;
    }
    rc = 0;
out:
    free(c.crc);
    close(fd);
    return rc;
}

/* Make the finished temporary directory the store: a plain rename when
 * there is none yet, else an atomic exchange with the old one. */
static int publish(prep *p, const char *out, moe_err *e)
{
    if (fsync(p->tok_fd) != 0)
        return moe_err_errno(e, errno, "cannot write %s", p->tok_path);
    unlink(p->rec_path);
    unlink(p->names_path);
    store_tmp_disown(p->tmp_dir);
    if (rename(p->tmp_dir, out) == 0)
        return 0;
    if (errno != ENOTEMPTY && errno != EEXIST)
        return moe_err_errno(e, errno, "cannot rename %s to %s", p->tmp_dir, out);
    if (renameat2(AT_FDCWD, p->tmp_dir, AT_FDCWD, out, RENAME_EXCHANGE) != 0)
        return moe_err_errno(e, errno, "cannot replace %s with %s", out, p->tmp_dir);
    store_remove_flat_dir(p->tmp_dir); /* now the old store */
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static int run(prep *p, const char *out, moe_err *e)
{
    if (check_replaceable(out, e) < 0)
        return -1;
    store_tmp_remove_stale(out);
    if (make_tmp(p, out, e) < 0)
        return -1;
    int threads = p->o->threads > 0 ? p->o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1)
        threads = 1;
    if ((size_t)threads > p->n)
        threads = (int)p->n;
    if (prep_run_workers(p, threads, e) < 0 || write_index(p, e) < 0 || publish(p, out, e) < 0)
        return -1;
    return 0;
}

int store_prepare(const char *out_dir, const char *const *paths, size_t n,
                  const store_prepare_opts *o, store_prepare_result *res, moe_err *e)
{
    memset(res, 0, sizeof *res);
    if (n == 0)
        return moe_errf(e, "no input files");
    prep p = {.paths = paths, .n = n, .o = o, .tok_fd = -1, .rec_fd = -1, .names_fd = -1,
              .lock_fd = -1};
    p.t_start = prep_now();
    p.files = calloc(n, sizeof *p.files);
    if (!p.files)
        return moe_errf(e, "out of memory for %zu input files", n);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    int rc = stat_inputs(&p, e);
    res->n_files = n;
    res->input_bytes = p.input_bytes;
    if (rc == 0 && !o->force && up_to_date(&p, out_dir)) {
        res->up_to_date = 1;
    } else if (rc == 0) {
        rc = run(&p, out_dir, e);
        close_fd(&p.tok_fd);
        close_fd(&p.rec_fd);
        close_fd(&p.names_fd);
        if (rc < 0 && p.tmp_dir[0])
            store_remove_flat_dir(p.tmp_dir);
        close_fd(&p.lock_fd); /* after the directory is gone or published */
        res->n_records = p.n_records;
        res->n_bases = p.n_bases;
    }
    res->seconds = prep_now() - p.t_start;
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    free(p.files);
    return rc;
}

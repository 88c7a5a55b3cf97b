/* moekit checkpoints: files hashed while written (hashed_file.h). */
#include "hashed_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsio.h"

int hashed_file_create(hashed_file *f, const char *path, uint64_t block_bytes, moe_err *e)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path)
        return moe_errf(e, "%s: path too long", path);
    f->block_bytes = block_bytes;
    if (sha256_init(&f->whole, e) || (block_bytes && sha256_init(&f->block, e))) {
        sha256_free(&f->whole);
        return moe_err_prefix(e, "%s", path);
    }
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        int err = errno;
        sha256_free(&f->whole);
        sha256_free(&f->block);
        return moe_err_errno(e, err, "%s: create", path);
    }
    return 0;
}

static int end_block(hashed_file *f, moe_err *e)
{
    if (f->n_blocks == f->cap) {
        int cap = f->cap ? 2 * f->cap : 256;
        sha256_hexbuf *b = realloc(f->blocks, (size_t)cap * sizeof *b);
        if (!b)
            return moe_errf(e, "%s: out of memory for block digests", f->path);
        f->blocks = b;
        f->cap = cap;
    }
    uint8_t d[SHA256_DIGEST_LEN];
    sha256_final(&f->block, d);
    sha256_hex(d, f->blocks[f->n_blocks++]);
    f->in_block = 0;
    return 0;
}

static int blocks_update(hashed_file *f, const uint8_t *p, size_t n, moe_err *e)
{
    for (size_t done = 0; done < n;) {
        size_t take = n - done;
        if (take > f->block_bytes - f->in_block)
            take = (size_t)(f->block_bytes - f->in_block);
        sha256_update(&f->block, p + done, take);
        f->in_block += take;
        done += take;
        if (f->in_block == f->block_bytes && (end_block(f, e) || sha256_init(&f->block, e)))
            return moe_err_prefix(e, "%s", f->path);
    }
    return 0;
}

/* The block digests on a second thread, beside the file's digest and the
 * write: one core's SHA-256 rate per stream, however many digests. */
int hashed_file_write(hashed_file *f, const void *data, size_t n, moe_err *e)
{
    const uint8_t *p = data;
    int blocks_rc = 0, write_err = 0;
    moe_err be = {{0}};
#pragma omp parallel sections num_threads(2) if (f->block_bytes && n >= ((size_t)1 << 20))
    {
#pragma omp section
        {
            sha256_update(&f->whole, p, n);
            if (fsio_write_full(f->fd, p, n))
                write_err = errno ? errno : EIO;
        }
#pragma omp section
        {
            if (f->block_bytes)
                blocks_rc = blocks_update(f, p, n, &be);
        }
    }
    if (write_err)
        return moe_err_errno(e, write_err, "%s: write", f->path);
    if (blocks_rc) {
        if (e)
            *e = be;
        return -1;
    }
    f->size += n;
    return 0;
}

int hashed_file_finish(hashed_file *f, moe_err *e)
{
    if (f->block_bytes && f->in_block && end_block(f, e))
        return -1;
    sha256_free(&f->block);
    uint8_t d[SHA256_DIGEST_LEN];
    sha256_final(&f->whole, d);
    sha256_hex(d, f->hex);
    int fd = f->fd;
    f->fd = -1;
    if (fsync(fd) != 0 && errno != EINVAL) { /* EINVAL: a device that has nothing to sync */
        int err = errno;
        close(fd);
        return moe_err_errno(e, err, "%s: fsync", f->path);
    }
    if (close(fd) != 0)
        return moe_err_errno(e, errno, "%s: close", f->path);
    return 0;
}

void hashed_file_abort(hashed_file *f)
{
    if (f->fd >= 0) {
        close(f->fd);
        unlink(f->path);
    }
    f->fd = -1;
    sha256_free(&f->whole);
    sha256_free(&f->block);
    hashed_file_free(f);
}

void hashed_file_free(hashed_file *f)
{
    free(f->blocks);
    f->blocks = NULL;
    f->n_blocks = f->cap = 0;
}

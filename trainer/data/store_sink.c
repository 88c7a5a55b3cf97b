/* Bounded output buffers of moe-data prepare (see store_sink.h). */
#include "store_sink.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int write_all(int fd, const void *data, size_t n, const char *path, moe_err *e)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return moe_err_errno(e, errno, "cannot write %s%s", path,
                                 errno == ENOSPC ? " (the disk is full)" : "");
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int sink_init(store_sink *s, const char *what, size_t cap, size_t unit, const char *spill_path,
              moe_err *e)
{
    memset(s, 0, sizeof *s);
    s->what = what;
    s->cap = cap;
    s->unit = unit;
    s->spill_fd = -1;
    s->direct_fd = -1;
    snprintf(s->spill_path, sizeof s->spill_path, "%s", spill_path);
    s->buf = malloc(cap);
    if (!s->buf)
        return moe_errf(e, "out of memory for a %zu-byte %s buffer", cap, what);
    return 0;
}

void sink_free(store_sink *s)
{
    if (s->spill_fd >= 0) {
        close(s->spill_fd);
        unlink(s->spill_path);
    }
    free(s->buf);
    s->buf = NULL;
    s->spill_fd = -1;
}

void sink_reset(store_sink *s)
{
    s->len = 0;
    s->spilled = 0;
    s->total = 0;
    s->direct_fd = -1;
    if (s->spill_fd >= 0 && lseek(s->spill_fd, 0, SEEK_SET) == 0 && ftruncate(s->spill_fd, 0) != 0)
        (void)0; /* a stale tail is never read: spilled says how much counts */
}

static int spill(store_sink *s, moe_err *e)
{
    if (s->spill_fd < 0) {
        s->spill_fd = open(s->spill_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (s->spill_fd < 0)
            return moe_err_errno(e, errno, "cannot create the spill file %s", s->spill_path);
    }
    if (s->len && write_all(s->spill_fd, s->buf, s->len, s->spill_path, e) < 0)
        return -1;
    s->spilled += s->len;
    s->len = 0;
    return 0;
}

int sink_append(store_sink *s, const void *data, size_t n, moe_err *e)
{
    const uint8_t *p = data;
    while (n > 0) {
        if (s->len == s->cap) {
            int rc = s->direct_fd >= 0 ? sink_drain(s, s->direct_fd, s->direct_path, e)
                                       : spill(s, e);
            if (rc < 0)
                return -1;
        }
        size_t take = s->cap - s->len < n ? s->cap - s->len : n;
        memcpy(s->buf + s->len, p, take);
        s->len += take;
        s->total += take;
        p += take;
        n -= take;
    }
    return 0;
}

/* The spill file's bytes to fd, through the memory buffer when a fix-up
 * must see them (the buffer was just emptied into the spill). */
static int drain_spill(store_sink *s, int fd, const char *path, moe_err *e)
{
    if (lseek(s->spill_fd, 0, SEEK_SET) != 0)
        return moe_err_errno(e, errno, "cannot rewind %s", s->spill_path);
    uint64_t left = s->spilled;
    size_t piece_max = s->cap - s->cap % s->unit;
    while (left > 0) {
        size_t piece = left < piece_max ? (size_t)left : piece_max;
        ssize_t r = read(s->spill_fd, s->buf, piece);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return moe_err_errno(e, r < 0 ? errno : EIO, "cannot read back %s", s->spill_path);
        if ((size_t)r % s->unit)
            return moe_errf(e, "%s: short read of whole %s entries", s->spill_path, s->what);
        if (s->fixup)
            s->fixup(s->buf, (size_t)r, s->fixup_ctx);
        if (write_all(fd, s->buf, (size_t)r, path, e) < 0)
            return -1;
        left -= (uint64_t)r;
    }
    s->spilled = 0;
    if (ftruncate(s->spill_fd, 0) != 0 || lseek(s->spill_fd, 0, SEEK_SET) != 0)
        return moe_err_errno(e, errno, "cannot empty %s", s->spill_path);
    return 0;
}

int sink_drain(store_sink *s, int fd, const char *path, moe_err *e)
{
    if (s->spilled) {
        if (spill(s, e) < 0 || drain_spill(s, fd, path, e) < 0)
            return -1;
    }
    if (s->len) {
        if (s->fixup)
            s->fixup(s->buf, s->len, s->fixup_ctx);
        if (write_all(fd, s->buf, s->len, path, e) < 0)
            return -1;
        s->len = 0;
    }
    return 0;
}

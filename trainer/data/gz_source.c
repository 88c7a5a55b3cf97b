/* Plain or multi-member gzip input with the bytes after the last member
 * counted (gz_source.h). */
#include "gz_source.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GZ_IN_CHUNK (1u << 18)

/* Read more of the file after what zs still holds; 0 at the file's end. */
static long refill(gz_source *s, moe_err *e)
{
    if (s->zs.avail_in > 0 && s->zs.next_in != s->in)
        memmove(s->in, s->zs.next_in, s->zs.avail_in);
    s->zs.next_in = s->in;
    for (;;) {
        ssize_t r = read(s->fd, s->in + s->zs.avail_in, s->in_cap - s->zs.avail_in);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return moe_err_errno(e, errno, "cannot read");
        s->zs.avail_in += (uInt)r;
        s->file_read += (uint64_t)r;
        return r;
    }
}

int gz_source_open(gz_source *s, int fd, const char *path, moe_err *e)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->fd = fd;
    s->in_cap = GZ_IN_CHUNK;
    if (!(s->in = malloc(s->in_cap)))
        return moe_errf(e, "%s: out of memory for the read buffer", path);
    s->zs.next_in = s->in;
    while (s->zs.avail_in < 2) {
        long r = refill(s, e);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
    }
    s->gzip = s->zs.avail_in >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b;
    if (s->gzip && inflateInit2(&s->zs, 15 + 16) != Z_OK)
        return moe_errf(e, "%s: cannot start the gzip decoder", path);
    s->in_member = s->gzip;
    return 0;
}

/* After a member's end: another member, the file's end, or trailing bytes. */
static int next_member(gz_source *s, moe_err *e)
{
    while (s->zs.avail_in < 2) {
        long r = refill(s, e);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
    }
    if (s->zs.avail_in >= 2 && s->zs.next_in[0] == 0x1f && s->zs.next_in[1] == 0x8b) {
        inflateReset(&s->zs);
        s->in_member = 1;
        return 0;
    }
    /* not gzip: count what is left, without reading it */
    s->trailing = s->zs.avail_in;
    off_t here = lseek(s->fd, 0, SEEK_CUR), end = lseek(s->fd, 0, SEEK_END);
    if (here >= 0 && end > here)
        s->trailing += (uint64_t)(end - here);
    s->zs.avail_in = 0;
    s->ended = 1;
    return 0;
}

long gz_source_read(gz_source *s, unsigned char *buf, size_t cap, moe_err *e)
{
    if (s->ended || cap == 0)
        return 0;
    if (!s->gzip) {
        if (s->zs.avail_in == 0 && refill(s, e) < 0)
            return -1;
        size_t n = s->zs.avail_in < cap ? s->zs.avail_in : cap;
        memcpy(buf, s->zs.next_in, n);
        s->zs.next_in += n;
        s->zs.avail_in -= (uInt)n;
        s->ended = n == 0;
        return (long)n;
    }
    s->zs.next_out = buf;
    s->zs.avail_out = (uInt)(cap < (1u << 30) ? cap : (1u << 30));
    while (s->zs.avail_out > 0 && !s->ended) {
        if (!s->in_member) {
            if (next_member(s, e) < 0)
                return -1;
            continue;
        }
        if (s->zs.avail_in == 0) {
            long r = refill(s, e);
            if (r < 0)
                return -1;
            if (r == 0)
                return moe_errf(e, "unexpected end of file inside a gzip member");
        }
        int z = inflate(&s->zs, Z_NO_FLUSH);
        if (z == Z_STREAM_END)
            s->in_member = 0;
        else if (z == Z_DATA_ERROR || z == Z_NEED_DICT)
            return moe_errf(e, "%s at byte %llu", s->zs.msg ? s->zs.msg : "invalid gzip data",
                            (unsigned long long)gz_source_offset(s));
        else if (z == Z_MEM_ERROR)
            return moe_errf(e, "out of memory in the gzip decoder");
        else if (z != Z_OK && z != Z_BUF_ERROR)
            return moe_errf(e, "gzip decoder error %d", z);
    }
    return (long)((unsigned char *)s->zs.next_out - buf);
}

uint64_t gz_source_offset(const gz_source *s)
{
    return s->file_read - s->zs.avail_in;
}

void gz_source_close(gz_source *s)
{
    if (s->gzip)
        inflateEnd(&s->zs);
    free(s->in);
    s->in = NULL;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

/* FASTA reader: plain or gzip (gz_source.h), in 1 MiB
 * chunks, one table lookup per byte. fasta_read gathers a record's sequence
 * in one growing buffer and hands over whole records; fasta_stream hands the
 * bases over chunk by chunk, so its memory stays bounded whatever the record
 * length. Both run the same parser. */
#include "data.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gz_source.h"

#define FASTA_CHUNK (1u << 20)
/* Longer headers are cut here; the rest of the line is still read. */
#define FASTA_HEADER_MAX 1024

/* What a byte means on a sequence line. */
enum { B_BAD = 0, B_BASE, B_SKIP, B_NEWLINE, B_CONTROL };

enum {
    ST_LINE_START, /* first byte of a line decides its kind */
    ST_HEADER,     /* after '>' */
    ST_COMMENT,    /* after ';' */
    ST_SEQ,        /* sequence line of a record */
    ST_PRELUDE,    /* before the first header: only blank lines allowed */
};

typedef struct {
    const char *path;
    moe_fasta_record_fn fn;
    const moe_fasta_stream *stream; /* NULL: whole records through fn */
    void *ctx;
    unsigned char cls[256];
    unsigned char upper[256];
    int state;
    uint64_t line;       /* current line, 1-based */
    uint64_t line_start; /* file offset of the current line's first byte */
    uint64_t offset;     /* file offset of the chunk being parsed */
    /* the record being read */
    int in_record;
    uint64_t n_records, rec_line;
    char header[FASTA_HEADER_MAX];
    size_t header_len;
    uint8_t *seq;
    size_t len, cap;
    uint64_t streamed; /* bases of the current record already handed to stream->bases */
} fasta_reader;

static void build_tables(fasta_reader *r)
{
    memset(r->cls, B_BAD, sizeof r->cls);
    memset(r->upper, 0, sizeof r->upper);
    for (int c = 0; c < 0x20; c++)
        r->cls[c] = B_CONTROL;
    r->cls[0x7f] = B_CONTROL;
    r->cls['\t'] = r->cls['\r'] = r->cls[' '] = B_SKIP;
    r->cls['-'] = r->cls['*'] = B_SKIP; /* gaps and end marks carry no base */
    r->cls['\n'] = B_NEWLINE;
    for (const char *p = "ACGTURYKMSWBDHVN"; *p; p++) {
        int uc = (unsigned char)*p, lc = uc - 'A' + 'a';
        r->cls[uc] = r->cls[lc] = B_BASE;
        r->upper[uc] = r->upper[lc] = (unsigned char)uc;
    }
}

/* "'J' (0x4a)" for printable bytes, "byte 0xff" otherwise. */
static const char *describe_byte(unsigned char c, char *buf, size_t cap)
{
    if (c > 0x20 && c < 0x7f)
        snprintf(buf, cap, "'%c' (0x%02x)", c, c);
    else
        snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

/* Error at file offset pos of the current line: "path:line:col: ...". */
__attribute__((format(printf, 4, 5)))
static int fail_at(const fasta_reader *r, moe_err *e, uint64_t pos, const char *fmt, ...)
{
    char what[MOE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return moe_errf(e, "%s:%" PRIu64 ":%" PRIu64 ": %s", r->path, r->line, pos - r->line_start + 1,
                    what);
}

static int fail_control(const fasta_reader *r, moe_err *e, uint64_t pos, unsigned char c)
{
    return fail_at(r, e, pos, "control byte 0x%02x: not a text FASTA file (binary data?)", c);
}

static int reserve(fasta_reader *r, size_t need, moe_err *e)
{
    if (need <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap : FASTA_CHUNK;
    while (cap < need)
        cap *= 2;
    uint8_t *p = realloc(r->seq, cap);
    if (!p)
        return moe_errf(e, "%s: out of memory holding %zu bases of record '%s'", r->path, need,
                        r->header);
    r->seq = p;
    r->cap = cap;
    return 0;
}

static moe_fasta_record current_record(const fasta_reader *r, const uint8_t *seq, uint64_t len)
{
    moe_fasta_record rec = {
        .path = r->path, .header = r->header, .index = r->n_records, .line = r->rec_line,
        .seq = seq, .len = (size_t)len,
    };
    return rec;
}

/* Streaming: hand the bases parsed so far to the caller and reuse the buffer. */
static int flush_bases(fasta_reader *r, moe_err *e)
{
    if (!r->stream || r->len == 0)
        return 0;
    moe_fasta_record rec = current_record(r, NULL, r->streamed + r->len);
    uint64_t n = r->len;
    r->len = 0;
    r->streamed += n;
    return r->stream->bases(&rec, r->seq, (size_t)n, r->ctx, e);
}

static int finish_record(fasta_reader *r, moe_err *e)
{
    if (!r->in_record)
        return 0;
    r->in_record = 0;
    if (flush_bases(r, e) < 0)
        return -1;
    uint64_t total = r->stream ? r->streamed : r->len;
    if (total == 0)
        return moe_errf(e, "%s:%" PRIu64 ": record '%s' has no sequence (a header must be followed by "
                        "at least one base)", r->path, r->rec_line, r->header);
    moe_fasta_record rec = current_record(r, r->stream ? NULL : r->seq, total);
    r->n_records++;
    r->len = 0;
    r->streamed = 0;
    if (r->stream)
        return r->stream->record_end(&rec, r->ctx, e);
    if (r->fn && r->fn(&rec, r->ctx, e) < 0)
        return -1;
    return 0;
}

static void end_header(fasta_reader *r)
{
    /* drop the CR of CRLF files and trailing blanks */
    while (r->header_len > 0 && (r->header[r->header_len - 1] == '\r' ||
                                 r->header[r->header_len - 1] == ' ' ||
                                 r->header[r->header_len - 1] == '\t'))
        r->header_len--;
    r->header[r->header_len] = '\0';
}

static void next_line(fasta_reader *r, size_t i)
{
    r->line++;
    r->line_start = r->offset + i + 1;
    r->state = ST_LINE_START;
}

/* Parse one chunk. The caller has reserved room for n more bases, so the
 * sequence loop stores without bounds checks. */
static int parse_chunk(fasta_reader *r, const unsigned char *buf, size_t n, moe_err *e)
{
    char bd[32];
    size_t i = 0;
    while (i < n) {
        unsigned char c = buf[i];
        switch (r->state) {
        case ST_LINE_START:
            if (c == '>') {
                if (finish_record(r, e) < 0)
                    return -1;
                r->in_record = 1;
                r->rec_line = r->line;
                r->header_len = 0;
                r->header[0] = '\0';
                r->state = ST_HEADER;
                i++;
            } else if (c == ';') {
                r->state = ST_COMMENT;
                i++;
            } else {
                r->state = r->in_record ? ST_SEQ : ST_PRELUDE;
            }
            break;
        case ST_HEADER:
        case ST_COMMENT:
            for (; i < n; i++) {
                c = buf[i];
                if (c == '\n')
                    break;
                if (r->cls[c] == B_CONTROL)
                    return fail_control(r, e, r->offset + i, c);
                if (r->state == ST_HEADER && r->header_len < FASTA_HEADER_MAX - 1)
                    r->header[r->header_len++] = (char)c;
            }
            if (i < n) {
                if (r->state == ST_HEADER)
                    end_header(r);
                next_line(r, i);
                i++;
            }
            break;
        case ST_PRELUDE:
            for (; i < n; i++) {
                c = buf[i];
                int k = r->cls[c];
                if (k == B_NEWLINE)
                    break;
                if (k == B_CONTROL)
                    return fail_control(r, e, r->offset + i, c);
                if (c != ' ' && c != '\t' && c != '\r')
                    return fail_at(r, e, r->offset + i,
                                   "%s before the first '>' header: not a FASTA file (FASTA starts "
                                   "with a '>' header line; ';' lines are comments)",
                                   describe_byte(c, bd, sizeof bd));
            }
            if (i < n) {
                next_line(r, i);
                i++;
            }
            break;
        case ST_SEQ: {
            uint8_t *out = r->seq + r->len;
            for (; i < n; i++) {
                c = buf[i];
                int k = r->cls[c];
                if (k == B_BASE) {
                    *out++ = r->upper[c];
                } else if (k == B_SKIP) {
                    continue;
                } else if (k == B_NEWLINE) {
                    break;
                } else {
                    r->len = (size_t)(out - r->seq);
                    if (k == B_CONTROL)
                        return fail_control(r, e, r->offset + i, c);
                    return fail_at(r, e, r->offset + i,
                                   "%s in record '%s' is not a nucleotide code (allowed: ACGTU, "
                                   "IUPAC RYKMSWBDHVN, either case; '-' and '*' are dropped)",
                                   describe_byte(c, bd, sizeof bd), r->header);
                }
            }
            r->len = (size_t)(out - r->seq);
            if (i < n) {
                next_line(r, i);
                i++;
            }
            break;
        }
        }
    }
    return 0;
}

static int read_all(fasta_reader *r, gz_source *gz, unsigned char *buf, moe_err *e)
{
    for (;;) {
        if (reserve(r, r->len + FASTA_CHUNK, e) < 0)
            return -1;
        long n = gz_source_read(gz, buf, FASTA_CHUNK, e);
        if (n < 0) {
            char what[MOE_ERR_LEN];
            snprintf(what, sizeof what, "%s", e ? e->msg : "");
            return moe_errf(e, "%s: read error near line %" PRIu64 ": %s%s", r->path, r->line, what,
                            gz->gzip ? " (corrupt or truncated gzip?)" : "");
        }
        if (n == 0)
            return 0;
        size_t skip = 0;
        if (r->offset == 0 && n >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0) {
            /* the UTF-8 byte-order mark some Windows editors write */
            skip = 3;
            r->offset = r->line_start = 3;
        }
        if (parse_chunk(r, buf + skip, (size_t)n - skip, e) < 0)
            return -1;
        r->offset += (uint64_t)n - skip;
        if (r->stream && (flush_bases(r, e) < 0 ||
                          (r->stream->progress &&
                           r->stream->progress(gz_source_offset(gz), r->offset, r->ctx, e) < 0)))
            return -1;
    }
}

/* Only regular files: a FIFO or a device would block or never end, and a
 * directory is not a FASTA file. */
static int check_regular_file(const char *path, moe_err *e)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return moe_err_errno(e, errno, "%s: cannot open FASTA file", path);
    if (S_ISDIR(st.st_mode))
        return moe_errf(e, "%s: is a directory, not a FASTA file", path);
    if (S_ISFIFO(st.st_mode))
        return moe_errf(e, "%s: is a FIFO (named pipe), not a regular file: write the FASTA to a "
                        "file first (moekit reads its inputs more than once)", path);
    if (!S_ISREG(st.st_mode))
        return moe_errf(e, "%s: is not a regular file (a device or socket?), not a FASTA file", path);
    return 0;
}

static int read_file(const char *path, moe_fasta_record_fn fn, const moe_fasta_stream *stream,
                     void *ctx, moe_err *e)
{
    if (check_regular_file(path, e) < 0)
        return -1;
    fasta_reader *r = calloc(1, sizeof *r);
    unsigned char *buf = malloc(FASTA_CHUNK);
    gz_source gz;
    int rc = -1, fd = -1, gz_open = 0;
    if (!r || !buf) {
        moe_errf(e, "%s: out of memory for the read buffers", path);
        goto out;
    }
    r->path = path;
    r->fn = fn;
    r->stream = stream;
    r->ctx = ctx;
    r->line = 1;
    build_tables(r);

    /* read once, front to back: tell the kernel, and drop the pages after
     * (a corpus larger than memory must not push out what training maps) */
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        moe_err_errno(e, errno, "%s: cannot open FASTA file", path);
        goto out;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    int gz_fd = dup(fd);
    if (gz_fd < 0) {
        moe_err_errno(e, errno, "%s: cannot open FASTA file", path);
        goto out;
    }
    gz_open = 1;
    if (gz_source_open(&gz, gz_fd, path, e) < 0 || read_all(r, &gz, buf, e) < 0)
        goto out;
    if (gz.trailing)
        fprintf(stderr, "%s: warning: %s: %" PRIu64 " bytes after the last gzip member are not "
                "gzip data: ignored (a damaged or overwritten file?)\n",
                program_invocation_short_name, path, gz.trailing);
    if (r->offset == 0) {
        moe_errf(e, "%s: empty file (expected FASTA: '>' header lines followed by sequence)", path);
        goto out;
    }
    if (r->state == ST_HEADER)
        end_header(r);
    if (finish_record(r, e) < 0)
        goto out;
    if (r->n_records == 0) {
        moe_errf(e, "%s: no FASTA records (no line starts with '>'; %" PRIu64 " lines read)", path,
                 r->line - (r->line_start == r->offset));
        goto out;
    }
    rc = 0;
out:
    if (gz_open)
        gz_source_close(&gz);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    if (r)
        free(r->seq);
    free(r);
    free(buf);
    return rc;
}

int fasta_read(const char *path, moe_fasta_record_fn fn, void *ctx, moe_err *e)
{
    return read_file(path, fn, NULL, ctx, e);
}

int fasta_stream(const char *path, const moe_fasta_stream *stream, void *ctx, moe_err *e)
{
    return read_file(path, NULL, stream, ctx, e);
}

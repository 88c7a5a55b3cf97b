/* Reading a token store: map its two files read-only and shared (the page
 * cache holds one copy per node, whatever the number of ranks) and check
 * the index before anything trusts it. */
#include "store.h"
#include "store_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

_Static_assert(sizeof(store_header) == 128, "store_header is 128 bytes on disk");
_Static_assert(sizeof(store_file) == 64, "store_file is 64 bytes on disk");
_Static_assert(sizeof(store_record) == 16, "store_record is 16 bytes on disk");

uint32_t store_crc32(uint32_t crc, const void *data, uint64_t n)
{
    const uint8_t *p = data;
    while (n > 0) { /* zlib takes an unsigned int length */
        uInt piece = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, piece);
        p += piece;
        n -= piece;
    }
    return crc;
}

/* Where the chunk table starts and how many chunks cover the tables. */
static uint64_t chunks_offset(const store_header *h)
{
    return h->names_offset + h->names_size;
}

static uint64_t chunk_count(const store_header *h)
{
    uint64_t tables = chunks_offset(h) - sizeof *h;
    return (tables + STORE_CHUNK_BYTES - 1) / STORE_CHUNK_BYTES;
}

/* What opening checks: nothing here reads more than the header and the
 * chunk table (4 bytes per MiB of tables). */
static int check_header(const store_header *h, size_t size, uint64_t tokens_size, const char *what,
                        moe_err *e)
{
    if (size < sizeof *h || memcmp(h->magic, STORE_MAGIC, 8) != 0)
        return moe_errf(e, "%s: not a moekit token store index (no %s header)", what, STORE_MAGIC);
    if (h->version != STORE_VERSION || h->header_size != sizeof *h)
        return moe_errf(e, "%s: store format version %" PRIu32 " (header %" PRIu32 " bytes); this "
                        "moekit reads version %d (16-byte records, checksummed in chunks): prepare "
                        "the store again with this moe-data (moe-data prepare --out STORE ...)",
                        what, h->version, h->header_size, STORE_VERSION);
    store_header copy = *h;
    copy.header_crc32 = 0;
    if (store_crc32(0, &copy, sizeof copy) != h->header_crc32)
        return moe_errf(e, "%s: header checksum mismatch (damaged file)", what);
    if (strncmp(h->tokenizer, STORE_TOKENIZER, sizeof h->tokenizer) != 0)
        return moe_errf(e, "%s: tokenizer '%.32s', this moekit uses '%s'", what, h->tokenizer,
                        STORE_TOKENIZER);
    /* the counts first, so the products below cannot wrap */
    if (h->n_files > size / sizeof(store_file) || h->n_records > size / sizeof(store_record) ||
        h->names_size > size || h->files_offset != sizeof *h ||
        h->records_offset != h->files_offset + h->n_files * sizeof(store_file) ||
        h->names_offset != h->records_offset + h->n_records * sizeof(store_record) ||
        h->names_offset > size || chunks_offset(h) > size ||
        size - chunks_offset(h) != chunk_count(h) * sizeof(uint32_t))
        return moe_errf(e, "%s: tables do not fit the file (%zu bytes): damaged or truncated", what,
                        size);
    if (h->n_tokens != tokens_size)
        return moe_errf(e, "%s: index says %" PRIu64 " tokens but %s holds %" PRIu64 " bytes: the "
                        "two files do not belong together", what, h->n_tokens, STORE_TOKENS_FILE,
                        tokens_size);
    if (h->n_records > h->n_tokens / 3 || h->n_bases + 2 * h->n_records != h->n_tokens ||
        h->n_records < h->n_files || (h->n_files == 0) != (h->n_records == 0))
        return moe_errf(e, "%s: inconsistent counts in the header", what);
    const uint8_t *table = (const uint8_t *)h + chunks_offset(h);
    if (store_crc32(0, table, chunk_count(h) * sizeof(uint32_t)) != h->chunks_crc32)
        return moe_errf(e, "%s: chunk table checksum mismatch (damaged file)", what);
    return 0;
}

/* Attach s to an index in memory (mapped or not): the open checks. */
static int attach(moe_store *s, const uint8_t *index, size_t size, uint64_t tokens_size,
                  moe_err *e)
{
    const store_header *h = (const void *)index;
    if (check_header(h, size, tokens_size, s->what, e) < 0)
        return -1;
    s->hdr = h;
    s->index = index;
    s->index_size = size;
    s->chunk_crc = index + chunks_offset(h);
    s->n_chunks = chunk_count(h);
    s->chunk_ok = calloc(s->n_chunks ? s->n_chunks : 1, 1);
    if (!s->chunk_ok)
        return moe_errf(e, "%s: out of memory for %" PRIu64 " chunk marks", s->what, s->n_chunks);
    return 0;
}

/* Index bytes [off, off + n) of the tables, checked against their chunks'
 * CRCs the first time. */
static int need(moe_store *s, uint64_t off, uint64_t n, moe_err *e)
{
    uint64_t end = chunks_offset(s->hdr);
    if (off < sizeof(store_header) || off > end || n > end - off)
        return moe_errf(e, "%s: entry at byte %" PRIu64 " outside the tables (damaged file)",
                        s->what, off);
    if (n == 0)
        return 0;
    uint64_t first = (off - sizeof(store_header)) / STORE_CHUNK_BYTES;
    uint64_t last = (off + n - 1 - sizeof(store_header)) / STORE_CHUNK_BYTES;
    for (uint64_t c = first; c <= last; c++) {
        if (atomic_load_explicit(&s->chunk_ok[c], memory_order_relaxed))
            continue;
        uint64_t start = sizeof(store_header) + c * STORE_CHUNK_BYTES;
        uint64_t len = end - start < STORE_CHUNK_BYTES ? end - start : STORE_CHUNK_BYTES;
        uint32_t want;
        memcpy(&want, s->chunk_crc + 4 * c, 4); /* the table follows the names: unaligned */
        if (store_crc32(0, s->index + start, len) != want)
            return moe_errf(e, "%s: chunk %" PRIu64 " (bytes %" PRIu64 "-%" PRIu64 " of the "
                            "index) fails its checksum (damaged file)", s->what, c, start,
                            start + len);
        atomic_store_explicit(&s->chunk_ok[c], 1, memory_order_relaxed);
    }
    return 0;
}

static int read_entry(moe_store *s, uint64_t off, void *out, size_t n, moe_err *e)
{
    if (need(s, off, n, e) < 0)
        return -1;
    memcpy(out, s->index + off, n); /* entries need not be aligned in memory */
    return 0;
}

static int record_entry(moe_store *s, uint64_t i, store_record *r, moe_err *e)
{
    return read_entry(s, s->hdr->records_offset + i * sizeof *r, r, sizeof *r, e);
}

int store_record_at(moe_store *s, uint64_t i, uint64_t *offset, uint64_t *length, moe_err *e)
{
    const store_header *h = s->hdr;
    if (i >= h->n_records)
        return moe_errf(e, "%s: record %" PRIu64 " of %" PRIu64 ": no such record", s->what, i,
                        h->n_records);
    store_record r, next = {.offset = h->n_tokens};
    if (record_entry(s, i, &r, e) < 0 || (i + 1 < h->n_records && record_entry(s, i + 1, &next, e) < 0))
        return -1;
    /* records are back to back from 0, each BOS, at least one base, EOS */
    if ((i == 0 && r.offset != 0) || next.offset > h->n_tokens || r.offset > next.offset ||
        next.offset - r.offset < 3)
        return moe_errf(e, "%s: record %" PRIu64 " out of place (offset %" PRIu64 ", next %" PRIu64
                        ", %" PRIu64 " tokens)", s->what, i, r.offset, next.offset, h->n_tokens);
    *offset = r.offset;
    *length = next.offset - r.offset;
    return 0;
}

/* A string that starts at offset, ends with its only NUL at end - 1, inside
 * the names table. */
static int name_at(moe_store *s, uint64_t offset, uint64_t end, const char **name, moe_err *e)
{
    const store_header *h = s->hdr;
    if (offset >= end || end > h->names_size)
        return moe_errf(e, "%s: a name outside the names table (damaged file)", s->what);
    if (need(s, h->names_offset + offset, end - offset, e) < 0)
        return -1;
    const char *p = (const char *)s->index + h->names_offset + offset;
    if (p[end - offset - 1] != '\0' || memchr(p, '\0', end - offset - 1))
        return moe_errf(e, "%s: a name not terminated where the table says (damaged file)",
                        s->what);
    *name = p;
    return 0;
}

int store_record_name(moe_store *s, uint64_t i, const char **name, moe_err *e)
{
    const store_header *h = s->hdr;
    if (i >= h->n_records)
        return moe_errf(e, "%s: record %" PRIu64 ": no such record", s->what, i);
    store_record r, next = {.name_offset = h->names_size};
    if (record_entry(s, i, &r, e) < 0 || (i + 1 < h->n_records && record_entry(s, i + 1, &next, e) < 0))
        return -1;
    if (name_at(s, r.name_offset, next.name_offset, name, e) < 0)
        return moe_err_prefix(e, "record %" PRIu64, i);
    return 0;
}

int store_file_at(moe_store *s, uint64_t f, store_file *out, const char **path, moe_err *e)
{
    const store_header *h = s->hdr;
    if (f >= h->n_files)
        return moe_errf(e, "%s: file %" PRIu64 ": no such file", s->what, f);
    if (read_entry(s, h->files_offset + f * sizeof *out, out, sizeof *out, e) < 0)
        return -1;
    if (out->n_records == 0 || out->first_record >= h->n_records ||
        out->n_records > h->n_records - out->first_record || out->tokens_offset > h->n_tokens ||
        out->n_tokens > h->n_tokens - out->tokens_offset || out->path_len >= h->names_size)
        return moe_errf(e, "%s: file %" PRIu64 ": records or tokens out of place", s->what, f);
    const char *p;
    if (path && name_at(s, out->path_offset, out->path_offset + out->path_len + 1, &p, e) < 0)
        return moe_err_prefix(e, "file %" PRIu64, f);
    if (path)
        *path = p;
    return 0;
}

int store_record_file(moe_store *s, uint64_t i, uint64_t *file, moe_err *e)
{
    /* the last file whose first record is <= i */
    uint64_t lo = 0, hi = s->hdr->n_files;
    store_file f;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (store_file_at(s, mid, &f, NULL, e) < 0)
            return -1;
        if (f.first_record <= i)
            lo = mid;
        else
            hi = mid;
    }
    if (store_file_at(s, lo, &f, NULL, e) < 0)
        return -1;
    if (i < f.first_record || i - f.first_record >= f.n_records)
        return moe_errf(e, "%s: record %" PRIu64 " belongs to no file (damaged file)", s->what, i);
    *file = lo;
    return 0;
}

int store_verify_index(moe_store *s, moe_err *e)
{
    const store_header *h = s->hdr;
    uint64_t tables = chunks_offset(h) - sizeof *h;
    if (need(s, sizeof *h, tables, e) < 0)
        return -1;
    uint64_t next_record = 0, next_token = 0, names_end = 0;
    for (uint64_t f = 0; f < h->n_files; f++) {
        store_file fe;
        const char *path;
        if (store_file_at(s, f, &fe, &path, e) < 0)
            return -1;
        if (fe.first_record != next_record || fe.tokens_offset != next_token ||
            fe.path_offset != names_end)
            return moe_errf(e, "%s: file %" PRIu64 " (%s): records, tokens or path out of order",
                            s->what, f, path);
        uint64_t first_off, len, last_off;
        if (store_record_at(s, fe.first_record, &first_off, &len, e) < 0 ||
            store_record_at(s, fe.first_record + fe.n_records - 1, &last_off, &len, e) < 0)
            return -1;
        if (first_off != fe.tokens_offset || last_off + len != fe.tokens_offset + fe.n_tokens)
            return moe_errf(e, "%s: file %" PRIu64 " (%s): its tokens are not its records' tokens",
                            s->what, f, path);
        next_record += fe.n_records;
        next_token += fe.n_tokens;
        names_end += fe.path_len + 1;
    }
    if (next_record != h->n_records || next_token != h->n_tokens)
        return moe_errf(e, "%s: the files cover %" PRIu64 " of %" PRIu64 " records", s->what,
                        next_record, h->n_records);
    for (uint64_t i = 0; i < h->n_records; i++) {
        uint64_t off, len;
        const char *name;
        store_record r;
        if (store_record_at(s, i, &off, &len, e) < 0 || store_record_name(s, i, &name, e) < 0 ||
            record_entry(s, i, &r, e) < 0)
            return -1;
        if (i == 0 && r.name_offset != names_end)
            return moe_errf(e, "%s: record names do not follow the file paths", s->what);
    }
    return 0;
}

int store_check_index(const uint8_t *index, size_t size, uint64_t tokens_size, const char *what,
                      moe_err *e)
{
    moe_store s;
    memset(&s, 0, sizeof s);
    snprintf(s.what, sizeof s.what, "%s", what);
    int rc = attach(&s, index, size, tokens_size, e) < 0 || store_verify_index(&s, e) < 0 ? -1 : 0;
    free((void *)s.chunk_ok);
    return rc;
}

/* Map a whole file read-only and shared. An empty file maps to NULL. The
 * descriptor is kept open when keep_fd is not NULL. */
static int map_file(const char *dir, const char *name, void **map, size_t *size, int *keep_fd,
                    moe_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return moe_err_errno(e, errno, "token store %s: cannot open %s", dir, name);
    struct stat st;
    int rc = 0;
    *map = NULL;
    *size = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = moe_errf(e, "token store %s: %s is not a regular file", dir, name);
    } else if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            rc = moe_err_errno(e, errno, "token store %s: cannot map %s", dir, name);
        else if (store_guard_map(p, (size_t)st.st_size, path, e) < 0)
            rc = -1;
        else {
            *map = p;
            *size = (size_t)st.st_size;
        }
    }
    if (keep_fd && rc == 0)
        *keep_fd = fd;
    else
        close(fd);
    return rc;
}

int store_open(moe_store *s, const char *dir, moe_err *e)
{
    memset(s, 0, sizeof *s);
    s->tokens_fd = -1;
    struct stat st;
    if (stat(dir, &st) != 0)
        return moe_err_errno(e, errno, "token store %s", dir);
    if (!S_ISDIR(st.st_mode))
        return moe_errf(e, "token store %s: not a directory (a store is the directory moe-data "
                        "prepare --out wrote)", dir);
    snprintf(s->path, sizeof s->path, "%s", dir);
    if (map_file(dir, STORE_INDEX_FILE, &s->index_map, &s->index_size, NULL, e) < 0 ||
        map_file(dir, STORE_TOKENS_FILE, &s->tokens_map, &s->tokens_size, &s->tokens_fd, e) < 0)
        goto fail;
    snprintf(s->what, sizeof s->what, "%s/%s", dir, STORE_INDEX_FILE);
    if (!s->index_map) {
        moe_errf(e, "%s: empty file", s->what);
        goto fail;
    }
    if (attach(s, s->index_map, s->index_size, s->tokens_size, e) < 0)
        goto fail;
    /* the tables are read on demand, in no particular order */
    posix_madvise(s->index_map, s->index_size, POSIX_MADV_RANDOM);
    s->tokens = s->tokens_map;
    /* windows are read in shuffled order: no read-ahead of neighbours */
    posix_fadvise(s->tokens_fd, 0, 0, POSIX_FADV_RANDOM);
    return 0;
fail:
    store_close(s);
    return -1;
}

void store_close(moe_store *s)
{
    if (s->index_map)
        store_unmap(s->index_map, s->index_size);
    free((void *)s->chunk_ok);
    if (s->tokens_map)
        store_unmap(s->tokens_map, s->tokens_size);
    if (s->tokens_fd >= 0)
        close(s->tokens_fd);
    memset(s, 0, sizeof *s);
    s->tokens_fd = -1;
}

void store_release_index(moe_store *s)
{
    if (s->index_map)
        madvise(s->index_map, s->index_size, MADV_DONTNEED);
}

int store_read_tokens(const moe_store *s, uint64_t offset, size_t n, uint8_t *out, moe_err *e)
{
    while (n > 0) {
        ssize_t r = pread(s->tokens_fd, out, n, (off_t)offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return moe_err_errno(e, r < 0 ? errno : EIO, "token store %s: cannot read %s at %llu",
                                 s->path, STORE_TOKENS_FILE, (unsigned long long)offset);
        out += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return 0;
}

int store_verify_tokens(moe_store *s, moe_err *e)
{
    uint32_t whole = 0;
    for (uint64_t i = 0; i < s->hdr->n_files; i++) {
        store_file f;
        const char *path;
        if (store_file_at(s, i, &f, &path, e) < 0)
            return -1;
        uint32_t crc = store_crc32(0, s->tokens + f.tokens_offset, f.n_tokens);
        if (crc != f.tokens_crc32)
            return moe_errf(e, "token store %s: tokens of %s fail their checksum (damaged %s)",
                            s->path, path, STORE_TOKENS_FILE);
        whole = (uint32_t)crc32_combine(whole, crc, (z_off_t)f.n_tokens);
    }
    if (whole != s->hdr->tokens_crc32)
        return moe_errf(e, "token store %s: %s fails its checksum", s->path, STORE_TOKENS_FILE);
    return 0;
}

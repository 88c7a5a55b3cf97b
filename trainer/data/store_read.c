/* Reading a token store: map its two files read-only and shared (the page
 * cache holds one copy per node, whatever the number of ranks) and check
 * the index before anything trusts it. */
#include "store.h"
#include "store_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

_Static_assert(sizeof(store_header) == 128, "store_header is 128 bytes on disk");
_Static_assert(sizeof(store_file) == 64, "store_file is 64 bytes on disk");
_Static_assert(sizeof(store_record) == 32, "store_record is 32 bytes on disk");

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

static int check_header(const store_header *h, size_t size, uint64_t tokens_size, const char *what,
                        moe_err *e)
{
    if (size < sizeof *h || memcmp(h->magic, STORE_MAGIC, 8) != 0)
        return moe_errf(e, "%s: not a moekit token store index (no %s header)", what, STORE_MAGIC);
    if (h->version != STORE_VERSION || h->header_size != sizeof *h)
        return moe_errf(e, "%s: store format version %" PRIu32 " (header %" PRIu32 " bytes); this "
                        "moekit reads version %d: prepare the store again with this moe-data",
                        what, h->version, h->header_size, STORE_VERSION);
    store_header copy = *h;
    copy.header_crc32 = 0;
    if (store_crc32(0, &copy, sizeof copy) != h->header_crc32)
        return moe_errf(e, "%s: header checksum mismatch (damaged file)", what);
    if (strncmp(h->tokenizer, STORE_TOKENIZER, sizeof h->tokenizer) != 0)
        return moe_errf(e, "%s: tokenizer '%.32s', this moekit uses '%s'", what, h->tokenizer,
                        STORE_TOKENIZER);
    uint64_t end_files = h->files_offset + h->n_files * sizeof(store_file);
    uint64_t end_records = h->records_offset + h->n_records * sizeof(store_record);
    if (h->n_files > size || h->n_records > size || h->files_offset != sizeof *h ||
        h->records_offset != end_files || h->names_offset != end_records ||
        h->names_size > size || h->names_offset + h->names_size != size)
        return moe_errf(e, "%s: tables do not fit the file (%zu bytes): damaged or truncated", what,
                        size);
    if (h->n_tokens != tokens_size)
        return moe_errf(e, "%s: index says %" PRIu64 " tokens but %s holds %" PRIu64 " bytes: the "
                        "two files do not belong together", what, h->n_tokens, STORE_TOKENS_FILE,
                        tokens_size);
    if (h->n_bases + 2 * h->n_records != h->n_tokens || h->n_records < h->n_files ||
        (h->names_size && ((const char *)h)[size - 1] != '\0'))
        return moe_errf(e, "%s: inconsistent counts in the header", what);
    if (store_crc32(0, (const uint8_t *)h + sizeof *h, size - sizeof *h) != h->body_crc32)
        return moe_errf(e, "%s: index checksum mismatch (damaged file)", what);
    return 0;
}

/* A string of exactly len bytes then a NUL, inside the names table. */
static int check_name(const char *names, uint64_t offset, uint32_t len, uint64_t names_size)
{
    return offset < names_size && len < names_size - offset && names[offset + len] == '\0' &&
           !memchr(names + offset, '\0', len);
}

static int check_files(const uint8_t *index, const store_header *h, const char *what, moe_err *e)
{
    const store_file *f = (const void *)(index + h->files_offset);
    const char *names = (const char *)index + h->names_offset;
    uint64_t next_record = 0, next_token = 0;
    for (uint64_t i = 0; i < h->n_files; i++) {
        if (!check_name(names, f[i].path_offset, f[i].path_len, h->names_size))
            return moe_errf(e, "%s: file %" PRIu64 ": path outside the names table", what, i);
        if (f[i].first_record != next_record || f[i].n_records == 0 ||
            f[i].n_records > h->n_records - next_record || f[i].tokens_offset != next_token ||
            f[i].n_tokens > h->n_tokens - next_token)
            return moe_errf(e, "%s: file %" PRIu64 " (%s): records or tokens out of order", what, i,
                            names + f[i].path_offset);
        next_record += f[i].n_records;
        next_token += f[i].n_tokens;
    }
    if (next_record != h->n_records || next_token != h->n_tokens)
        return moe_errf(e, "%s: the files cover %" PRIu64 " of %" PRIu64 " records", what,
                        next_record, h->n_records);
    return 0;
}

static int check_records(const uint8_t *index, const store_header *h, const char *what, moe_err *e)
{
    const store_file *f = (const void *)(index + h->files_offset);
    const store_record *r = (const void *)(index + h->records_offset);
    const char *names = (const char *)index + h->names_offset;
    uint64_t next = 0, file = 0;
    for (uint64_t i = 0; i < h->n_records; i++) {
        while (file < h->n_files && i >= f[file].first_record + f[file].n_records)
            file++;
        if (r[i].offset != next || r[i].length < 3 || r[i].length > h->n_tokens - next ||
            r[i].file != file)
            return moe_errf(e, "%s: record %" PRIu64 " out of place (offset %" PRIu64 ", length %"
                            PRIu64 ")", what, i, r[i].offset, r[i].length);
        if (!check_name(names, r[i].name_offset, r[i].name_len, h->names_size))
            return moe_errf(e, "%s: record %" PRIu64 ": name outside the names table", what, i);
        next += r[i].length;
    }
    return 0;
}

int store_check_index(const uint8_t *index, size_t size, uint64_t tokens_size, const char *what,
                      moe_err *e)
{
    const store_header *h = (const void *)index;
    if (check_header(h, size, tokens_size, what, e) < 0 || check_files(index, h, what, e) < 0 ||
        check_records(index, h, what, e) < 0)
        return -1;
    return 0;
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
    char what[4200];
    snprintf(what, sizeof what, "%s/%s", dir, STORE_INDEX_FILE);
    if (!s->index_map) {
        moe_errf(e, "%s: empty file", what);
        goto fail;
    }
    if (store_check_index(s->index_map, s->index_size, s->tokens_size, what, e) < 0)
        goto fail;
    const uint8_t *ix = s->index_map;
    s->hdr = (const void *)ix;
    s->files = (const void *)(ix + s->hdr->files_offset);
    s->records = (const void *)(ix + s->hdr->records_offset);
    s->names = (const char *)ix + s->hdr->names_offset;
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
    if (s->tokens_map)
        store_unmap(s->tokens_map, s->tokens_size);
    if (s->tokens_fd >= 0)
        close(s->tokens_fd);
    memset(s, 0, sizeof *s);
    s->tokens_fd = -1;
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

const char *store_file_path(const moe_store *s, uint64_t file)
{
    return s->names + s->files[file].path_offset;
}

const char *store_record_name(const moe_store *s, uint64_t record)
{
    return s->names + s->records[record].name_offset;
}

int store_verify_tokens(const moe_store *s, moe_err *e)
{
    uint32_t whole = 0;
    for (uint64_t i = 0; i < s->hdr->n_files; i++) {
        const store_file *f = &s->files[i];
        uint32_t crc = store_crc32(0, s->tokens + f->tokens_offset, f->n_tokens);
        if (crc != f->tokens_crc32)
            return moe_errf(e, "token store %s: tokens of %s fail their checksum (damaged %s)",
                            s->path, store_file_path(s, i), STORE_TOKENS_FILE);
        whole = (uint32_t)crc32_combine(whole, crc, (z_off_t)f->n_tokens);
    }
    if (whole != s->hdr->tokens_crc32)
        return moe_errf(e, "token store %s: %s fails its checksum", s->path, STORE_TOKENS_FILE);
    return 0;
}

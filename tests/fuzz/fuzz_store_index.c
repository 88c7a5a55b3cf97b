/* Fuzz the token store's index check (store_check_index, what store_open
 * runs on index.bin before anything trusts it). The first input byte picks
 * the mode: even = the header and body checksums are recomputed over the
 * rest, so the fuzzer gets past them to the tables; odd = the bytes as
 * they are. tokens.bin is taken to be as long as the header says, or one
 * byte shorter when bit 1 is set. An index that passes must be safe to walk:
 * every file path and record name is read through. */
#include "fuzz.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/data/store.h"

FUZZ_TARGET("store_index");

/* Every chunk's CRC where the header says the chunk table is (when it fits
 * the input), then the table's and the header's. */
static void fix_checksums(uint8_t *ix, size_t size)
{
    store_header h;
    memcpy(&h, ix, sizeof h);
    uint64_t table = h.names_offset + h.names_size;
    if (h.names_offset <= size && h.names_size <= size && table >= sizeof h && table <= size) {
        uint64_t tables = table - sizeof h, n = (tables + STORE_CHUNK_BYTES - 1) / STORE_CHUNK_BYTES;
        if (n <= (size - table) / 4) {
            for (uint64_t c = 0; c < n; c++) {
                uint64_t start = sizeof h + c * STORE_CHUNK_BYTES;
                uint64_t len = table - start < STORE_CHUNK_BYTES ? table - start : STORE_CHUNK_BYTES;
                uint32_t crc = store_crc32(0, ix + start, len);
                memcpy(ix + table + 4 * c, &crc, 4);
            }
            h.chunks_crc32 = store_crc32(0, ix + table, 4 * n);
        }
    }
    h.header_crc32 = 0;
    h.header_crc32 = store_crc32(0, &h, sizeof h);
    memcpy(ix, &h, sizeof h);
}

/* An index that passed must be safe to walk through the accessors: every
 * path, record and name read, and the records tile tokens.bin. */
static void walk(const uint8_t *ix, size_t size)
{
    moe_store s;
    memset(&s, 0, sizeof s);
    s.hdr = (const void *)ix;
    s.index = ix;
    s.index_size = size;
    s.chunk_crc = ix + s.hdr->names_offset + s.hdr->names_size;
    s.n_chunks = (size - (s.hdr->names_offset + s.hdr->names_size)) / 4;
    s.chunk_ok = malloc(s.n_chunks + 1);
    if (!s.chunk_ok)
        abort();
    memset(s.chunk_ok, 1, s.n_chunks + 1); /* store_check_index checked them all */
    moe_err e;
    uint64_t total = 0;
    for (uint64_t i = 0; i < s.hdr->n_files; i++) {
        store_file f;
        const char *path;
        if (store_file_at(&s, i, &f, &path, &e) < 0 || strlen(path) != f.path_len)
            abort(); /* the check promised a terminated path of that length */
        total += f.n_tokens;
    }
    uint64_t next = 0;
    for (uint64_t i = 0; i < s.hdr->n_records; i++) {
        uint64_t off, len, file;
        const char *name;
        if (store_record_at(&s, i, &off, &len, &e) < 0 || store_record_name(&s, i, &name, &e) < 0 ||
            store_record_file(&s, i, &file, &e) < 0 || off != next || off + len > s.hdr->n_tokens)
            abort();
        next = off + len;
    }
    if (total != s.hdr->n_tokens || next != s.hdr->n_tokens)
        abort();
    free(s.chunk_ok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    data++, size--;
    uint8_t *ix = malloc(size ? size : 1);
    if (!ix)
        abort();
    if (size)
        memcpy(ix, data, size);
    uint64_t tokens_size = 0;
    if (size >= sizeof(store_header)) {
        if (!(mode & 1))
            fix_checksums(ix, size);
        memcpy(&tokens_size, ix + offsetof(store_header, n_tokens), sizeof tokens_size);
        tokens_size -= (mode & 2) && tokens_size ? 1 : 0;
    }
    moe_err e = {{0}};
    if (store_check_index(ix, size, tokens_size, "fuzz", &e) == 0)
        walk(ix, size);
    else if (e.msg[0] == '\0')
        abort(); /* a refusal says why */
    free(ix);
    return 0;
}

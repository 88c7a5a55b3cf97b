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

static void fix_checksums(uint8_t *ix, size_t size)
{
    store_header h;
    memcpy(&h, ix, sizeof h);
    h.body_crc32 = store_crc32(0, ix + sizeof h, size - sizeof h);
    h.header_crc32 = 0;
    h.header_crc32 = store_crc32(0, &h, sizeof h);
    memcpy(ix, &h, sizeof h);
}

static void walk(const uint8_t *ix)
{
    store_header h;
    memcpy(&h, ix, sizeof h);
    const char *names = (const char *)ix + h.names_offset;
    size_t total = 0;
    for (uint64_t i = 0; i < h.n_files; i++) {
        store_file f;
        memcpy(&f, ix + h.files_offset + i * sizeof f, sizeof f);
        if (strlen(names + f.path_offset) != f.path_len)
            abort(); /* the check promised a terminated path of that length */
        total += f.n_tokens;
    }
    for (uint64_t i = 0; i < h.n_records; i++) {
        store_record r;
        memcpy(&r, ix + h.records_offset + i * sizeof r, sizeof r);
        if (strlen(names + r.name_offset) != r.name_len || r.offset + r.length > h.n_tokens)
            abort();
    }
    if (total != h.n_tokens)
        abort();
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
        walk(ix);
    else if (e.msg[0] == '\0')
        abort(); /* a refusal says why */
    free(ix);
    return 0;
}

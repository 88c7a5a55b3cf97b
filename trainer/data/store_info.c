/* moe-data info: what a token store holds, for humans. */
#include "store.h"

#include <inttypes.h>
#include <stdio.h>

/* The longest record: a pass over every record entry. */
static int print_longest(moe_store *s, moe_err *e)
{
    uint64_t longest = 0, longest_len = 0, off, len, file;
    for (uint64_t i = 0; i < s->hdr->n_records; i++) {
        if (store_record_at(s, i, &off, &len, e) < 0)
            return -1;
        if (len > longest_len) {
            longest = i;
            longest_len = len;
        }
    }
    const char *name, *path;
    store_file f;
    if (store_record_name(s, longest, &name, e) < 0 || store_record_file(s, longest, &file, e) < 0 ||
        store_file_at(s, file, &f, &path, e) < 0)
        return -1;
    printf("longest    '%s' in %s: %" PRIu64 " bases\n", name, path, longest_len - 2);
    return 0;
}

int store_print_info(moe_store *s, int list_files, int scan, moe_err *e)
{
    const store_header *h = s->hdr;
    printf("store      %s\n", s->path);
    printf("format     %.8s version %" PRIu32 ", tokenizer %.32s (uint8 token ids)\n", h->magic,
           h->version, h->tokenizer);
    printf("files      %" PRIu64 "\n", h->n_files);
    printf("records    %" PRIu64 "\n", h->n_records);
    printf("bases      %" PRIu64 " (%.3f Gbases)\n", h->n_bases, (double)h->n_bases / 1e9);
    printf("tokens     %" PRIu64 " in %s (BOS, bases, EOS per record)\n", h->n_tokens,
           STORE_TOKENS_FILE);
    printf("index      %zu bytes in %s (%" PRIu64 " checksummed chunks)\n", s->index_size,
           STORE_INDEX_FILE, s->n_chunks);
    if (scan && h->n_records && print_longest(s, e) < 0)
        return -1;
    printf("checksums  tokens crc32 %08" PRIx32 ", chunk table crc32 %08" PRIx32 "\n",
           h->tokens_crc32, h->chunks_crc32);
    for (uint64_t i = 0; list_files && i < h->n_files; i++) {
        store_file f;
        const char *path;
        if (store_file_at(s, i, &f, &path, e) < 0)
            return -1;
        printf("file %" PRIu64 "  %s  %" PRIu64 " records  %" PRIu64 " bases  crc32 %08" PRIx32
               "\n", i, path, f.n_records, f.n_tokens - 2 * f.n_records, f.tokens_crc32);
    }
    return ferror(stdout) ? -1 : 0;
}

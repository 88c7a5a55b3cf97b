/* moe-data info: what a token store holds, for humans. */
#include "store.h"

#include <inttypes.h>
#include <stdio.h>

int store_print_info(const moe_store *s, int list_files, moe_err *e)
{
    const store_header *h = s->hdr;
    uint64_t longest = 0;
    for (uint64_t i = 1; i < h->n_records; i++)
        if (s->records[i].length > s->records[longest].length)
            longest = i;
    printf("store      %s\n", s->path);
    printf("format     %.8s version %" PRIu32 ", tokenizer %.32s (uint8 token ids)\n", h->magic,
           h->version, h->tokenizer);
    printf("files      %" PRIu64 "\n", h->n_files);
    printf("records    %" PRIu64 "\n", h->n_records);
    printf("bases      %" PRIu64 " (%.3f Gbases)\n", h->n_bases, (double)h->n_bases / 1e9);
    printf("tokens     %" PRIu64 " in %s (BOS, bases, EOS per record)\n", h->n_tokens,
           STORE_TOKENS_FILE);
    printf("index      %zu bytes in %s\n", s->index_size, STORE_INDEX_FILE);
    if (h->n_records)
        printf("longest    '%s' in %s: %" PRIu64 " bases\n", store_record_name(s, longest),
               store_file_path(s, s->records[longest].file), s->records[longest].length - 2);
    printf("checksums  tokens crc32 %08" PRIx32 ", index crc32 %08" PRIx32 " (index verified)\n",
           h->tokens_crc32, h->body_crc32);
    for (uint64_t i = 0; list_files && i < h->n_files; i++) {
        const store_file *f = &s->files[i];
        printf("file %" PRIu64 "  %s  %" PRIu64 " records  %" PRIu64 " bases  crc32 %08" PRIx32
               "\n", i, store_file_path(s, i), f->n_records, f->n_tokens - 2 * f->n_records,
               f->tokens_crc32);
    }
    (void)e;
    return ferror(stdout) ? -1 : 0;
}

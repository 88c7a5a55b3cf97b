/* moekit checkpoints: a file written front to back and hashed as it is
 * written: SHA-256 of the whole file (for MANIFEST and `sha256sum -c`) and,
 * with block_bytes > 0, of each block_bytes-long block (for readers that
 * verify only the parts they read). One pass: the bytes are never read back. */
#ifndef MOE_CKPT_HASHED_FILE_H
#define MOE_CKPT_HASHED_FILE_H

#include <stdint.h>

#include "sha256.h"

typedef char sha256_hexbuf[SHA256_HEX_LEN + 1];

typedef struct {
    int fd;
    char path[4096];
    sha256_ctx whole, block;
    uint64_t block_bytes, in_block, size;
    sha256_hexbuf *blocks; /* finished blocks' digests */
    int n_blocks, cap;
    sha256_hexbuf hex;     /* the whole file's, after finish */
} hashed_file;

/* Create or truncate path. */
int hashed_file_create(hashed_file *f, const char *path, uint64_t block_bytes, moe_err *e);
int hashed_file_write(hashed_file *f, const void *data, size_t n, moe_err *e);
/* Final digests, fsync, close. The file stays; free the digests with
 * hashed_file_free. */
int hashed_file_finish(hashed_file *f, moe_err *e);
/* After a failure: close and remove the partial file, free everything. */
void hashed_file_abort(hashed_file *f);
void hashed_file_free(hashed_file *f);

#endif

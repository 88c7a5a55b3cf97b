/* moekit checkpoints: SHA-256 (FIPS 180-4), for checkpoint manifests. */
#ifndef MOE_CKPT_SHA256_H
#define MOE_CKPT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define SHA256_DIGEST_LEN 32
#define SHA256_HEX_LEN 64

typedef struct {
    uint32_t state[8];
    uint64_t total_bytes;
    uint8_t block[64];
    size_t block_len;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, uint8_t digest[SHA256_DIGEST_LEN]);

/* One-shot digest of a buffer. */
void sha256(const void *data, size_t n, uint8_t digest[SHA256_DIGEST_LEN]);

/* Lower-case hex, NUL-terminated (out holds SHA256_HEX_LEN + 1 bytes). */
void sha256_hex(const uint8_t digest[SHA256_DIGEST_LEN], char *out);

/* Digest and size of an open file descriptor, read from offset 0 to EOF. */
int sha256_fd(int fd, const char *path_for_errors, uint8_t digest[SHA256_DIGEST_LEN], uint64_t *size,
              moe_err *e);

#endif

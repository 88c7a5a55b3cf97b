/* moekit checkpoints: SHA-256 for checkpoint manifests and block hashes,
 * through OpenSSL's libcrypto (EVP), which uses the CPU's SHA instructions
 * (SHA-NI, ARMv8 SHA2) where they exist. */
#ifndef MOE_CKPT_SHA256_H
#define MOE_CKPT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define SHA256_DIGEST_LEN 32
#define SHA256_HEX_LEN 64

typedef struct {
    void *md; /* EVP_MD_CTX */
} sha256_ctx;

/* init allocates (0, or -1 with e filled when out of memory); final frees,
 * and so does sha256_free for a digest abandoned halfway. */
int sha256_init(sha256_ctx *c, moe_err *e);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, uint8_t digest[SHA256_DIGEST_LEN]);
void sha256_free(sha256_ctx *c);

/* One-shot digest of a buffer (0, or -1 when out of memory). */
int sha256(const void *data, size_t n, uint8_t digest[SHA256_DIGEST_LEN], moe_err *e);

/* Lower-case hex, NUL-terminated (out holds SHA256_HEX_LEN + 1 bytes). */
void sha256_hex(const uint8_t digest[SHA256_DIGEST_LEN], char *out);

/* Digest and size of an open file descriptor, read from offset 0 to EOF. */
int sha256_fd(int fd, const char *path_for_errors, uint8_t digest[SHA256_DIGEST_LEN], uint64_t *size,
              moe_err *e);

#endif

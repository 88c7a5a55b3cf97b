/* moekit checkpoints: SHA-256 through libcrypto's EVP interface (sha256.h). */
#include "sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <unistd.h>

int sha256_init(sha256_ctx *c, moe_err *e)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        c->md = NULL;
        return moe_errf(e, "SHA-256: libcrypto could not start a digest (out of memory?)");
    }
    c->md = md;
    return 0;
}

void sha256_update(sha256_ctx *c, const void *data, size_t n)
{
    /* EVP_DigestUpdate fails only on a context that was never initialised */
    if (n)
        EVP_DigestUpdate(c->md, data, n);
}

void sha256_final(sha256_ctx *c, uint8_t digest[SHA256_DIGEST_LEN])
{
    unsigned int len = SHA256_DIGEST_LEN;
    EVP_DigestFinal_ex(c->md, digest, &len);
    sha256_free(c);
}

void sha256_free(sha256_ctx *c)
{
    EVP_MD_CTX_free(c->md);
    c->md = NULL;
}

int sha256(const void *data, size_t n, uint8_t digest[SHA256_DIGEST_LEN], moe_err *e)
{
    unsigned int len = SHA256_DIGEST_LEN;
    if (EVP_Digest(data, n, digest, &len, EVP_sha256(), NULL) != 1)
        return moe_errf(e, "SHA-256: libcrypto failed (out of memory?)");
    return 0;
}

void sha256_hex(const uint8_t digest[SHA256_DIGEST_LEN], char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_DIGEST_LEN; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 15];
    }
    out[SHA256_HEX_LEN] = '\0';
}

int sha256_fd(int fd, const char *path_for_errors, uint8_t digest[SHA256_DIGEST_LEN], uint64_t *size,
              moe_err *e)
{
    enum { BUF = 4 << 20 };
    uint8_t *buf = malloc(BUF);
    if (!buf)
        return moe_errf(e, "%s: out of memory", path_for_errors);
    sha256_ctx c;
    if (sha256_init(&c, e)) {
        free(buf);
        return moe_err_prefix(e, "%s", path_for_errors);
    }
    off_t at = 0;
    int rc = 0;
    for (;;) {
        ssize_t r = pread(fd, buf, BUF, at);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = moe_err_errno(e, errno, "%s: read", path_for_errors);
            break;
        }
        if (r == 0)
            break;
        sha256_update(&c, buf, (size_t)r);
        at += r;
    }
    free(buf);
    if (rc == 0) {
        sha256_final(&c, digest);
        *size = (uint64_t)at;
    } else {
        sha256_free(&c);
    }
    return rc;
}

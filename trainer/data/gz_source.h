/* A FASTA file's bytes, plain or gzip (one or more concatenated members),
 * decompressed here with inflate rather than gzread so that what follows
 * the last member is seen: gzread drops it without a word, and bytes after
 * a gzip stream are a damaged or half-overwritten file more often than not.
 * A file that does not start with the gzip magic is read as it is. */
#ifndef MOE_DATA_GZ_SOURCE_H
#define MOE_DATA_GZ_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "../../common/err.h"

typedef struct {
    const char *path;
    int fd;
    int gzip;               /* 1: inflating members; 0: plain bytes */
    int ended;              /* the last member (or the plain file) is read whole */
    int in_member;          /* inflate is inside a member */
    z_stream zs;
    unsigned char *in;      /* compressed bytes read ahead */
    size_t in_cap;
    uint64_t file_read;     /* bytes read from the file so far */
    uint64_t trailing;      /* bytes after the last member (not gzip data) */
} gz_source;

/* Takes fd (closed by gz_source_close). */
int gz_source_open(gz_source *s, int fd, const char *path, moe_err *e);
/* Up to cap bytes of text into buf: how many, 0 at the end, -1 with e
 * saying what went wrong (a read error, corrupt or truncated gzip); the
 * caller names the file and the line. */
long gz_source_read(gz_source *s, unsigned char *buf, size_t cap, moe_err *e);
/* Bytes of the file consumed so far (compressed bytes for gzip). */
uint64_t gz_source_offset(const gz_source *s);
void gz_source_close(gz_source *s);

#endif

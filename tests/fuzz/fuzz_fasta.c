/* Fuzz the FASTA reader. The first input byte picks the container: bit 0
 * set = the rest is gzip-compressed before writing (the fuzzer then explores
 * the FASTA text behind gzip), bit 1 set = the rest is written as is under a
 * .gz name (raw and damaged gzip streams); else a plain .fa file. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../../trainer/data/data.h"

FUZZ_TARGET("fasta");

typedef struct {
    uint64_t records, bases;
} tally;

static int count_record(const moe_fasta_record *rec, void *ctx, moe_err *e)
{
    tally *t = ctx;
    if (rec->len == 0 || rec->index != t->records)
        abort(); /* the reader promises len >= 1 and records in order */
    for (size_t i = 0; i < rec->len; i++)
        t->bases += rec->seq[i] != 0; /* touch every byte for ASan */
    t->records++;
    (void)e;
    return 0;
}

static const char *write_gzip(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_file("in.fa.gz", "", 0);
    gzFile gz = gzopen(path, "wb");
    if (!gz || (size && gzwrite(gz, data, (unsigned)size) != (int)size) || gzclose(gz) != Z_OK)
        abort();
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    data++, size--;
    const char *path;
    if (mode & 1)
        path = write_gzip(data, size);
    else if (mode & 2)
        path = fuzz_write_file("raw.fa.gz", data, size);
    else
        path = fuzz_write_file("in.fa", data, size);
    tally t = {0, 0};
    moe_err e = {{0}};
    if (fasta_read(path, count_record, &t, &e) != 0 && e.msg[0] == '\0') {
        fprintf(stderr, "fasta_read failed with no message\n");
        abort();
    }
    return 0;
}

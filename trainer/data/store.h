/* moekit token store: FASTA prepared once into byte-level tokens that
 * training memory-maps (docs/token-store.md describes the format).
 *
 * A store is a directory with two files:
 *   tokens.bin  every record's tokens (BOS, bases, EOS), records back to back
 *   index.bin   a header, the source files, the records and their names
 * All integers are little-endian. The index carries CRC-32 checksums of
 * itself and of the tokens of every source file. */
#ifndef MOE_STORE_H
#define MOE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define STORE_MAGIC "MOETOKS1"
#define STORE_VERSION 1
#define STORE_TOKENIZER "moekit-byte256-v1" /* data.h: id = upper-cased byte, 0..3 special */
#define STORE_TOKENS_FILE "tokens.bin"
#define STORE_INDEX_FILE "index.bin"

typedef struct {
    char magic[8];            /* STORE_MAGIC */
    uint32_t version;         /* STORE_VERSION */
    uint32_t header_size;     /* sizeof(store_header) */
    char tokenizer[32];       /* STORE_TOKENIZER, NUL-padded */
    uint64_t n_files, n_records;
    uint64_t n_tokens;        /* size of tokens.bin */
    uint64_t n_bases;         /* n_tokens - 2 n_records */
    uint64_t files_offset;    /* byte offsets in index.bin of each table */
    uint64_t records_offset;
    uint64_t names_offset, names_size;
    uint32_t tokens_crc32;    /* CRC-32 of tokens.bin */
    uint32_t body_crc32;      /* CRC-32 of index.bin after the header */
    uint32_t header_crc32;    /* CRC-32 of this header with this field 0 */
    uint32_t reserved;
} store_header;               /* 128 bytes */

typedef struct {
    uint64_t path_offset;     /* in the names table, NUL-terminated */
    uint64_t size;            /* the source file's size and mtime when prepared */
    int64_t mtime_ns;
    uint64_t first_record, n_records;
    uint64_t tokens_offset, n_tokens; /* its records' span of tokens.bin */
    uint32_t tokens_crc32;    /* CRC-32 of that span */
    uint32_t path_len;
} store_file;                 /* 64 bytes */

typedef struct {
    uint64_t offset;          /* of its BOS in tokens.bin */
    uint64_t length;          /* tokens: bases + 2 */
    uint64_t name_offset;     /* header line after '>' (cut at 1023 bytes), NUL-terminated */
    uint32_t file;            /* index into the file table */
    uint32_t name_len;
} store_record;               /* 32 bytes */

/* CRC-32 (zlib's) of any length: crc = store_crc32(crc, data, n), start at 0. */
uint32_t store_crc32(uint32_t crc, const void *data, uint64_t n);

/* ---- reading ------------------------------------------------------------ */

typedef struct {
    char path[4096];
    const store_header *hdr;
    const store_file *files;
    const store_record *records;
    const char *names;
    const uint8_t *tokens;    /* mapped read-only and shared: ranks of a node share the pages */
    void *index_map, *tokens_map;
    size_t index_size, tokens_size;
    int tokens_fd;            /* windows are read with pread: see store_read_tokens */
} moe_store;

/* Map STORE/index.bin and STORE/tokens.bin and check the index: magic,
 * version, tokenizer, table bounds, checksums of the header and the index,
 * records back to back and inside tokens.bin, files covering them in order.
 * Does not read the tokens (see store_verify_tokens). */
int store_open(moe_store *s, const char *dir, moe_err *e);
void store_close(moe_store *s);
/* Copy tokens [offset, offset + n) of tokens.bin to out. Through pread, not
 * the mapping: the page cache is shared by every rank of the node either
 * way, but a fault on a mapping maps the whole large folio behind it (about
 * 1 MiB per 129-token window on Linux 6.18), so a mapping's RSS would grow
 * with every window read. */
int store_read_tokens(const moe_store *s, uint64_t offset, size_t n, uint8_t *out, moe_err *e);
/* Check the index held in memory (what store_open checks, without files);
 * tokens_size is the size of tokens.bin. For tests and the fuzzer. */
int store_check_index(const uint8_t *index, size_t size, uint64_t tokens_size, const char *what,
                      moe_err *e);
/* Read every token and compare each file's CRC-32 (and the whole file's). */
int store_verify_tokens(const moe_store *s, moe_err *e);
const char *store_file_path(const moe_store *s, uint64_t file);
const char *store_record_name(const moe_store *s, uint64_t record);

/* ---- preparing ---------------------------------------------------------- */

typedef struct {
    int threads;                /* worker threads (0 = online CPUs) */
    uint64_t max_record_bases;  /* longest record allowed */
    uint64_t max_total_bases;   /* the whole store */
    double max_inflate_ratio;   /* gzip text / compressed bytes (0 = no check) ... */
    uint64_t inflate_check_after; /* ... checked once a file gave this much text (256 MiB) */
    int progress;               /* 1: progress line on stderr */
    int force;                  /* 1: rebuild even when up to date */
} store_prepare_opts;

void store_prepare_defaults(store_prepare_opts *o);

typedef struct {
    int up_to_date;             /* 1: the store already held these inputs: nothing written */
    uint64_t n_files, n_records, n_bases, input_bytes;
    double seconds;
} store_prepare_result;

/* Tokenize the FASTA files paths[0..n) (in this order) into the store at
 * out_dir. Written under a temporary directory beside it and renamed into
 * place, so an interrupted run leaves the old store (or none), never half
 * of one. A store that already holds the same files (paths, sizes, mtimes)
 * made with the same tokenizer is left as it is. */
int store_prepare(const char *out_dir, const char *const *paths, size_t n,
                  const store_prepare_opts *o, store_prepare_result *res, moe_err *e);

/* Text for humans: what a store holds (moe-data info). */
int store_print_info(const moe_store *s, int list_files, moe_err *e);

#endif

/* moekit token store: FASTA prepared once into byte-level tokens that
 * training memory-maps (docs/token-store.md describes the format).
 *
 * A store is a directory with two files:
 *   tokens.bin  every record's tokens (BOS, bases, EOS), records back to back
 *   index.bin   a header, the source files, the records, their names, and
 *               a CRC-32 of every STORE_CHUNK_BYTES of the tables
 * All integers are little-endian. The index carries CRC-32 checksums of
 * its header, of each chunk of its tables and of the tokens of every
 * source file.
 *
 * Opening a store reads the header and the chunk table only: a store of
 * 10^9 records opens as fast as one of 10^3. A chunk of the tables is
 * checked against its CRC the first time anything in it is read, and each
 * entry is checked for sense as it is read (store_record_at and friends);
 * store_verify_index checks everything at once (moe-data info --verify). */
#ifndef MOE_STORE_H
#define MOE_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define STORE_MAGIC "MOETOKS1"
#define STORE_VERSION 2              /* 2: 16-byte records, chunked checksums */
#define STORE_CHUNK_BYTES (1u << 20) /* the tables are checksummed in pieces of this size */
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
    uint32_t chunks_crc32;    /* CRC-32 of the chunk table (which follows the names) */
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

/* A record's length is the next record's offset (n_tokens after the last)
 * minus its own; its name runs to the next record's name (names_size after
 * the last); its file is the one whose records hold it. */
typedef struct {
    uint64_t offset;          /* of its BOS in tokens.bin */
    uint64_t name_offset;     /* header line after '>' (cut at 1023 bytes), NUL-terminated */
} store_record;               /* 16 bytes */

/* CRC-32 (zlib's) of any length: crc = store_crc32(crc, data, n), start at 0. */
uint32_t store_crc32(uint32_t crc, const void *data, uint64_t n);

/* ---- reading ------------------------------------------------------------ */

typedef struct {
    char path[4096];
    char what[4200];          /* "<path>/index.bin", for messages */
    const store_header *hdr;  /* checked at open */
    const uint8_t *index;     /* index.bin, mapped; tables read through the accessors */
    size_t index_size;
    const uint8_t *chunk_crc; /* n_chunks little-endian CRC-32s of the tables, checked at open */
    uint64_t n_chunks;
    /* 1 once chunk i matched its CRC (one byte per MiB of tables); atomic:
     * the window layout reads records from several threads */
    atomic_uchar *chunk_ok;
    const uint8_t *tokens;    /* mapped read-only and shared: ranks of a node share the pages */
    void *index_map, *tokens_map;
    size_t tokens_size;
    int tokens_fd;            /* windows are read with pread: see store_read_tokens */
} moe_store;

/* Map STORE/index.bin and STORE/tokens.bin and check what opening needs:
 * magic, version, tokenizer, the header's checksum, the tables' sizes
 * against the file, tokens.bin's size, and the chunk table's checksum.
 * Reads nothing proportional to the records or the tokens. */
int store_open(moe_store *s, const char *dir, moe_err *e);
void store_close(moe_store *s);
/* Copy tokens [offset, offset + n) of tokens.bin to out. Through pread, not
 * the mapping: the page cache is shared by every rank of the node either
 * way, but a fault on a mapping maps the whole large folio behind it (about
 * 1 MiB per 129-token window on Linux 6.18), so a mapping's RSS would grow
 * with every window read. */
int store_read_tokens(const moe_store *s, uint64_t offset, size_t n, uint8_t *out, moe_err *e);

/* Drop this process's mapping of the index pages it has read (the page
 * cache keeps them for every rank): after a pass over all the records,
 * so that the pass does not stay in the resident set. */
void store_release_index(moe_store *s);

/* Entries, read on demand: each checks the chunks it reads (once) and the
 * entry itself (inside the tables, in order), and fails naming the store
 * and entry when either is damaged. */
int store_record_at(moe_store *s, uint64_t i, uint64_t *offset, uint64_t *length, moe_err *e);
int store_record_name(moe_store *s, uint64_t i, const char **name, moe_err *e);
int store_record_file(moe_store *s, uint64_t i, uint64_t *file, moe_err *e);
int store_file_at(moe_store *s, uint64_t f, store_file *out, const char **path, moe_err *e);

/* Every chunk against its CRC, and every file and record entry: the files
 * cover the records and tokens in order, records back to back with at least
 * one base, every name a NUL-free string inside the names table. */
int store_verify_index(moe_store *s, moe_err *e);
/* store_open's checks and store_verify_index on an index held in memory;
 * tokens_size is the size of tokens.bin. For tests and the fuzzer. */
int store_check_index(const uint8_t *index, size_t size, uint64_t tokens_size, const char *what,
                      moe_err *e);
/* Read every token and compare each file's CRC-32 (and the whole file's). */
int store_verify_tokens(moe_store *s, moe_err *e);

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

/* Text for humans: what a store holds (moe-data info); the longest record
 * only with scan (it reads every record entry). */
int store_print_info(moe_store *s, int list_files, int scan, moe_err *e);

#endif

/* moekit checkpoints: a small, strict JSON reader (DOM) and writer.
 *
 * It reads untrusted files (safetensors headers, config.json, shard indexes),
 * so it follows RFC 8259 exactly and bounds everything: input size, nesting
 * depth (the only recursion), no reads past the end, memory linear in the
 * input. Rejected, with "line L column C: what": trailing commas, comments,
 * leading zeros, NaN/Infinity, numbers beyond double range, control
 * characters in strings, invalid UTF-8, lone surrogates, duplicate keys,
 * a byte-order mark, anything after the top-level value.
 *
 * A parsed document owns all of its values; they live until json_free. */
#ifndef MOE_CKPT_JSON_H
#define MOE_CKPT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define JSON_DEFAULT_MAX_BYTES ((size_t)64 << 20)
#define JSON_DEFAULT_MAX_DEPTH 64

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value json_value;
typedef struct json_member json_member;

struct json_value {
    json_type type;
    int line, column; /* 1-based position of the value's first byte */
    union {
        int boolean;
        struct {
            double value;
            int64_t integer; /* exact value when is_integer */
            int is_integer;  /* written without fraction/exponent and fits int64 */
        } num;
        struct {
            const char *s; /* UTF-8, NUL-terminated; may also hold \u0000 inside */
            size_t len;    /* bytes, excluding the terminating NUL */
        } str;
        struct {
            const json_value *items;
            size_t n;
        } arr;
        struct {
            const json_member *members; /* in file order */
            size_t n;
        } obj;
    };
};

struct json_member {
    const char *key; /* decoded like a string value */
    size_t key_len;
    int line, column; /* of the key */
    json_value value;
};

typedef struct {
    size_t max_bytes; /* 0 = JSON_DEFAULT_MAX_BYTES */
    int max_depth;    /* 0 = JSON_DEFAULT_MAX_DEPTH; arrays/objects nested deeper fail */
} json_limits;

typedef struct json_doc json_doc;

/* Parse len bytes of text (need not be NUL-terminated). lim NULL = defaults.
 * On failure *out is NULL and e says "line L column C: what". */
int json_parse(const char *text, size_t len, const json_limits *lim, json_doc **out, moe_err *e);

/* Read and parse a file; errors start with the path. */
int json_parse_file(const char *path, const json_limits *lim, json_doc **out, moe_err *e);

const json_value *json_root(const json_doc *d);
void json_free(json_doc *d);

/* The member named key (first match; keys are unique anyway), or NULL when
 * v is not an object or has no such key. Linear in the object's size. */
const json_value *json_get(const json_value *v, const char *key);

/* "null", "a boolean", "a number", "a string", "an array", "an object". */
const char *json_type_name(json_type t);

/* ---- writer ---------------------------------------------------------------
 * Appends to a growing buffer and places commas, colons and (optionally)
 * indentation itself. Misuse (a value where a key belongs, unbalanced
 * ends) and allocation failure are remembered and reported by jw_finish, so
 * callers need not check every call. */
#define JW_MAX_DEPTH 32

typedef struct {
    char *buf;
    size_t len, cap;
    int indent; /* spaces per level; 0 = compact, one line */
    int depth;
    unsigned char has_items[JW_MAX_DEPTH + 1]; /* something written at this level */
    unsigned char in_object[JW_MAX_DEPTH + 1];
    int want_value; /* a key was written, its value comes next */
    char error[128];
} json_writer;

void jw_init(json_writer *w, int indent);
void jw_free(json_writer *w);
void jw_object_begin(json_writer *w);
void jw_object_end(json_writer *w);
void jw_array_begin(json_writer *w);
void jw_array_end(json_writer *w);
void jw_key(json_writer *w, const char *key);
void jw_string(json_writer *w, const char *s);
void jw_string_n(json_writer *w, const char *s, size_t n);
void jw_int(json_writer *w, int64_t v);
/* Shortest of %.15g/%.16g/%.17g that reads back to the same double, with
 * ".0" added when it would look like an integer (readers keep it a float).
 * NaN and infinities have no JSON form: an error. */
void jw_double(json_writer *w, double v);
void jw_bool(json_writer *w, int v);
void jw_null(json_writer *w);
/* Append raw bytes (e.g. padding); the caller keeps the text valid. */
void jw_raw(json_writer *w, const char *s, size_t n);
/* 0 when the text is complete (all containers closed) and nothing failed. */
int jw_finish(json_writer *w, moe_err *e);
/* jw_finish, then the text written to path (fsio_write_all); w is freed either way. */
int jw_write_file(json_writer *w, const char *path, moe_err *e);

#endif

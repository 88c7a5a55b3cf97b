/* Unit tests for trainer/ckpt: JSON, bf16/fp16, SHA-256, safetensors, HF
 * model directories and config.json, crash-safe checkpoint directories.
 *
 * Fixtures in tests/data/ckpt come from the Python libraries themselves
 * (safetensors, transformers 5.x; see make_fixtures.py there). Setting
 * MOE_CKPT_EXPORT_DIR makes the export test leave moekit-written files there
 * for make_fixtures.py to load with transformers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../trainer/ckpt/ckpt_dir.h"
#include "../../trainer/ckpt/fsio.h"
#include "../../trainer/ckpt/hf_dir.h"
#include "../../trainer/ckpt/json.h"
#include "../../trainer/ckpt/safetensors.h"
#include "../../trainer/ckpt/sha256.h"
#include "../../trainer/ckpt/shard_read.h"
#include "../../trainer/ckpt/shard_write.h"
#include "../../trainer/config/hf_config.h"
#include "../../trainer/numerics/half.h"
#include "../check.h"

#ifndef CKPT_TEST_DATA
#define CKPT_TEST_DATA "tests/data/ckpt"
#endif

/* ---- helpers -------------------------------------------------------------- */

static char g_tmp[4096]; /* per-run scratch directory */

static const char *data_dir(void)
{
    const char *d = getenv("MOE_CKPT_TEST_DATA");
    return d && d[0] ? d : CKPT_TEST_DATA;
}

/* dir/name into a 4096-byte buffer; test paths never get near that. */
static char *path_in(char *buf, const char *dir, const char *name)
{
    moe_err e;
    if (fsio_join(buf, 4096, dir, name, &e) != 0) {
        fprintf(stderr, "  %s\n", e.msg);
        exit(2);
    }
    return buf;
}

static const char *tmp_path(const char *name)
{
    static char buf[8][4096];
    static int next;
    return path_in(buf[next++ % 8], g_tmp, name);
}

static const char *data_path(const char *name)
{
    static char buf[4][4096];
    static int next;
    return path_in(buf[next++ % 4], data_dir(), name);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    moe_err e;
    if (fsio_write_all(path, data, n, &e) != 0) {
        fprintf(stderr, "  cannot write %s: %s\n", path, e.msg);
        exit(2);
    }
}

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static char *read_text(const char *path, size_t *len)
{
    char *d = NULL;
    size_t n = 0;
    moe_err e;
    if (fsio_read_all(path, (size_t)1 << 30, &d, &n, &e) != 0)
        return NULL;
    if (len)
        *len = n;
    return d;
}

/* A NULL needle matches anything. */
static int has(const char *msg, const char *needle) { return !needle || strstr(msg, needle) != NULL; }

/* rc must be -1 and the message must contain every non-NULL needle. */
#define CHECK_ERR(rc, e, needle1, needle2)                                                  \
    do {                                                                                    \
        int rc_ = (rc);                                                                     \
        const char *n1_ = (needle1), *n2_ = (needle2);                                      \
        CHECK_MSG(rc_ == -1, "expected failure, rc %d", rc_);                               \
        CHECK_MSG(has((e).msg, n1_), "message \"%s\" lacks \"%s\"", (e).msg, n1_ ? n1_ : ""); \
        CHECK_MSG(has((e).msg, n2_), "message \"%s\" lacks \"%s\"", (e).msg, n2_ ? n2_ : ""); \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Values k/64, |k| <= 48: exact in fp32, bf16 and fp16 alike. Shared with
 * make_fixtures.py, which uses the same formula. */
static float fixture_value(const char *name, int64_t i)
{
    unsigned h = 0;
    for (const char *p = name; *p; p++)
        h += (unsigned char)*p;
    h %= 97;
    return (float)((int)((i * 7 + h) % 97) - 48) / 64.0f;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- JSON ----------------------------------------------------------------- */

static json_doc *parse_ok(const char *text)
{
    json_doc *d = NULL;
    moe_err e = {""};
    int rc = json_parse(text, strlen(text), NULL, &d, &e);
    CHECK_MSG(rc == 0, "parse of %s failed: %s", text, e.msg);
    return d;
}

static void test_json_values(void)
{
    json_doc *d = parse_ok("{\"a\": [1, -2, 3.5, true, false, null, \"x\"],\n \"b\": {\"c\": \"d\"}, \"e\": {}, \"f\": []}");
    if (!d)
        return;
    const json_value *r = json_root(d);
    CHECK(r->type == JSON_OBJECT && r->obj.n == 4);
    const json_value *a = json_get(r, "a");
    CHECK(a && a->type == JSON_ARRAY && a->arr.n == 7);
    if (a && a->arr.n == 7) {
        CHECK(a->arr.items[0].num.is_integer && a->arr.items[0].num.integer == 1);
        CHECK(a->arr.items[1].num.integer == -2);
        CHECK(!a->arr.items[2].num.is_integer && a->arr.items[2].num.value == 3.5);
        CHECK(a->arr.items[3].type == JSON_BOOL && a->arr.items[3].boolean == 1);
        CHECK(a->arr.items[4].type == JSON_BOOL && a->arr.items[4].boolean == 0);
        CHECK(a->arr.items[5].type == JSON_NULL);
        CHECK(a->arr.items[6].type == JSON_STRING && strcmp(a->arr.items[6].str.s, "x") == 0);
        CHECK(a->arr.items[1].line == 1 && a->arr.items[1].column == 11);
    }
    const json_value *b = json_get(r, "b");
    CHECK(b && b->line == 2 && b->column == 7);
    CHECK(strcmp(json_get(b, "c")->str.s, "d") == 0);
    CHECK(json_get(r, "e")->obj.n == 0 && json_get(r, "f")->arr.n == 0);
    CHECK(json_get(r, "missing") == NULL && json_get(a, "a") == NULL);
    json_free(d);

    d = parse_ok("  \"top\"  ");
    CHECK(d && json_root(d)->type == JSON_STRING);
    json_free(d);
}

static void test_json_numbers(void)
{
    json_doc *d = parse_ok("[9223372036854775807, 9223372036854775808, -9223372036854775808, 1e3, 0.1, -0, "
                           "1.5e-10, 1E+2, 0, 123456789012345678901234567890, 5e-324, 1e-400]");
    if (!d)
        return;
    const json_value *v = json_root(d)->arr.items;
    CHECK(v[0].num.is_integer && v[0].num.integer == INT64_MAX);
    CHECK(!v[1].num.is_integer && v[1].num.value == 9223372036854775808.0);
    CHECK(v[2].num.is_integer && v[2].num.integer == INT64_MIN);
    CHECK(!v[3].num.is_integer && v[3].num.value == 1000.0);
    CHECK(v[4].num.value == 0.1);
    CHECK(v[5].num.is_integer && v[5].num.integer == 0);
    CHECK(v[6].num.value == 1.5e-10 && v[7].num.value == 100.0);
    CHECK(v[8].num.is_integer && v[8].num.integer == 0);
    CHECK(!v[9].num.is_integer && v[9].num.value > 1.2e29);
    CHECK(v[10].num.value == 5e-324 && v[11].num.value == 0.0); /* underflow is not an error */
    json_free(d);
}

static void test_json_strings(void)
{
    json_doc *d = parse_ok("[\"q\\\"b\\\\s\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\", \"\\ud83d\\ude00\", \"a\\u0000b\", "
                           "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\", \"\"]");
    if (!d)
        return;
    const json_value *v = json_root(d)->arr.items;
    CHECK(strcmp(v[0].str.s, "q\"b\\s/\b\f\n\r\t") == 0);
    CHECK(strcmp(v[1].str.s, "\xc3\xa9\xe2\x82\xac") == 0);
    CHECK(strcmp(v[2].str.s, "\xf0\x9f\x98\x80") == 0 && v[2].str.len == 4);
    CHECK(v[3].str.len == 3 && memcmp(v[3].str.s, "a\0b", 3) == 0);
    CHECK(strcmp(v[4].str.s, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == 0);
    CHECK(v[5].str.len == 0 && v[5].str.s[0] == '\0');
    json_free(d);
}

static void test_json_malformed(void)
{
    static const struct {
        const char *text;
        const char *needle;
    } cases[] = {
        {"", "unexpected end of input"},
        {"   ", "unexpected end of input"},
        {"{", "not closed"},
        {"[1,]", "trailing comma"},
        {"{\"a\":1,}", "trailing comma"},
        {"[1 2]", "expected ',' or ']'"},
        {"{\"a\" 1}", "expected ':'"},
        {"{\"a\"", "expected ':'"},
        {"{a:1}", "expected a string key"},
        {"{\"a\":1 \"b\":2}", "expected ',' or '}'"},
        {"01", "leading zeros"},
        {"-01", "leading zeros"},
        {"1.", "decimal point"},
        {"1.e5", "decimal point"},
        {".5", "unexpected '.'"},
        {"-", "'-' must be followed by a digit"},
        {"+1", "unexpected '+'"},
        {"1e", "exponent"},
        {"1e+", "exponent"},
        {"NaN", "unexpected 'N'"},
        {"Infinity", "unexpected 'I'"},
        {"-Infinity", "'-' must be followed"},
        {"tru", "expected true"},
        {"nul", "expected null"},
        {"fals", "expected false"},
        {"\"abc", "not closed"},
        {"\"abc\\", "not closed"},
        {"\"\\x\"", "invalid escape \\'x'"},
        {"\"\\u12\"", "4 hex digits"},
        {"\"\\u12g4\"", "4 hex digits"},
        {"\"\\ud800\"", "high surrogate"},
        {"\"\\ud800\\u0041\"", "high surrogate"},
        {"\"\\udc00\"", "low surrogate"},
        {"\"a\tb\"", "control character"},
        {"\"a\nb\"", "control character"},
        {"\"\xff\"", "invalid UTF-8"},
        {"\"\xc0\x80\"", "invalid UTF-8"},
        {"\"\xe0\x80\x80\"", "invalid UTF-8"},
        {"\"\xed\xa0\x80\"", "invalid UTF-8"},
        {"\"\xf4\x90\x80\x80\"", "invalid UTF-8"},
        {"\"\xe2\x82\"", "invalid UTF-8"},
        {"1e999", "beyond the range"},
        {"-1e999", "beyond the range"},
        {"[1] x", "after the end of the JSON value"},
        {"{}{}", "after the end"},
        {"{\"a\":1,\"a\":2}", "duplicate key \"a\""},
        {"\xEF\xBB\xBF{}", "byte-order mark"},
        {"/* c */ 1", "unexpected '/'"},
        {"[1,\x01]", "unexpected \\x01"},
        {"{\"a\":1}\n}", "line 2 column 1"},
        {"[\"a\"\x00]", "found \\x00"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_doc *d = (json_doc *)1;
        moe_err e = {""};
        size_t len = strlen(cases[i].text);
        if (strcmp(cases[i].text, "[\"a\"") == 0)
            len = 5; /* the embedded NUL case */
        int rc = json_parse(cases[i].text, len, NULL, &d, &e);
        CHECK_MSG(rc == -1 && d == NULL, "case %zu (%s) parsed", i, cases[i].text);
        CHECK_MSG(strstr(e.msg, cases[i].needle) != NULL, "case %zu (%s): \"%s\" lacks \"%s\"", i, cases[i].text,
                  e.msg, cases[i].needle);
        CHECK_MSG(strncmp(e.msg, "line ", 5) == 0 || strstr(e.msg, "input"), "case %zu: no position in \"%s\"", i,
                  e.msg);
    }
    /* Exact positions, across lines. */
    moe_err e;
    json_doc *d;
    const char *t = "{\n  \"a\": tru\n}";
    CHECK(json_parse(t, strlen(t), NULL, &d, &e) == -1);
    CHECK_MSG(strstr(e.msg, "line 2 column 8") != NULL, "%s", e.msg);
    t = "{\"k\": 1,\n \"k\": 2}";
    CHECK(json_parse(t, strlen(t), NULL, &d, &e) == -1);
    CHECK_MSG(strstr(e.msg, "line 2 column 2") && strstr(e.msg, "first at line 1 column 2"), "%s", e.msg);
    /* Text need not be NUL-terminated: nothing past len is read. */
    char buf[4] = {'[', '1', ']', '!'};
    CHECK(json_parse(buf, 3, NULL, &d, &e) == 0);
    json_free(d);
}

static void test_json_limits(void)
{
    moe_err e;
    json_doc *d;
    char deep[200];
    for (int n = 63; n <= 66; n++) {
        memset(deep, '[', (size_t)n);
        memset(deep + n, ']', (size_t)n);
        int rc = json_parse(deep, 2 * (size_t)n, NULL, &d, &e);
        CHECK_MSG((rc == 0) == (n <= JSON_DEFAULT_MAX_DEPTH), "depth %d rc %d", n, rc);
        if (rc == 0)
            json_free(d);
        else
            CHECK(strstr(e.msg, "nesting deeper than 64") != NULL);
    }
    /* A million open brackets: an error, not a stack overflow. */
    size_t big = 1000000;
    char *many = malloc(big);
    memset(many, '[', big);
    CHECK(json_parse(many, big, NULL, &d, &e) == -1 && strstr(e.msg, "nesting"));
    memset(many, '{', big);
    CHECK(json_parse(many, big, NULL, &d, &e) == -1);
    free(many);
    json_limits lim = {8, 2};
    CHECK(json_parse("[1,2,3,4]", 9, &lim, &d, &e) == -1 && strstr(e.msg, "over the limit of 8"));
    CHECK(json_parse("[[[1]]]", 7, &(json_limits){0, 2}, &d, &e) == -1 && strstr(e.msg, "deeper than 2"));
}

static void test_json_prefixes_and_mutations(void)
{
    const char *valid = "{\"model.layers.0.w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                        "\"__metadata__\":{\"format\":\"pt\",\"\\u00e9\":\"\\ud83d\\ude00\"},\"x\":[1.5e3,-2,true,null]}";
    size_t n = strlen(valid);
    moe_err e;
    json_doc *d;
    CHECK(json_parse(valid, n, NULL, &d, &e) == 0);
    json_free(d);
    /* Every strict prefix of an object is incomplete. */
    for (size_t k = 0; k < n; k++) {
        char *copy = malloc(k ? k : 1); /* exact size: ASan sees any overread */
        memcpy(copy, valid, k);
        int rc = json_parse(copy, k, NULL, &d, &e);
        CHECK_MSG(rc == -1, "prefix of %zu bytes parsed", k);
        free(copy);
    }
    /* Random byte mutations: any result, never a crash or overread. */
    char *m = malloc(n);
    for (int it = 0; it < 20000; it++) {
        memcpy(m, valid, n);
        int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++)
            m[rng() % n] = (char)(rng() & 0xFF);
        if (json_parse(m, n, NULL, &d, &e) == 0)
            json_free(d);
    }
    free(m);
}

static void test_json_big_object(void)
{
    /* 100k keys: duplicate detection must stay n log n. */
    size_t nkeys = 100000, cap = nkeys * 24 + 16, len = 0;
    char *t = malloc(cap);
    t[len++] = '{';
    for (size_t i = 0; i < nkeys; i++)
        len += (size_t)snprintf(t + len, cap - len, "%s\"k%zu\":%zu", i ? "," : "", i, i);
    t[len++] = '}';
    json_doc *d;
    moe_err e;
    double t0 = now_s();
    CHECK(json_parse(t, len, NULL, &d, &e) == 0);
    CHECK(now_s() - t0 < 5.0);
    if (d) {
        CHECK(json_root(d)->obj.n == nkeys);
        CHECK(json_get(json_root(d), "k99999")->num.integer == 99999);
        json_free(d);
    }
    /* The same with one duplicate at the very end. */
    t[len - 1] = ',';
    len += (size_t)snprintf(t + len, cap - len, "\"k17\":0}");
    CHECK(json_parse(t, len, NULL, &d, &e) == -1 && strstr(e.msg, "duplicate key \"k17\""));
    free(t);
}

static void test_json_writer(void)
{
    json_writer w;
    jw_init(&w, 2);
    jw_object_begin(&w);
    jw_key(&w, "s");
    jw_string(&w, "quote\" backslash\\ nl\n tab\t ctl\x01 utf8 \xc3\xa9");
    jw_key(&w, "i");
    jw_int(&w, INT64_MIN);
    jw_key(&w, "d");
    jw_array_begin(&w);
    static const double vals[] = {0.1, 1e-5, 1.0 / 3.0, 1e300, -0.0, 5e-324, 1e6, 10000.0, 123.25};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++)
        jw_double(&w, vals[i]);
    jw_array_end(&w);
    jw_key(&w, "b");
    jw_bool(&w, 1);
    jw_key(&w, "n");
    jw_null(&w);
    jw_key(&w, "empty");
    jw_object_begin(&w);
    jw_object_end(&w);
    jw_key(&w, "nul");
    jw_string_n(&w, "a\0b", 3);
    jw_object_end(&w);
    moe_err e;
    CHECK_MSG(jw_finish(&w, &e) == 0, "%s", e.msg);
    json_doc *d = parse_ok(w.buf);
    if (d) {
        const json_value *r = json_root(d);
        CHECK(strcmp(json_get(r, "s")->str.s, "quote\" backslash\\ nl\n tab\t ctl\x01 utf8 \xc3\xa9") == 0);
        CHECK(json_get(r, "i")->num.integer == INT64_MIN);
        const json_value *a = json_get(r, "d");
        for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
            CHECK_MSG(a->arr.items[i].num.value == vals[i], "double %zu: %.17g", i, a->arr.items[i].num.value);
            CHECK(!a->arr.items[i].num.is_integer); /* stays a float for Python */
        }
        CHECK(json_get(r, "nul")->str.len == 3);
        json_free(d);
    }
    CHECK(strstr(w.buf, "0.1,") || strstr(w.buf, "0.1\n"));
    CHECK(strstr(w.buf, "1e-05") != NULL && strstr(w.buf, "1000000.0") != NULL);
    jw_free(&w);

    /* Misuse is reported once, at the end. */
    jw_init(&w, 0);
    jw_array_begin(&w);
    jw_double(&w, NAN);
    jw_array_end(&w);
    CHECK(jw_finish(&w, &e) == -1 && strstr(e.msg, "NaN"));
    jw_free(&w);
    jw_init(&w, 0);
    jw_object_begin(&w);
    jw_int(&w, 1);
    jw_object_end(&w);
    CHECK(jw_finish(&w, &e) == -1 && strstr(e.msg, "needs a key"));
    jw_free(&w);
    jw_init(&w, 0);
    jw_array_begin(&w);
    CHECK(jw_finish(&w, &e) == -1 && strstr(e.msg, "incomplete"));
    jw_free(&w);
    jw_init(&w, 0);
    jw_key(&w, "k");
    CHECK(jw_finish(&w, &e) == -1 && strstr(e.msg, "outside an object"));
    jw_free(&w);
    jw_init(&w, 0);
    jw_object_begin(&w);
    jw_key(&w, "a");
    jw_key(&w, "b");
    jw_object_end(&w);
    CHECK(jw_finish(&w, &e) == -1 && strstr(e.msg, "where its value belongs"));
    jw_free(&w);
}

/* ---- bf16 / fp16 ---------------------------------------------------------- */

static void test_bf16(void)
{
    CHECK(f32_to_bf16(1.0f) == 0x3F80 && bf16_to_f32(0x3F80) == 1.0f);
    CHECK(f32_to_bf16(-2.5f) == 0xC020);
    /* Ties go to even; just above a tie rounds up. */
    CHECK(f32_to_bf16(half_bits_f32(0x3F808000u)) == 0x3F80);
    CHECK(f32_to_bf16(half_bits_f32(0x3F818000u)) == 0x3F82);
    CHECK(f32_to_bf16(half_bits_f32(0x3F808001u)) == 0x3F81);
    CHECK(f32_to_bf16(half_bits_f32(0x3F807FFFu)) == 0x3F80);
    CHECK(f32_to_bf16(FLT_MAX) == 0x7F80); /* rounds to infinity */
    CHECK(f32_to_bf16(INFINITY) == 0x7F80 && f32_to_bf16(-INFINITY) == 0xFF80);
    uint16_t nan = f32_to_bf16(half_bits_f32(0x7F800001u)); /* payload only in the low bits */
    CHECK((nan & 0x7F80) == 0x7F80 && (nan & 0x7F) != 0);
    CHECK(f32_to_bf16(-0.0f) == 0x8000);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = bf16_to_f32((uint16_t)h);
        if (f == f)
            CHECK_MSG(f32_to_bf16(f) == h, "bf16 %04x", h);
    }
}

static void test_f16(void)
{
    CHECK(f16_to_f32(0x3C00) == 1.0f && f16_to_f32(0xC000) == -2.0f);
    CHECK(f16_to_f32(0x7BFF) == 65504.0f && f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    CHECK(f32_to_f16(65504.0f) == 0x7BFF && f32_to_f16(65520.0f) == 0x7C00 && f32_to_f16(65519.0f) == 0x7BFF);
    CHECK(f32_to_f16(1e-8f) == 0x0000 && f32_to_f16(3e-8f) == 0x0001);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = f16_to_f32((uint16_t)h);
        if (f == f)
            CHECK_MSG(f32_to_f16(f) == h, "f16 %04x", h);
        else
            CHECK((h & 0x7C00) == 0x7C00 && (h & 0x3FF));
    }
#ifdef __FLT16_MAX__
    /* The compiler's conversions are the reference (IEEE, ties to even). */
    for (uint32_t h = 0; h < 0x10000; h++) {
        _Float16 x;
        memcpy(&x, &h, 2);
        float want = (float)x, got = f16_to_f32((uint16_t)h);
        if (want == want)
            CHECK_MSG(memcmp(&want, &got, 4) == 0, "f16_to_f32(%04x)", h);
    }
    int bad = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += 997) {
        float f = half_bits_f32((uint32_t)u);
        if (f != f)
            continue;
        _Float16 x = (_Float16)f;
        uint16_t want;
        memcpy(&want, &x, 2);
        if (f32_to_f16(f) != want && bad++ < 5)
            CHECK_MSG(0, "f32_to_f16(%08llx) = %04x, want %04x", (unsigned long long)u, f32_to_f16(f), want);
    }
    CHECK(bad == 0);
#endif
}

/* ---- SHA-256 -------------------------------------------------------------- */

static void digest_hex(const void *data, size_t n, char *hex)
{
    uint8_t d[SHA256_DIGEST_LEN];
    CHECK(sha256(data, n, d, NULL) == 0);
    sha256_hex(d, hex);
}

static void test_sha256_vectors(void)
{
    char hex[SHA256_HEX_LEN + 1];
    /* FIPS 180-4 / NIST CAVS examples. */
    digest_hex("", 0, hex);
    CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
    digest_hex("abc", 3, hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    digest_hex(m448, strlen(m448), hex);
    CHECK(strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
                       "lmnopqrsmnopqrstnopqrstu";
    digest_hex(m896, strlen(m896), hex);
    CHECK(strcmp(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1") == 0);
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    digest_hex(million, 1000000, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
    /* Streaming in odd pieces gives the same digest. */
    sha256_ctx c;
    CHECK(sha256_init(&c, NULL) == 0);
    for (size_t at = 0; at < 1000000;) {
        size_t k = 1 + rng() % 200;
        if (k > 1000000 - at)
            k = 1000000 - at;
        sha256_update(&c, million + at, k);
        at += k;
    }
    uint8_t d[SHA256_DIGEST_LEN];
    sha256_final(&c, d);
    sha256_hex(d, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
    /* Through a file descriptor. */
    write_bytes(tmp_path("million"), million, 1000000);
    int fd = open(tmp_path("million"), O_RDONLY);
    uint64_t size = 0;
    moe_err e;
    CHECK(sha256_fd(fd, "million", d, &size, &e) == 0 && size == 1000000);
    close(fd);
    sha256_hex(d, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
    CHECK(sha256_fd(-1, "bad-fd", d, &size, &e) == -1 && strstr(e.msg, "bad-fd"));
    free(million);
}

/* ---- safetensors ---------------------------------------------------------- */

/* A file with an arbitrary header: 8-byte length (header_len, or the text's
 * length when UINT64_MAX), the header text, data_len zero bytes. */
static void write_raw_st(const char *path, const char *header, uint64_t header_len, size_t data_len)
{
    size_t hl = strlen(header);
    if (header_len == UINT64_MAX)
        header_len = hl;
    size_t n = 8 + hl + data_len;
    unsigned char *b = calloc(1, n);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(header_len >> (8 * i));
    memcpy(b + 8, header, hl);
    write_bytes(path, b, n);
    free(b);
}

static void test_st_round_trip(void)
{
    float f32[6] = {1.0f, -2.0f, 0.5f, 3.25f, -0.0f, 1e-30f};
    float to_bf16[5] = {1.0f, -0.75f, 1.00390625f, 1.005859375f, 3.0e38f}; /* exact, exact, tie->even, tie->up */
    uint16_t raw_bf16[3] = {0x3F80, 0xC000, 0x7F80};
    float to_f16[3] = {0.5f, -65504.0f, 6.103515625e-05f};
    float scalar = 42.5f;
    int64_t i64[3] = {-1, 0, INT64_MAX};
    uint8_t u8[3] = {1, 2, 255};
    st_tensor t[] = {
        {"w.f32", ST_F32, 2, {2, 3}, f32, 0},
        {"w.bf16_from_f32", ST_BF16, 1, {5}, to_bf16, 1},
        {"w.bf16_raw", ST_BF16, 1, {3}, raw_bf16, 0},
        {"w.f16_from_f32", ST_F16, 2, {1, 3}, to_f16, 1},
        {"scalar", ST_F32, 0, {0}, &scalar, 0},
        {"empty", ST_F32, 2, {0, 5}, NULL, 0},
        {"step", ST_I64, 1, {3}, i64, 0},
        {"bytes", ST_U8, 1, {3}, u8, 0},
        {"a.f32_from_f32", ST_F32, 1, {2}, f32, 1},
    };
    int n = (int)(sizeof t / sizeof *t);
    st_meta meta[] = {{"format", "pt"}, {"moekit", "step 7 \"quoted\""}};
    moe_err e = {""};
    const char *path = tmp_path("rt.safetensors");
    CHECK_MSG(st_write(path, t, n, meta, 2, &e) == 0, "%s", e.msg);
    st_file *f;
    CHECK_MSG(st_open(path, &f, &e) == 0, "%s", e.msg);
    if (!f)
        return;
    CHECK(st_count(f) == n);
    for (int i = 1; i < st_count(f); i++)
        CHECK(strcmp(st_tensor_info(f, i - 1)->name, st_tensor_info(f, i)->name) < 0);
    CHECK(st_tensor_info(f, -1) == NULL && st_tensor_info(f, n) == NULL);
    CHECK(st_meta_count(f) == 2 && strcmp(st_meta_get(f, "moekit"), "step 7 \"quoted\"") == 0);
    CHECK(st_meta_get(f, "nope") == NULL && strcmp(st_meta_at(f, 0)->key, "format") == 0);
    CHECK(strcmp(st_path(f), path) == 0);

    /* Layout: data buffer 8-aligned, every tensor aligned to its element. */
    size_t flen;
    unsigned char *raw = (unsigned char *)read_text(path, &flen);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | raw[i];
    CHECK((8 + hl) % 8 == 0);
    for (int i = 0; i < n; i++) {
        const st_info *in = st_tensor_info(f, i);
        CHECK_MSG(in->offset % st_dtype_size(in->dtype) == 0, "%s at %llu", in->name, (unsigned long long)in->offset);
        CHECK(in->offset >= 8 + hl && in->offset + in->nbytes <= flen);
    }
    free(raw);

    float out[8];
    CHECK(st_read_f32(f, "w.f32", 2, (int64_t[]){2, 3}, out, &e) == 0 && memcmp(out, f32, sizeof f32) == 0);
    CHECK(st_read_f32(f, "w.bf16_from_f32", 1, (int64_t[]){5}, out, &e) == 0);
    CHECK(out[0] == 1.0f && out[1] == -0.75f && out[2] == 1.0f && out[3] == 1.0078125f);
    CHECK(out[4] == bf16_to_f32(f32_to_bf16(3.0e38f)));
    CHECK(st_read_f32(f, "w.bf16_raw", 1, (int64_t[]){3}, out, &e) == 0);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == INFINITY);
    CHECK(st_read_f32(f, "w.f16_from_f32", 2, (int64_t[]){1, 3}, out, &e) == 0 && memcmp(out, to_f16, 12) == 0);
    CHECK(st_read_f32(f, "scalar", 0, NULL, out, &e) == 0 && out[0] == 42.5f);
    CHECK(st_read_f32(f, "empty", 2, (int64_t[]){0, 5}, out, &e) == 0);
    CHECK(st_read_f32(f, "a.f32_from_f32", 1, (int64_t[]){2}, out, &e) == 0 && out[1] == -2.0f);
    const st_info *in = st_tensor_info(f, st_find(f, "empty"));
    CHECK(in && in->numel == 0 && in->nbytes == 0 && in->ndim == 2 && in->shape[1] == 5);
    in = st_tensor_info(f, st_find(f, "scalar"));
    CHECK(in && in->ndim == 0 && in->numel == 1);
    int64_t i64b[3];
    CHECK(st_read_raw(f, "step", i64b, sizeof i64b, &e) == 0 && memcmp(i64, i64b, sizeof i64) == 0);
    uint8_t u8b[3];
    CHECK(st_read_raw(f, "bytes", u8b, 3, &e) == 0 && u8b[2] == 255);

    /* Reading errors name the file, the tensor and what differs. */
    CHECK_ERR(st_read_f32(f, "w.f32", 2, (int64_t[]){3, 2}, out, &e), e, "has shape [2, 3], expected [3, 2]", path);
    CHECK_ERR(st_read_f32(f, "w.f32", 1, (int64_t[]){6}, out, &e), e, "expected [6]", "\"w.f32\"");
    CHECK_ERR(st_read_f32(f, "nope", 1, (int64_t[]){6}, out, &e), e, "no tensor named \"nope\"", path);
    CHECK_ERR(st_read_f32(f, "step", 1, (int64_t[]){3}, out, &e), e, "is I64", "\"step\"");
    CHECK_ERR(st_read_raw(f, "step", i64b, 8, &e), e, "is 24 bytes", NULL);
    st_close(f);

    /* Zero tensors, no metadata: a valid, tiny file. */
    CHECK(st_write(tmp_path("none.safetensors"), NULL, 0, NULL, 0, &e) == 0);
    CHECK(st_open(tmp_path("none.safetensors"), &f, &e) == 0 && st_count(f) == 0 && st_meta_count(f) == 0);
    st_close(f);
}

static void test_st_write_errors(void)
{
    float x[4] = {0};
    moe_err e;
    const char *p = tmp_path("bad.safetensors");
    st_tensor dup[] = {{"a", ST_F32, 1, {1}, x, 0}, {"a", ST_F32, 1, {1}, x, 0}};
    CHECK_ERR(st_write(p, dup, 2, NULL, 0, &e), e, "two tensors are named \"a\"", p);
    st_tensor reserved[] = {{"__metadata__", ST_F32, 1, {1}, x, 0}};
    CHECK_ERR(st_write(p, reserved, 1, NULL, 0, &e), e, "reserved", NULL);
    st_tensor neg[] = {{"n", ST_F32, 2, {2, -1}, x, 0}};
    CHECK_ERR(st_write(p, neg, 1, NULL, 0, &e), e, "\"n\"", "[2, -1]");
    st_tensor nodata[] = {{"z", ST_F32, 1, {4}, NULL, 0}};
    CHECK_ERR(st_write(p, nodata, 1, NULL, 0, &e), e, "data is NULL", "\"z\"");
    st_tensor rank[] = {{"r", ST_F32, 9, {1}, x, 0}};
    CHECK_ERR(st_write(p, rank, 1, NULL, 0, &e), e, "rank 9", NULL);
    st_tensor conv[] = {{"c", ST_I32, 1, {4}, x, 1}};
    CHECK_ERR(st_write(p, conv, 1, NULL, 0, &e), e, "converts only to F32, BF16 or F16", NULL);
    st_tensor noname[] = {{"", ST_F32, 1, {1}, x, 0}};
    CHECK_ERR(st_write(p, noname, 1, NULL, 0, &e), e, "no name", NULL);
    st_tensor overflow[] = {{"o", ST_F32, 2, {INT64_MAX / 2, 3}, x, 0}};
    CHECK_ERR(st_write(p, overflow, 1, NULL, 0, &e), e, "overflows", NULL);
    st_tensor ok[] = {{"a", ST_F32, 1, {1}, x, 0}};
    st_meta dmeta[] = {{"k", "1"}, {"k", "2"}};
    CHECK_ERR(st_write(p, ok, 1, dmeta, 2, &e), e, "metadata key \"k\" given twice", NULL);
    st_meta nmeta[] = {{"k", NULL}};
    CHECK_ERR(st_write(p, ok, 1, nmeta, 1, &e), e, "NULL key or value", NULL);
    CHECK(access(p, F_OK) != 0); /* nothing was created by a refused write */
    CHECK_ERR(st_write(tmp_path("no/such/dir/x.safetensors"), ok, 1, NULL, 0, &e), e, "no/such/dir", "create");

    /* A write that fails halfway (file size limit) removes the partial file. */
    float *big = calloc(1 << 16, sizeof(float));
    st_tensor bigt[] = {{"big", ST_F32, 1, {1 << 16}, big, 0}};
    const char *bp = tmp_path("partial.safetensors");
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {4096, 4096};
        setrlimit(RLIMIT_FSIZE, &rl);
        moe_err ce;
        int rc = st_write(bp, bigt, 1, NULL, 0, &ce);
        _exit(rc == -1 && strstr(ce.msg, "write tensor \"big\"") && access(bp, F_OK) != 0 ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "partial-write child status %d", st);
    free(big);
}

static void test_st_known_bytes(void)
{
    /* Byte for byte what safetensors' Python save_file writes for
     * {"test": torch.zeros((2, 2), dtype=torch.int32)} with metadata
     * {"foo": "bar"}: the documented example, padded to 8. */
    const char *hdr = "{\"__metadata__\":{\"foo\":\"bar\"},\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    char padded[256];
    size_t hl = strlen(hdr);
    memcpy(padded, hdr, hl);
    while ((8 + hl) % 8)
        padded[hl++] = ' ';
    padded[hl] = '\0';
    unsigned char file[512];
    for (int i = 0; i < 8; i++)
        file[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(file + 8, padded, hl);
    int32_t vals[4] = {1, -2, 3, 0x7FFFFFFF};
    memcpy(file + 8 + hl, vals, 16);
    const char *p = tmp_path("known.safetensors");
    write_bytes(p, file, 8 + hl + 16);
    st_file *f;
    moe_err e;
    CHECK_MSG(st_open(p, &f, &e) == 0, "%s", e.msg);
    if (!f)
        return;
    CHECK(st_count(f) == 1 && strcmp(st_meta_get(f, "foo"), "bar") == 0);
    const st_info *in = st_tensor_info(f, 0);
    CHECK(in->dtype == ST_I32 && in->ndim == 2 && in->shape[0] == 2 && in->offset == 8 + hl);
    int32_t back[4];
    CHECK(st_read_raw(f, "test", back, 16, &e) == 0 && memcmp(back, vals, 16) == 0);
    st_close(f);
}

/* make_fixtures.py's file, written by the safetensors Python library. */
static void test_st_python_fixture(void)
{
    const char *p = data_path("st_python.safetensors");
    st_file *f;
    moe_err e;
    CHECK_MSG(st_open(p, &f, &e) == 0, "%s", e.msg);
    if (!f)
        return;
    CHECK(st_count(f) == 6);
    CHECK(st_meta_get(f, "format") && strcmp(st_meta_get(f, "format"), "pt") == 0);
    CHECK(st_meta_get(f, "producer") && strcmp(st_meta_get(f, "producer"), "safetensors-python") == 0);
    float out[16];
    static const struct {
        const char *name;
        st_dtype dtype;
        int ndim;
        int64_t shape[2];
    } want[] = {
        {"f32", ST_F32, 2, {2, 3}}, {"bf16", ST_BF16, 2, {3, 4}}, {"f16", ST_F16, 1, {5}}, {"scalar", ST_F32, 0, {0}},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const st_info *in = st_tensor_info(f, st_find(f, want[i].name));
        CHECK_MSG(in && in->dtype == want[i].dtype && in->ndim == want[i].ndim, "%s", want[i].name);
        CHECK_MSG(st_read_f32(f, want[i].name, want[i].ndim, want[i].shape, out, &e) == 0, "%s", e.msg);
        if (strcmp(want[i].name, "scalar") == 0) {
            CHECK(out[0] == 3.5f);
            continue;
        }
        for (int64_t k = 0; in && k < in->numel; k++)
            CHECK_MSG(out[k] == fixture_value(want[i].name, k), "%s[%lld] = %g", want[i].name, (long long)k, out[k]);
    }
    CHECK(st_read_f32(f, "empty", 2, (int64_t[]){0, 4}, out, &e) == 0);
    int64_t ar[4];
    CHECK(st_read_raw(f, "i64", ar, sizeof ar, &e) == 0 && ar[0] == 0 && ar[3] == 3);
    st_close(f);
}

/* A valid file whose every truncation must be refused. */
static void test_st_truncations(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {1, 2, 3};
    st_tensor t[] = {{"a", ST_F32, 2, {2, 3}, a, 0}, {"b", ST_BF16, 1, {3}, b, 0}};
    st_meta m[] = {{"k", "v"}};
    const char *full = tmp_path("full.safetensors");
    moe_err e;
    CHECK(st_write(full, t, 2, m, 1, &e) == 0);
    size_t n;
    char *bytes = read_text(full, &n);
    const char *cut = tmp_path("cut.safetensors");
    for (size_t k = 0; k < n; k++) {
        write_bytes(cut, bytes, k);
        st_file *f = (st_file *)1;
        int rc = st_open(cut, &f, &e);
        CHECK_MSG(rc == -1 && f == NULL, "truncated to %zu of %zu bytes opened", k, n);
        CHECK_MSG(strstr(e.msg, cut) != NULL, "%zu: message lacks the path: %s", k, e.msg);
    }
    write_bytes(cut, bytes, n);
    st_file *f;
    CHECK(st_open(cut, &f, &e) == 0);
    /* Truncated after opening: reading reports it instead of faulting. */
    if (f) {
        CHECK(truncate(cut, (off_t)(n - 4)) == 0);
        float out[6];
        uint16_t bo[3];
        int r1 = st_read_f32(f, "a", 2, (int64_t[]){2, 3}, out, &e);
        int r2 = st_read_raw(f, "b", bo, sizeof bo, &e);
        CHECK(r1 == -1 || r2 == -1);
        CHECK_MSG(strstr(e.msg, "ended early") != NULL, "%s", e.msg);
        st_close(f);
    }
    free(bytes);
    CHECK_ERR(st_open(tmp_path("does-not-exist.safetensors"), &f, &e), e, "does-not-exist", "No such file");
    CHECK_ERR(st_open(g_tmp, &f, &e), e, "not a regular file", NULL);
}

static void test_st_malformed_headers(void)
{
    static const struct {
        const char *header;
        size_t data;
        const char *needle1, *needle2;
    } cases[] = {
        {"{\"a\":", 0, "header: line 1 column 6", NULL},
        {"[1,2]", 0, "does not start with '{'", NULL},
        {"{\"t\": 5}", 0, "tensor \"t\"", "must be an object"},
        {"{\"t\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype \"F33\"", "\"t\""},
        {"{\"t\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1, "F4 is not supported", NULL},
        {"{\"t\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype must be a string", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":5,\"data_offsets\":[0,4]}}", 4, "shape must be a list", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0] must be a non-negative integer", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1,2.5],\"data_offsets\":[0,4]}}", 4, "shape[1]", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, "shape[0]", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "rank 9", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "64-bit", NULL},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807,2],\"data_offsets\":[0,4]}}", 4, "64-bit", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "[begin, end]", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "[begin, end]", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", 4, "[begin, end]", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "[begin, end]", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"a\":1}}}", 4, "[begin, end]", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "begin after end", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,999]}}", 4, "run past the data buffer (4 bytes)", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}", 4, "[begin, end]", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "span 8 bytes but F32 [3] needs 12", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing \"shape\"", NULL},
        {"{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing \"dtype\"", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing \"data_offsets\"", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown field \"x\"", NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "\"b\" (bytes [4, 12)) overlaps tensor \"a\"", NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, "overlaps", NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "overlaps", NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "bytes [4, 8) of the data buffer belong to no tensor", NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "bytes [0, 4)", NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "last 4 bytes", NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate key \"a\"", NULL},
        {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ \"k\" must be a string", NULL},
        {"{\"__metadata__\":[\"k\"]}", 0, "__metadata__ must be an object", NULL},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "NUL byte", NULL},
        {"{}", 4, "lists no tensors", NULL},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "after the end of the JSON value", NULL},
        {"{\"t\":[[[[[[[[[[1]]]]]]]]]]}", 0, "nesting deeper", NULL},
    };
    const char *p = tmp_path("malformed.safetensors");
    moe_err e;
    st_file *f;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_raw_st(p, cases[i].header, UINT64_MAX, cases[i].data);
        e.msg[0] = '\0';
        int rc = st_open(p, &f, &e);
        CHECK_MSG(rc == -1, "case %zu opened: %s", i, cases[i].header);
        CHECK_MSG(strstr(e.msg, cases[i].needle1) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, e.msg, cases[i].needle1);
        CHECK_MSG(has(e.msg, cases[i].needle2), "case %zu: \"%s\" lacks \"%s\"", i, e.msg,
                  cases[i].needle2);
        CHECK_MSG(strncmp(e.msg, p, strlen(p)) == 0, "case %zu: message does not start with the path: %s", i, e.msg);
        if (rc == 0)
            st_close(f);
    }
    /* Lengths: too short, absurd, past the end, too small for JSON. */
    write_bytes(p, "\x02\0\0\0", 4);
    CHECK_ERR(st_open(p, &f, &e), e, "4 bytes, too short", NULL);
    write_raw_st(p, "{}", (uint64_t)1 << 40, 0);
    CHECK_ERR(st_open(p, &f, &e), e, "over the 100000000-byte limit", NULL);
    write_raw_st(p, "{}", 100000000, 0);
    CHECK_ERR(st_open(p, &f, &e), e, "runs past the end of the file", NULL);
    write_raw_st(p, "{}", 3, 0);
    CHECK_ERR(st_open(p, &f, &e), e, "runs past the end", NULL);
    write_raw_st(p, "{}", 0, 0);
    CHECK_ERR(st_open(p, &f, &e), e, "too short for a JSON object", NULL);
    write_raw_st(p, "{}", UINT64_MAX - 1, 0);
    CHECK_ERR(st_open(p, &f, &e), e, "limit", NULL);
    /* A good one still opens (the helper itself is sound). */
    write_raw_st(p, "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  ", UINT64_MAX, 4);
    CHECK_MSG(st_open(p, &f, &e) == 0, "%s", e.msg);
    st_close(f);
}

/* Random corruption of a real file: refused or read, never a crash. */
static void test_st_fuzz(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {1, 2, 3};
    int64_t c[2] = {5, 6};
    st_tensor t[] = {{"model.a", ST_F32, 2, {2, 3}, a, 0}, {"model.b", ST_BF16, 1, {3}, b, 0}, {"c", ST_I64, 1, {2}, c, 0}};
    st_meta m[] = {{"format", "pt"}};
    moe_err e;
    const char *src = tmp_path("fuzz-src.safetensors"), *p = tmp_path("fuzz.safetensors");
    CHECK(st_write(src, t, 3, m, 1, &e) == 0);
    size_t n;
    unsigned char *orig = (unsigned char *)read_text(src, &n), *mut = malloc(n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | orig[i];
    int opened = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(mut, orig, n);
        int flips = 1 + (int)(rng() % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = it % 10 == 0 ? rng() % 8 : 8 + rng() % hl; /* mostly the header */
            mut[at] = rng() % 4 == 0 ? (unsigned char)rng() : (unsigned char)"0123456789[]{},:\"- "[rng() % 19];
        }
        write_bytes(p, mut, n);
        st_file *f;
        if (st_open(p, &f, &e) == 0) {
            opened++;
            for (int i = 0; i < st_count(f); i++) {
                const st_info *in = st_tensor_info(f, i);
                void *buf = malloc(in->nbytes ? in->nbytes : 1);
                CHECK(st_read_raw(f, in->name, buf, in->nbytes, &e) == 0);
                free(buf);
            }
            st_close(f);
        } else {
            CHECK(strstr(e.msg, p) != NULL);
        }
    }
    CHECK(opened > 0); /* some mutations (digits of a metadata value) stay valid */
    free(orig);
    free(mut);
}

/* ---- HF model directories ------------------------------------------------- */

static void write_tensor_file(const char *path, const char *const *names, int n)
{
    st_tensor t[8];
    static float data[8][12];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 12; k++)
            data[i][k] = fixture_value(names[i], k);
        t[i] = (st_tensor){names[i], ST_F32, 2, {3, 4}, data[i], 0};
    }
    moe_err e;
    if (st_write(path, t, n, NULL, 0, &e) != 0) {
        fprintf(stderr, "  %s\n", e.msg);
        exit(2);
    }
}

static void check_tensor_values(hf_dir *d, const char *name)
{
    float out[12];
    moe_err e;
    CHECK_MSG(hf_dir_read_f32(d, name, 2, (int64_t[]){3, 4}, out, &e) == 0, "%s", e.msg);
    for (int k = 0; k < 12; k++)
        CHECK(out[k] == fixture_value(name, k));
}

static void test_hf_single(void)
{
    const char *dir = tmp_path("hf_single");
    mkdir(dir, 0755);
    char p[4096];
    path_in(p, dir, "model.safetensors");
    const char *names[] = {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"};
    write_tensor_file(p, names, 3);
    hf_dir *d;
    moe_err e;
    CHECK_MSG(hf_dir_open(dir, &d, &e) == 0, "%s", e.msg);
    if (!d)
        return;
    CHECK(hf_dir_count(d) == 3 && hf_dir_has(d, "lm_head.weight") && !hf_dir_has(d, "lm_head"));
    CHECK(strcmp(hf_dir_name(d, 0), "lm_head.weight") == 0 && hf_dir_name(d, 3) == NULL);
    st_info in;
    CHECK(hf_dir_tensor_info(d, "model.norm.weight", &in, &e) == 0 && in.dtype == ST_F32 && in.shape[1] == 4);
    CHECK_ERR(hf_dir_tensor_info(d, "model.missing", &in, &e), e, "no tensor named \"model.missing\"", dir);
    check_tensor_values(d, "model.embed_tokens.weight");
    float out[12];
    CHECK_ERR(hf_dir_read_f32(d, "model.norm.weight", 1, (int64_t[]){12}, out, &e), e, "expected [12]", NULL);
    CHECK_ERR(hf_dir_read_f32(d, "nope", 1, (int64_t[]){12}, out, &e), e, "no tensor named \"nope\"", NULL);
    hf_dir_close(d);
}

static void test_hf_sharded(void)
{
    const char *dir = tmp_path("hf_sharded");
    mkdir(dir, 0755);
    char p1[4096], p2[4096], idx[4096];
    path_in(p1, dir, "model-00001-of-00002.safetensors");
    path_in(p2, dir, "model-00002-of-00002.safetensors");
    path_in(idx, dir, "model.safetensors.index.json");
    const char *s1[] = {"model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight"};
    const char *s2[] = {"model.layers.1.block_sparse_moe.experts.3.w2.weight", "lm_head.weight", "unlisted.weight"};
    write_tensor_file(p1, s1, 2);
    write_tensor_file(p2, s2, 3);
    const char *good = "{\"metadata\": {\"total_size\": 192},\n \"weight_map\": {\n"
                       "  \"lm_head.weight\": \"model-00002-of-00002.safetensors\",\n"
                       "  \"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\",\n"
                       "  \"model.layers.0.self_attn.q_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
                       "  \"model.layers.1.block_sparse_moe.experts.3.w2.weight\": \"model-00002-of-00002.safetensors\"}}\n";
    write_text(idx, good);
    hf_dir *d;
    moe_err e;
    CHECK_MSG(hf_dir_open(dir, &d, &e) == 0, "%s", e.msg);
    if (d) {
        CHECK(hf_dir_count(d) == 4);
        CHECK(hf_dir_has(d, "model.layers.1.block_sparse_moe.experts.3.w2.weight"));
        CHECK(!hf_dir_has(d, "unlisted.weight")); /* only what the index names */
        for (int i = 0; i < 4; i++)
            check_tensor_values(d, hf_dir_name(d, i));
        hf_dir_close(d);
    }

    /* Index problems, each named. */
    static const struct {
        const char *index;
        const char *needle1, *needle2;
    } bad[] = {
        {"{\"weight_map\": {\"lm_head.weight\": \"model-00003-of-00003.safetensors\"}}",
         "lists shard model-00003-of-00003.safetensors", "No such file"},
        {"{\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}",
         "tensor \"model.norm.weight\" is mapped to model-00001-of-00002.safetensors, which does not contain it", NULL},
        {"{\"weight_map\": {\"lm_head.weight\": \"../model-00001-of-00002.safetensors\"}}", "is not a file name", "line 1"},
        {"{\"weight_map\": {\"lm_head.weight\": \"\"}}", "is not a file name", NULL},
        {"{\"weight_map\": {\"lm_head.weight\": 3}}", "must be a file name string", NULL},
        {"{\"metadata\": {}}", "\"weight_map\"", NULL},
        {"[1]", "\"weight_map\"", NULL},
        {"{\"weight_map\": {\"a\": \"x\",}}", "line 1 column 26", "trailing comma"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(idx, bad[i].index);
        int rc = hf_dir_open(dir, &d, &e);
        CHECK_MSG(rc == -1 && d == NULL, "bad index %zu opened", i);
        CHECK_MSG(strstr(e.msg, bad[i].needle1) != NULL, "index %zu: \"%s\" lacks \"%s\"", i, e.msg, bad[i].needle1);
        CHECK_MSG(has(e.msg, bad[i].needle2), "index %zu: \"%s\" lacks \"%s\"", i, e.msg,
                  bad[i].needle2);
        CHECK_MSG(strstr(e.msg, "model.safetensors.index.json") != NULL, "index %zu: %s", i, e.msg);
    }
    /* A damaged shard is reported with its own path. */
    write_text(idx, good);
    CHECK(truncate(p2, 100) == 0);
    CHECK_ERR(hf_dir_open(dir, &d, &e), e, "model-00002-of-00002.safetensors", "runs past the end");
    /* model.safetensors beside an index wins, as in transformers. */
    char single[4096];
    path_in(single, dir, "model.safetensors");
    const char *one[] = {"only.weight"};
    write_tensor_file(single, one, 1);
    CHECK(hf_dir_open(dir, &d, &e) == 0 && hf_dir_count(d) == 1 && hf_dir_has(d, "only.weight"));
    hf_dir_close(d);
}

static void test_hf_dir_errors(void)
{
    hf_dir *d;
    moe_err e;
    const char *empty = tmp_path("hf_empty");
    mkdir(empty, 0755);
    CHECK_ERR(hf_dir_open(empty, &d, &e), e, "no model.safetensors or model.safetensors.index.json", empty);
    CHECK_ERR(hf_dir_open(tmp_path("hf_absent"), &d, &e), e, "hf_absent", "No such file");
    write_text(tmp_path("hf_file"), "x");
    CHECK_ERR(hf_dir_open(tmp_path("hf_file"), &d, &e), e, "not a directory", NULL);
    const char *bad = tmp_path("hf_bad");
    mkdir(bad, 0755);
    char p[4096];
    path_in(p, bad, "model.safetensors");
    write_raw_st(p, "{\"x\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[0,1]}}", UINT64_MAX, 1);
    CHECK_ERR(hf_dir_open(bad, &d, &e), e, "unknown dtype \"Q9\"", "hf_bad/model.safetensors");
}

/* save_pretrained of a tiny MixtralForCausalLM (transformers 5.x, sharded);
 * expected.json holds what make_fixtures.py read back from the shards. */
static void test_hf_transformers_fixture(void)
{
    const char *dir = data_path("hf_tiny");
    hf_dir *d;
    moe_err e;
    CHECK_MSG(hf_dir_open(dir, &d, &e) == 0, "%s", e.msg);
    if (!d)
        return;
    char exp_path[4096];
    path_in(exp_path, dir, "expected.json");
    json_doc *doc;
    CHECK_MSG(json_parse_file(exp_path, NULL, &doc, &e) == 0, "%s", e.msg);
    if (!doc) {
        hf_dir_close(d);
        return;
    }
    const json_value *tensors = json_get(json_root(doc), "tensors");
    CHECK(tensors && (int)tensors->obj.n == hf_dir_count(d));
    CHECK(hf_dir_has(d, "model.layers.1.block_sparse_moe.experts.3.w2.weight"));
    CHECK(hf_dir_has(d, "model.layers.0.block_sparse_moe.gate.weight"));
    for (size_t i = 0; tensors && i < tensors->obj.n; i++) {
        const json_member *m = &tensors->obj.members[i];
        const json_value *shape = json_get(&m->value, "shape");
        int64_t shp[ST_MAX_DIMS];
        int nd = (int)shape->arr.n;
        int64_t numel = 1;
        for (int k = 0; k < nd; k++)
            numel *= (shp[k] = shape->arr.items[k].num.integer);
        float *buf = malloc((size_t)numel * sizeof(float));
        CHECK_MSG(hf_dir_read_f32(d, m->key, nd, shp, buf, &e) == 0, "%s", e.msg);
        double sum = 0;
        for (int64_t k = 0; k < numel; k++)
            sum += buf[k];
        CHECK_NEAR(sum, json_get(&m->value, "sum")->num.value, 1e-6 * (1 + fabs(sum)));
        const json_value *head = json_get(&m->value, "head");
        for (size_t k = 0; k < head->arr.n; k++)
            CHECK_MSG(buf[k] == (float)head->arr.items[k].num.value, "%s[%zu]", m->key, k);
        free(buf);
    }
    json_free(doc);
    hf_dir_close(d);
}

/* ---- config.json ---------------------------------------------------------- */

static void check_tiny_model(const moe_model_cfg *m)
{
    CHECK(m->hidden_size == 16 && m->intermediate_size == 32 && m->num_layers == 2);
    CHECK(m->num_heads == 4 && m->num_kv_heads == 2 && m->head_dim == 4);
    CHECK(m->num_experts == 4 && m->top_k == 2 && m->vocab_size == 256);
    CHECK(m->max_position_embeddings == 64 && m->rope_theta == 10000.0 && m->rms_norm_eps == 1e-5);
    CHECK(m->router_aux_loss_coef == 0.02 && m->init_std == 0.02);
}

static void test_hf_config_tf4(void)
{
    moe_model_cfg m;
    memset(&m, 0, sizeof m);
    moe_err e;
    CHECK_MSG(hf_config_read(data_path("config_tf4.json"), &m, &e) == 0, "%s", e.msg);
    /* Mixtral-8x7B as transformers 4.x saved it. */
    CHECK(m.hidden_size == 4096 && m.intermediate_size == 14336 && m.num_layers == 32);
    CHECK(m.num_heads == 32 && m.num_kv_heads == 8 && m.head_dim == 128);
    CHECK(m.num_experts == 8 && m.top_k == 2 && m.vocab_size == 32000);
    CHECK(m.max_position_embeddings == 32768 && m.rope_theta == 1e6 && m.rms_norm_eps == 1e-5);
    CHECK(m.router_aux_loss_coef == 0.02 && m.init_std == 0.02);
}

static void test_hf_config_tf5(void)
{
    moe_model_cfg m;
    memset(&m, 0, sizeof m);
    moe_err e;
    CHECK_MSG(hf_config_read(data_path("config_tf5.json"), &m, &e) == 0, "%s", e.msg);
    check_tiny_model(&m);
    moe_model_cfg m2;
    memset(&m2, 0, sizeof m2);
    CHECK_MSG(hf_config_read(data_path("hf_tiny/config.json"), &m2, &e) == 0, "%s", e.msg);
    check_tiny_model(&m2);
}

static void test_hf_config_round_trip(void)
{
    moe_model_cfg m = {.hidden_size = 96, .num_layers = 3, .num_heads = 6, .num_kv_heads = 2, .head_dim = 0,
                       .num_experts = 8, .top_k = 2, .intermediate_size = 192, .vocab_size = 256,
                       .max_position_embeddings = 2048, .rope_theta = 500000.0, .rms_norm_eps = 1e-6,
                       .router_aux_loss_coef = 0.001, .init_std = 0.0125};
    const char *p = tmp_path("config_rt.json");
    moe_err e;
    CHECK_MSG(hf_config_write(p, &m, &e) == 0, "%s", e.msg);
    moe_model_cfg r;
    memset(&r, 0, sizeof r);
    CHECK_MSG(hf_config_read(p, &r, &e) == 0, "%s", e.msg);
    m.head_dim = 16; /* written explicitly */
    CHECK(memcmp(&m, &r, sizeof m) == 0);

    /* What transformers needs is in the file. */
    json_doc *d;
    CHECK(json_parse_file(p, NULL, &d, &e) == 0);
    if (!d)
        return;
    const json_value *root = json_root(d);
    const json_value *arch = json_get(root, "architectures");
    CHECK(arch && arch->arr.n == 1 && strcmp(arch->arr.items[0].str.s, "MixtralForCausalLM") == 0);
    CHECK(strcmp(json_get(root, "model_type")->str.s, "mixtral") == 0);
    CHECK(strcmp(json_get(root, "hidden_act")->str.s, "silu") == 0);
    CHECK(json_get(root, "sliding_window")->type == JSON_NULL);
    CHECK(json_get(root, "tie_word_embeddings")->type == JSON_BOOL && !json_get(root, "tie_word_embeddings")->boolean);
    CHECK(json_get(root, "use_cache")->boolean == 1 && json_get(root, "output_router_logits")->boolean == 0);
    CHECK(json_get(root, "bos_token_id")->num.integer == 2 && json_get(root, "eos_token_id")->num.integer == 0 &&
          json_get(root, "pad_token_id")->num.integer == 1);
    const json_value *rp = json_get(root, "rope_parameters");
    CHECK(rp && strcmp(json_get(rp, "rope_type")->str.s, "default") == 0 && json_get(rp, "rope_theta")->num.value == 500000.0);
    CHECK(json_get(root, "rope_theta")->num.value == 500000.0 && !json_get(root, "rope_theta")->num.is_integer);
    CHECK(strcmp(json_get(root, "torch_dtype")->str.s, "float32") == 0 && strcmp(json_get(root, "dtype")->str.s, "float32") == 0);
    CHECK(json_get(root, "attention_dropout")->num.value == 0.0 && json_get(root, "router_jitter_noise")->num.value == 0.0);
    CHECK(json_get(root, "head_dim")->num.integer == 16);
    json_free(d);

    /* Nonsense is refused before anything is written. */
    moe_model_cfg bad = m;
    bad.hidden_size = 0;
    CHECK_ERR(hf_config_write(tmp_path("config_bad.json"), &bad, &e), e, "model.hidden_size = 0", "config_bad.json");
    bad = m;
    bad.head_dim = 0;
    bad.hidden_size = 100; /* not a multiple of 6 heads */
    CHECK_ERR(hf_config_write(tmp_path("config_bad.json"), &bad, &e), e, "head_dim", NULL);
    bad = m;
    bad.rope_theta = 0;
    CHECK_ERR(hf_config_write(tmp_path("config_bad.json"), &bad, &e), e, "rope_theta", NULL);
    CHECK(access(tmp_path("config_bad.json"), F_OK) != 0);
    CHECK_ERR(hf_config_write(tmp_path("nodir/config.json"), &m, &e), e, "nodir/config.json", NULL);
}

/* A Mixtral config.json with some keys replaced (value NULL removes). */
static const char *write_config(const char *const (*edits)[2], int n_edits)
{
    static const char *const base[][2] = {
        {"architectures", "[\"MixtralForCausalLM\"]"}, {"model_type", "\"mixtral\""},
        {"hidden_size", "64"}, {"intermediate_size", "128"}, {"num_hidden_layers", "2"},
        {"num_attention_heads", "8"}, {"num_key_value_heads", "4"}, {"num_local_experts", "4"},
        {"num_experts_per_tok", "2"}, {"vocab_size", "256"}, {"max_position_embeddings", "512"},
        {"rms_norm_eps", "1e-05"}, {"rope_theta", "10000.0"}, {"router_aux_loss_coef", "0.01"},
        {"initializer_range", "0.02"}, {"sliding_window", "null"}, {"tie_word_embeddings", "false"},
        {"hidden_act", "\"silu\""},
    };
    char text[8192];
    size_t len = (size_t)snprintf(text, sizeof text, "{");
    int first = 1;
    for (size_t i = 0; i < sizeof base / sizeof *base; i++) {
        const char *v = base[i][1];
        for (int k = 0; k < n_edits; k++)
            if (strcmp(edits[k][0], base[i][0]) == 0)
                v = edits[k][1];
        if (!v)
            continue;
        len += (size_t)snprintf(text + len, sizeof text - len, "%s\n  \"%s\": %s", first ? "" : ",", base[i][0], v);
        first = 0;
    }
    for (int k = 0; k < n_edits; k++) { /* keys that are not in the base */
        int known = 0;
        for (size_t i = 0; i < sizeof base / sizeof *base; i++)
            known |= strcmp(edits[k][0], base[i][0]) == 0;
        if (!known && edits[k][1])
            len += (size_t)snprintf(text + len, sizeof text - len, ",\n  \"%s\": %s", edits[k][0], edits[k][1]);
    }
    snprintf(text + len, sizeof text - len, "\n}\n");
    const char *p = tmp_path("config_case.json");
    write_text(p, text);
    return p;
}

static void test_hf_config_variants(void)
{
    moe_model_cfg m;
    moe_err e;
    const char *p = write_config(NULL, 0);
    CHECK_MSG(hf_config_read(p, &m, &e) == 0, "%s", e.msg);
    CHECK(m.head_dim == 8 && m.num_kv_heads == 4 && m.rope_theta == 10000.0);

    /* Defaults: no num_key_value_heads -> heads; null head_dim -> hidden/heads;
     * optional floats -> MixtralConfig's values. */
    const char *const defaults[][2] = {{"num_key_value_heads", NULL}, {"head_dim", "null"}, {"rope_theta", NULL},
                                       {"rms_norm_eps", NULL},        {"initializer_range", NULL},
                                       {"router_aux_loss_coef", NULL}, {"max_position_embeddings", NULL},
                                       {"sliding_window", NULL},      {"tie_word_embeddings", NULL}};
    p = write_config(defaults, 9);
    CHECK_MSG(hf_config_read(p, &m, &e) == 0, "%s", e.msg);
    CHECK(m.num_kv_heads == 8 && m.head_dim == 8 && m.rope_theta == 1e6 && m.rms_norm_eps == 1e-5);
    CHECK(m.init_std == 0.02 && m.router_aux_loss_coef == 0.001 && m.max_position_embeddings == 131072);

    /* 5.x: rope_theta only inside rope_parameters; explicit head_dim. */
    const char *const v5[][2] = {{"rope_theta", NULL},
                                 {"rope_parameters", "{\"rope_theta\": 250000.0, \"rope_type\": \"default\"}"},
                                 {"head_dim", "16"},
                                 {"dtype", "\"bfloat16\""}};
    p = write_config(v5, 4);
    CHECK_MSG(hf_config_read(p, &m, &e) == 0, "%s", e.msg);
    CHECK(m.rope_theta == 250000.0 && m.head_dim == 16);
    const char *const both[][2] = {{"rope_parameters", "{\"rope_theta\": 10000, \"rope_type\": \"default\"}"},
                                   {"rope_scaling", "null"}};
    p = write_config(both, 2);
    CHECK_MSG(hf_config_read(p, &m, &e) == 0, "%s", e.msg);
    const char *const legacy[][2] = {{"rope_scaling", "{\"type\": \"default\"}"}};
    p = write_config(legacy, 1);
    CHECK_MSG(hf_config_read(p, &m, &e) == 0, "%s", e.msg);

    static const struct {
        const char *key, *value;
        const char *needle1, *needle2;
    } bad[] = {
        {"model_type", "\"llama\"", "\"model_type\" is \"llama\"", "line 3 column 17"},
        {"model_type", NULL, "missing \"model_type\"", NULL},
        {"model_type", "7", "moekit reads only \"mixtral\"", NULL},
        {"sliding_window", "4096", "\"sliding_window\" is set", "line"},
        {"tie_word_embeddings", "true", "\"tie_word_embeddings\" is true", NULL},
        {"tie_word_embeddings", "1", "must be true or false", NULL},
        {"rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"yarn\", \"factor\": 4.0}", "rope_type \"yarn\"", "plain RoPE"},
        {"rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}", "partial_rotary_factor", NULL},
        {"rope_parameters", "{\"rope_theta\": 20000.0, \"rope_type\": \"default\"}", "disagree", NULL},
        {"rope_parameters", "[1]", "\"rope_parameters\" must be an object or null", NULL},
        {"rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}", "\"rope_scaling\" has rope_type \"linear\"", NULL},
        {"rope_theta", "-5", "\"rope_theta\" = -5 must be positive", NULL},
        {"rope_theta", "\"big\"", "\"rope_theta\" must be a number", NULL},
        {"hidden_act", "\"gelu\"", "\"hidden_act\" must be \"silu\"", NULL},
        {"hidden_size", "\"64\"", "\"hidden_size\" must be an integer, got a string", "line 4 column 18"},
        {"hidden_size", "64.5", "got a fractional number", NULL},
        {"hidden_size", "-64", "\"hidden_size\" = -64 is out of range", NULL},
        {"hidden_size", "4294967296", "out of range", NULL},
        {"hidden_size", NULL, "missing \"hidden_size\"", NULL},
        {"vocab_size", NULL, "missing \"vocab_size\"", NULL},
        {"num_experts_per_tok", "5", "\"num_experts_per_tok\" = 5 is more than \"num_local_experts\" = 4", NULL},
        {"num_key_value_heads", "3", "\"num_key_value_heads\" = 3 does not divide", NULL},
        {"num_key_value_heads", "0", "out of range", NULL},
        {"hidden_size", "60", "not a multiple of \"num_attention_heads\"", NULL},
        {"rms_norm_eps", "0", "must be positive", NULL},
        {"router_aux_loss_coef", "-0.1", "must be non-negative", NULL},
        {"quantization_config", "{\"quant_method\": \"gptq\"}", "quantized", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *const edit[][2] = {{bad[i].key, bad[i].value}};
        p = write_config(edit, 1);
        int rc = hf_config_read(p, &m, &e);
        CHECK_MSG(rc == -1, "bad config %zu (%s) accepted", i, bad[i].key);
        CHECK_MSG(strstr(e.msg, bad[i].needle1) != NULL, "config %zu: \"%s\" lacks \"%s\"", i, e.msg, bad[i].needle1);
        CHECK_MSG(has(e.msg, bad[i].needle2), "config %zu: \"%s\" lacks \"%s\"", i, e.msg,
                  bad[i].needle2);
        CHECK_MSG(strstr(e.msg, "config_case.json") != NULL, "config %zu: no path in %s", i, e.msg);
    }
    write_text(tmp_path("config_broken.json"), "{\"model_type\": \"mixtral\",\n \"hidden_size\": 64,,}");
    CHECK_ERR(hf_config_read(tmp_path("config_broken.json"), &m, &e), e, "config_broken.json: line 2 column 20", NULL);
    write_text(tmp_path("config_array.json"), "[]");
    CHECK_ERR(hf_config_read(tmp_path("config_array.json"), &m, &e), e, "expected a JSON object", NULL);
    CHECK_ERR(hf_config_read(tmp_path("config_absent.json"), &m, &e), e, "config_absent.json", "No such file");
}

/* Files for make_fixtures.py to load with safetensors and transformers: a
 * safetensors file of every dtype shape we write, and a complete tiny HF
 * Mixtral directory with hub tensor names. Checked here as well. */
static void export_tiny_model(const char *dir)
{
    moe_model_cfg m = {.hidden_size = 16, .num_layers = 2, .num_heads = 4, .num_kv_heads = 2, .head_dim = 4,
                       .num_experts = 4, .top_k = 2, .intermediate_size = 32, .vocab_size = 256,
                       .max_position_embeddings = 64, .rope_theta = 10000.0, .rms_norm_eps = 1e-5,
                       .router_aux_loss_coef = 0.02, .init_std = 0.02};
    char path[4096];
    moe_err e;
    path_in(path, dir, "config.json");
    CHECK_MSG(hf_config_write(path, &m, &e) == 0, "%s", e.msg);
    enum { MAXT = 64 };
    static char names[MAXT][128];
    st_tensor t[MAXT];
    float *bufs[MAXT];
    int n = 0;
    const int64_t H = 16, I = 32, V = 256, Q = 4 * 4, KV = 2 * 4, E = 4;
#define ADD(nd, d0, d1, ...)                                                        \
    do {                                                                            \
        snprintf(names[n], sizeof names[n], __VA_ARGS__);                           \
        t[n] = (st_tensor){names[n], ST_F32, nd, {d0, d1}, NULL, 0};                \
        n++;                                                                        \
    } while (0)
    ADD(2, V, H, "model.embed_tokens.weight");
    ADD(1, H, 0, "model.norm.weight");
    ADD(2, V, H, "lm_head.weight");
    for (int l = 0; l < 2; l++) {
        ADD(1, H, 0, "model.layers.%d.input_layernorm.weight", l);
        ADD(1, H, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(2, Q, H, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(2, KV, H, "model.layers.%d.self_attn.k_proj.weight", l);
        ADD(2, KV, H, "model.layers.%d.self_attn.v_proj.weight", l);
        ADD(2, H, Q, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(2, E, H, "model.layers.%d.block_sparse_moe.gate.weight", l);
        for (int x = 0; x < E; x++) {
            ADD(2, I, H, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", l, x);
            ADD(2, H, I, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", l, x);
            ADD(2, I, H, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", l, x);
        }
    }
#undef ADD
    for (int i = 0; i < n; i++) {
        int64_t numel = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
        bufs[i] = malloc((size_t)numel * sizeof(float));
        for (int64_t k = 0; k < numel; k++)
            bufs[i][k] = fixture_value(t[i].name, k);
        t[i].data = bufs[i];
    }
    path_in(path, dir, "model.safetensors");
    st_meta meta[] = {{"format", "pt"}};
    CHECK_MSG(st_write(path, t, n, meta, 1, &e) == 0, "%s", e.msg);

    hf_dir *d;
    CHECK_MSG(hf_dir_open(dir, &d, &e) == 0, "%s", e.msg);
    if (d) {
        CHECK(hf_dir_count(d) == n);
        float *out = malloc((size_t)(V * H) * sizeof(float));
        CHECK(hf_dir_read_f32(d, "model.layers.1.block_sparse_moe.experts.2.w2.weight", 2, (int64_t[]){H, I}, out, &e) == 0);
        CHECK(out[5] == fixture_value("model.layers.1.block_sparse_moe.experts.2.w2.weight", 5));
        free(out);
        hf_dir_close(d);
    }
    for (int i = 0; i < n; i++)
        free(bufs[i]);
}

static void test_export_for_transformers(void)
{
    const char *dir = getenv("MOE_CKPT_EXPORT_DIR");
    char hf[4096], st_path_buf[4096];
    if (!dir || !dir[0])
        dir = g_tmp;
    path_in(hf, dir, "hf_moekit");
    mkdir(hf, 0755);
    export_tiny_model(hf);

    /* Every dtype route of the writer, for safetensors' own loader. */
    float vals[12];
    for (int k = 0; k < 12; k++)
        vals[k] = fixture_value("mixed", k);
    uint16_t bf[4] = {0x3F80, 0xBF40, 0x4049, 0x0000};
    int32_t i32[3] = {7, -8, 9};
    float one = -1.25f;
    st_tensor t[] = {
        {"f32", ST_F32, 2, {3, 4}, vals, 0},   {"bf16_conv", ST_BF16, 2, {4, 3}, vals, 1},
        {"f16_conv", ST_F16, 1, {12}, vals, 1}, {"bf16_raw", ST_BF16, 1, {4}, bf, 0},
        {"i32", ST_I32, 1, {3}, i32, 0},        {"scalar", ST_F32, 0, {0}, &one, 0},
        {"empty", ST_BF16, 2, {0, 3}, NULL, 0},
    };
    st_meta meta[] = {{"format", "pt"}, {"writer", "moekit"}};
    path_in(st_path_buf, dir, "st_moekit.safetensors");
    moe_err e;
    CHECK_MSG(st_write(st_path_buf, t, 7, meta, 2, &e) == 0, "%s", e.msg);
    st_file *f;
    CHECK(st_open(st_path_buf, &f, &e) == 0 && st_count(f) == 7);
    st_close(f);
}

/* ---- checkpoint directories ----------------------------------------------- */

static const char *make_root(const char *name)
{
    const char *r = tmp_path(name);
    fsio_rm_rf(r, NULL);
    return r;
}

/* ---- sharded checkpoint files ---------------------------------------------- */

static int host_get(const ckpt_slice *s, uint64_t first, uint64_t n, void *host, moe_err *e)
{
    memcpy(host, (const float *)s->base + s->start + first, n * sizeof(float));
    return 0;
}

static int host_put(const ckpt_slice *s, uint64_t first, uint64_t n, const void *host, moe_err *e)
{
    memcpy((float *)s->base + s->start + first, host, n * sizeof(float));
    return 0;
}

static ckpt_slice host_slice(const char *name, int ndim, int64_t d0, int64_t d1, uint64_t start,
                             uint64_t count, float *base)
{
    ckpt_slice s = {0};
    snprintf(s.name, sizeof s.name, "%s", name);
    s.dtype = ST_F32;
    s.ndim = ndim;
    s.shape[0] = d0;
    s.shape[1] = d1;
    s.start = start;
    s.count = count;
    s.get = host_get;
    s.put = host_put;
    s.base = base;
    return s;
}

/* Two "ranks" write A[0,25)+B and A[25,60) with 64-byte blocks; a third
 * layout reads A[10,50) and B back through a 24-byte staging buffer. */
static void test_shards_reshard(void)
{
    const char *dir = make_root("shards");
    moe_err e;
    CHECK(fsio_mkdir_p(dir, 0755, &e) == 0);
    float A[60], B[7], got[60], gotB[7];
    for (int i = 0; i < 60; i++)
        A[i] = (float)i * 0.5f;
    for (int i = 0; i < 7; i++)
        B[i] = -(float)i;
    ckpt_slice r0[2] = {host_slice("A", 2, 6, 10, 0, 25, A), host_slice("B", 1, 7, 0, 0, 7, B)};
    ckpt_slice r1[1] = {host_slice("A", 2, 6, 10, 25, 35, A)};
    ckpt_slice_list l0 = {r0, 2, 2}, l1 = {r1, 1, 1};
    char staging[24];
    json_writer w;
    jw_init(&w, 0);
    const char *head = "{\"format\":\"" CKPT_INDEX_FORMAT "\",\"block_bytes\":64,\"files\":[";
    jw_raw(&w, head, strlen(head));
    json_writer rec;
    jw_init(&rec, 0);
    CHECK_MSG(shard_write(dir, "r0.safetensors", &l0, 64, staging, sizeof staging, &rec, &e) == 0, "%s", e.msg);
    CHECK(jw_finish(&rec, &e) == 0);
    jw_raw(&w, rec.buf, rec.len);
    jw_free(&rec);
    jw_init(&rec, 0);
    CHECK(shard_write(dir, "r1.safetensors", &l1, 64, staging, sizeof staging, &rec, &e) == 0);
    CHECK(jw_finish(&rec, &e) == 0);
    jw_raw(&w, ",", 1);
    jw_raw(&w, rec.buf, rec.len);
    jw_raw(&w, "]}", 2);
    jw_free(&rec);
    write_bytes(path_in((char[4096]){0}, dir, CKPT_INDEX_FILE), w.buf, w.len);
    jw_free(&w);
    /* each file is valid safetensors on its own: a piece is "<name>@<start>" */
    st_file *f;
    CHECK(st_open(path_in((char[4096]){0}, dir, "r1.safetensors"), &f, &e) == 0 && st_find(f, "A@25") >= 0);
    st_close(f);

    shard_set *s;
    CHECK_MSG(shard_set_open(dir, &s, &e) == 0, "%s", e.msg);
    CHECK(shard_set_count(s) == 2 && shard_set_find(s, "A")->shape[1] == 10);
    memset(got, 0, sizeof got);
    ckpt_slice want[2] = {host_slice("A", 2, 6, 10, 10, 40, got), host_slice("B", 1, 7, 0, 0, 7, gotB)};
    ckpt_slice_list lw = {want, 2, 2};
    CHECK_MSG(shard_set_fill(s, &lw, staging, sizeof staging, &e) == 0, "%s", e.msg);
    CHECK(memcmp(got + 10, A + 10, 40 * sizeof(float)) == 0 && got[9] == 0 && got[50] == 0);
    CHECK(memcmp(gotB, B, sizeof B) == 0);
    /* each block is read once: no more than the two files' sizes */
    struct stat st0, st1;
    stat(path_in((char[4096]){0}, dir, "r0.safetensors"), &st0);
    stat(path_in((char[4096]){0}, dir, "r1.safetensors"), &st1);
    CHECK(shard_set_bytes_read(s) <= (uint64_t)(st0.st_size + st1.st_size));
    ckpt_slice wrong = host_slice("A", 2, 6, 11, 0, 60, got);
    ckpt_slice_list lx = {&wrong, 1, 1};
    CHECK_ERR(shard_set_fill(s, &lx, staging, sizeof staging, &e), e, "A is F32 [6,10], this model needs F32 [6,11]", NULL);
    shard_set_close(s);

    /* a flipped byte in r1's data: the read names the file and the bytes */
    char *p1 = path_in((char[4096]){0}, dir, "r1.safetensors");
    FILE *fp = fopen(p1, "r+b");
    fseek(fp, -3, SEEK_END);
    int c = fgetc(fp);
    fseek(fp, -3, SEEK_END);
    fputc(c ^ 0x10, fp);
    fclose(fp);
    CHECK(shard_set_open(dir, &s, &e) == 0);
    CHECK_ERR(shard_set_fill(s, &lw, staging, sizeof staging, &e), e, "r1.safetensors: bytes", "do not match");
    shard_set_close(s);
    /* a truncated one is refused at open */
    CHECK(truncate(p1, st1.st_size - 1) == 0);
    CHECK_ERR(shard_set_open(dir, &s, &e), e, "r1.safetensors", "truncated");
}

/* Write "<name>" files with content that depends on step, then commit. */
static int commit_step(const char *root, int64_t step, int max_keep, size_t big, moe_err *e)
{
    ckpt_txn t;
    if (ckpt_begin(&t, root, step, e) != 0)
        return -1;
    char p[4096], text[64];
    snprintf(text, sizeof text, "step %lld\n", (long long)step);
    path_in(p, t.tmp_dir, "step.txt");
    int rc = fsio_write_all(p, text, strlen(text), e);
    if (rc == 0 && big) {
        unsigned char *b = malloc(big);
        for (size_t i = 0; i < big; i++)
            b[i] = (unsigned char)(i * 31 + (size_t)step);
        path_in(p, t.tmp_dir, "model.safetensors");
        rc = fsio_write_all(p, b, big, e);
        free(b);
    }
    if (rc == 0) {
        path_in(p, t.tmp_dir, "config.json");
        rc = fsio_write_all(p, "{}\n", 3, e);
    }
    if (rc == 0)
        rc = ckpt_commit(&t, max_keep, e);
    else
        ckpt_abort(&t);
    return rc;
}

static int64_t step_in_dir(const char *dir)
{
    char p[4096];
    path_in(p, dir, "step.txt");
    char *s = read_text(p, NULL);
    long long v = -1;
    if (s && sscanf(s, "step %lld", &v) != 1)
        v = -1;
    free(s);
    return v;
}

static int count_entries(const char *root, const char *prefix)
{
    int n = 0;
    DIR *d = opendir(root);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void test_ckpt_commit_latest(void)
{
    const char *root = make_root("ckpt_basic");
    char dir[4096];
    int64_t step = -1;
    moe_err e;
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 1 && e.msg[0] == '\0'); /* no root yet */
    CHECK_MSG(commit_step(root, 1, 0, 1000, &e) == 0, "%s", e.msg);
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 0 && step == 1 && e.msg[0] == '\0');
    CHECK(strstr(dir, "/step_00000001") != NULL && step_in_dir(dir) == 1);
    CHECK(ckpt_verify(dir, &e) == 0);
    CHECK(count_entries(root, ".tmp-") == 0);

    /* MANIFEST: header, sorted "<sha256>  <name>" + "# size" lines, end line;
     * sha256sum -c reads it. */
    char mp[4096];
    path_in(mp, dir, "MANIFEST");
    char *man = read_text(mp, NULL);
    CHECK(man && strncmp(man, "# moekit-manifest 2", 19) == 0);
    CHECK(man && strstr(man, "  config.json\n# size 3\n") && strstr(man, "  model.safetensors\n# size 1000\n") &&
          strstr(man, "# end 3\n"));
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "cd '%s' && sha256sum --quiet --strict -c MANIFEST", dir);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    CHECK(man && strstr(man, "config.json") < strstr(man, "model.safetensors"));
    uint8_t dg[SHA256_DIGEST_LEN];
    char hex[SHA256_HEX_LEN + 1];
    CHECK(sha256("{}\n", 3, dg, NULL) == 0);
    sha256_hex(dg, hex);
    CHECK(man && strstr(man, hex) != NULL);
    free(man);

    CHECK(commit_step(root, 2, 0, 1000, &e) == 0);
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 0 && step == 2 && step_in_dir(dir) == 2);
    CHECK(count_entries(root, "step_") == 2);
    char small[8];
    CHECK_ERR(ckpt_latest(root, small, sizeof small, &step, &e), e, "does not fit", NULL);
    /* Steps past 8 digits still sort by number, not by name. */
    CHECK(commit_step(root, 123456789012LL, 0, 0, &e) == 0);
    CHECK(commit_step(root, 99999999, 0, 0, &e) == 0);
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 0 && step == 123456789012LL);
}

static void test_ckpt_prune(void)
{
    const char *root = make_root("ckpt_prune");
    moe_err e;
    for (int s = 1; s <= 5; s++)
        CHECK_MSG(commit_step(root, s * 10, 2, 100, &e) == 0, "%s", e.msg);
    char p[4096];
    CHECK(count_entries(root, "step_") == 2);
    path_in(p, root, "step_00000040");
    CHECK(access(p, F_OK) == 0);
    path_in(p, root, "step_00000050");
    CHECK(access(p, F_OK) == 0);
    /* An older step written now survives its own pruning. */
    CHECK(commit_step(root, 30, 2, 100, &e) == 0);
    path_in(p, root, "step_00000030");
    CHECK(access(p, F_OK) == 0 && count_entries(root, "step_") == 3);
    CHECK(commit_step(root, 60, 1, 100, &e) == 0);
    CHECK(count_entries(root, "step_") == 1 && count_entries(root, ".del-") == 0);
    /* 0 keeps everything. */
    for (int s = 7; s <= 9; s++)
        CHECK(commit_step(root, s * 10, 0, 10, &e) == 0);
    CHECK(count_entries(root, "step_") == 4);
    /* Unrelated entries in the root are never touched. */
    path_in(p, root, "notes.txt");
    write_text(p, "keep me");
    path_in(p, root, "step_abc");
    mkdir(p, 0755);
    CHECK(commit_step(root, 100, 1, 10, &e) == 0);
    CHECK(count_entries(root, "step_") == 2 && count_entries(root, "notes.txt") == 1);
}

static void flip_byte(const char *path, long at)
{
    int fd = open(path, O_RDWR);
    unsigned char c;
    if (pread(fd, &c, 1, at) == 1) {
        c ^= 0x01;
        if (pwrite(fd, &c, 1, at) != 1)
            fprintf(stderr, "  flip_byte: pwrite failed\n");
    }
    close(fd);
}

static void test_ckpt_corruption(void)
{
    const char *root = make_root("ckpt_corrupt");
    moe_err e;
    CHECK(commit_step(root, 1, 0, 5000, &e) == 0);
    CHECK(commit_step(root, 2, 0, 5000, &e) == 0);
    char dir[4096], file[4096], mp[4096];
    path_in(dir, root, "step_00000002");
    path_in(file, dir, "model.safetensors");
    path_in(mp, dir, "MANIFEST");
    char *good_manifest = read_text(mp, NULL);

    flip_byte(file, 4321);
    CHECK_ERR(ckpt_verify(dir, &e), e, "step_00000002/model.safetensors", "corrupt");
    char got[4096];
    int64_t step;
    CHECK(ckpt_latest(root, got, sizeof got, &step, &e) == 0 && step == 1);
    CHECK_MSG(strstr(e.msg, "skipped broken checkpoint") && strstr(e.msg, "step_00000002/model.safetensors"), "%s", e.msg);
    flip_byte(file, 4321);
    CHECK(ckpt_verify(dir, &e) == 0);

    CHECK(truncate(file, 4999) == 0);
    CHECK_ERR(ckpt_verify(dir, &e), e, "model.safetensors: 4999 bytes, MANIFEST says 5000", NULL);
    unlink(file);
    CHECK_ERR(ckpt_verify(dir, &e), e, "model.safetensors: listed in MANIFEST but missing", NULL);
    CHECK(commit_step(root, 2, 0, 5000, &e) == 0); /* rewrite step 2 */
    free(good_manifest);
    good_manifest = read_text(mp, NULL);

    char extra[4096];
    path_in(extra, dir, "stray.bin");
    write_text(extra, "x");
    CHECK_ERR(ckpt_verify(dir, &e), e, "stray.bin: not listed in MANIFEST", NULL);
    unlink(extra);
    mkdir(extra, 0755);
    CHECK_ERR(ckpt_verify(dir, &e), e, "stray.bin: not a regular file", NULL);
    rmdir(extra);

    /* MANIFEST damage: each variant is refused. */
    static const struct {
        const char *what, *needle;
    } damage[] = {{"drop-end", "no end line"}, {"no-newline", "no final newline"}, {"bad-header", "line 1"},
                  {"bad-count", "end line says 2 files, 3 are listed"}, {"bad-hex", "line 2"},
                  {"dup", "listed twice"}, {"slash", "not a file name"}, {"after-end", "after the end line"},
                  {"empty", "no final newline"}, {"hex-flip", "corrupt"}};
    size_t glen = strlen(good_manifest);
    for (size_t i = 0; i < sizeof damage / sizeof *damage; i++) {
        char *m = malloc(glen + 512);
        memcpy(m, good_manifest, glen + 1);
        const char *w = damage[i].what;
        size_t hdr = (size_t)(strchr(m, '\n') - m) + 1;
        if (!strcmp(w, "drop-end"))
            *strstr(m, "# end 3\n") = '\0';
        else if (!strcmp(w, "no-newline"))
            m[glen - 1] = '\0';
        else if (!strcmp(w, "bad-header"))
            m[8] = 'X';
        else if (!strcmp(w, "bad-count"))
            strstr(m, "# end 3\n")[6] = '2';
        else if (!strcmp(w, "bad-hex"))
            m[hdr] = 'G';
        else if (!strcmp(w, "dup")) { /* a file's two lines once more */
            char *l2 = m + hdr, *nl = strchr(strchr(l2, '\n') + 1, '\n');
            size_t ll = (size_t)(nl - l2) + 1;
            char *endl = strstr(m, "# end 3\n");
            memmove(endl + ll, endl, strlen(endl) + 1);
            memcpy(endl, l2, ll);
            strstr(m, "# end 3\n")[6] = '4';
        } else if (!strcmp(w, "slash"))
            memcpy(strstr(m, " config.json") + 1, "../fig.json", 11);
        else if (!strcmp(w, "after-end"))
            strcat(m, "junk\n");
        else if (!strcmp(w, "empty"))
            m[0] = '\0';
        else if (!strcmp(w, "hex-flip")) {
            char *h = m + hdr;
            h[10] = h[10] == '0' ? '1' : '0';
        }
        write_text(mp, m);
        int rc = ckpt_verify(dir, &e);
        CHECK_MSG(rc == -1 && strstr(e.msg, damage[i].needle), "%s: rc %d \"%s\"", w, rc, e.msg);
        CHECK_MSG(strstr(e.msg, "step_00000002") != NULL, "%s: %s", w, e.msg);
        free(m);
    }
    unlink(mp);
    CHECK_ERR(ckpt_verify(dir, &e), e, "no MANIFEST", "step_00000002");
    CHECK(ckpt_latest(root, got, sizeof got, &step, &e) == 0 && step == 1 && strstr(e.msg, "no MANIFEST"));
    write_text(mp, good_manifest);
    CHECK(ckpt_verify(dir, &e) == 0);
    free(good_manifest);

    /* Nothing valid at all: 1, with the reasons. */
    path_in(dir, root, "step_00000001/step.txt");
    write_text(dir, "tampered\n");
    path_in(dir, root, "step_00000002/step.txt");
    write_text(dir, "tampered\n");
    CHECK(ckpt_latest(root, got, sizeof got, &step, &e) == 1 && strstr(e.msg, "step_00000001") &&
          strstr(e.msg, "step_00000002"));
}

static void test_ckpt_replace_same_step(void)
{
    const char *root = make_root("ckpt_replace");
    moe_err e;
    CHECK(commit_step(root, 5, 0, 64, &e) == 0);
    ckpt_txn t;
    CHECK(ckpt_begin(&t, root, 5, &e) == 0);
    char p[4096];
    path_in(p, t.tmp_dir, "step.txt");
    write_text(p, "step 5\nsecond\n");
    CHECK_MSG(ckpt_commit(&t, 0, &e) == 0, "%s", e.msg);
    CHECK(t.tmp_dir[0] == '\0');
    char dir[4096];
    int64_t step;
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 0 && step == 5);
    path_in(p, dir, "step.txt");
    char *s = read_text(p, NULL);
    CHECK(s && strcmp(s, "step 5\nsecond\n") == 0);
    free(s);
    path_in(p, dir, "model.safetensors");
    CHECK(access(p, F_OK) != 0); /* the old directory's files are gone */
    CHECK(count_entries(root, ".") == 2); /* only . and .. besides step_ */
    CHECK(count_entries(root, "step_") == 1);
}

static void test_ckpt_errors(void)
{
    const char *root = make_root("ckpt_errors");
    ckpt_txn t;
    moe_err e;
    CHECK_ERR(ckpt_begin(&t, root, -1, &e), e, "step -1 is negative", NULL);
    CHECK_ERR(ckpt_begin(&t, "", 1, &e), e, "empty", NULL);
    write_text(tmp_path("ckpt_is_file"), "x");
    CHECK_ERR(ckpt_begin(&t, tmp_path("ckpt_is_file"), 1, &e), e, "ckpt_is_file", "not a directory");
    memset(&t, 0, sizeof t);
    CHECK_ERR(ckpt_commit(&t, 0, &e), e, "no checkpoint in progress", NULL);

    char p[4096];
    CHECK(ckpt_begin(&t, root, 3, &e) == 0);
    path_in(p, t.tmp_dir, "MANIFEST");
    write_text(p, "mine");
    CHECK_ERR(ckpt_commit(&t, 0, &e), e, "MANIFEST is reserved", "step 3 not committed");
    CHECK(t.tmp_dir[0] != '\0');
    ckpt_abort(&t);
    CHECK(t.tmp_dir[0] == '\0' && count_entries(root, ".tmp-") == 0);
    ckpt_abort(&t); /* twice is harmless */

    CHECK(ckpt_begin(&t, root, 3, &e) == 0);
    path_in(p, t.tmp_dir, "sub");
    mkdir(p, 0755);
    CHECK_ERR(ckpt_commit(&t, 0, &e), e, "sub: not a regular file", NULL);
    ckpt_abort(&t);
    CHECK(ckpt_begin(&t, root, 3, &e) == 0);
    path_in(p, t.tmp_dir, "link");
    CHECK(symlink("/etc/passwd", p) == 0);
    CHECK_ERR(ckpt_commit(&t, 0, &e), e, "link: not a regular file", NULL);
    CHECK(ckpt_begin(&t, root, 3, &e) == 0); /* begin again without abort: a fresh dir */
    CHECK(access(p, F_OK) != 0 && count_entries(root, ".tmp-") == 1);
    CHECK_ERR(ckpt_commit(&t, -1, &e), e, "max_keep -1", NULL);
    CHECK(ckpt_commit(&t, 0, &e) == 0); /* an empty checkpoint is still a checkpoint */
    char dir[4096];
    int64_t step;
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 0 && step == 3);
    CHECK(chmod(root, 0) == 0);
    if (access(root, R_OK) != 0) /* root ignores permissions */
        CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == -1);
    chmod(root, 0755);
    CHECK(ckpt_verify(tmp_path("no_such_ckpt"), &e) == -1 && strstr(e.msg, "no MANIFEST"));
}

static pid_t dead_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return p; /* reaped: no process has this id until it is reused */
}

static void copy_dir_files(const char *from, const char *to)
{
    mkdir(to, 0755);
    DIR *d = opendir(from);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        size_t n = 0;
        char *s = read_text(a, &n);
        if (s)
            write_bytes(b, s, n);
        free(s);
    }
    if (d)
        closedir(d);
}

static void test_ckpt_stale_and_parked(void)
{
    const char *root = make_root("ckpt_stale");
    moe_err e;
    CHECK(commit_step(root, 1, 0, 10, &e) == 0);
    char src[4096], p[4096];
    path_in(src, root, "step_00000001");
    pid_t dead = dead_pid();

    /* A complete-looking temp dir is still not a checkpoint. */
    snprintf(p, sizeof p, "%s/.tmp-step_00000099-%d", root, (int)dead);
    copy_dir_files(src, p);
    path_in(p, root, ".tmp-step_00000098-1"); /* pid 1 is alive */
    copy_dir_files(src, p);
    snprintf(p, sizeof p, "%s/.del-step_00000000-%d", root, (int)dead);
    copy_dir_files(src, p);
    char dir[4096];
    int64_t step;
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 0 && step == 1);

    /* A parked step whose replacement never arrived is found by latest... */
    snprintf(p, sizeof p, "%s/.old-step_00000007-%d", root, (int)dead);
    copy_dir_files(src, p);
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 0 && step == 7 && strstr(dir, ".old-step_00000007"));
    /* ...and restored by the next begin, which also clears the dead writers'
     * leftovers but not those of live processes. */
    ckpt_txn t;
    CHECK(ckpt_begin(&t, root, 2, &e) == 0);
    path_in(p, root, "step_00000007");
    CHECK(access(p, F_OK) == 0);
    CHECK(count_entries(root, ".old-") == 0 && count_entries(root, ".del-") == 0);
    snprintf(p, sizeof p, "%s/.tmp-step_00000099-%d", root, (int)dead);
    CHECK(access(p, F_OK) != 0);
    path_in(p, root, ".tmp-step_00000098-1");
    CHECK(access(p, F_OK) == 0);
    ckpt_abort(&t);
    CHECK(ckpt_latest(root, dir, sizeof dir, &step, &e) == 0 && step == 7 && strstr(dir, "/step_00000007"));
    /* A parked copy beside an existing step is just garbage. */
    snprintf(p, sizeof p, "%s/.old-step_00000007-%d", root, (int)dead);
    copy_dir_files(src, p);
    CHECK(ckpt_begin(&t, root, 8, &e) == 0 && count_entries(root, ".old-") == 0);
    ckpt_abort(&t);
}

/* ---- killed mid-commit ---------------------------------------------------- */

/* The child's whole job: a new checkpoint, written and committed. */
static void child_commit(const char *root, int64_t step, int max_keep)
{
    moe_err e;
    _exit(commit_step(root, step, max_keep, 256 << 10, &e) == 0 ? 0 : 3);
}

/* After a kill: the newest valid checkpoint is the old or the new one, and
 * it verifies. Returns the step found, or -1. */
static int64_t check_after_kill(const char *root, int64_t old_step, int64_t new_step, const char *when)
{
    char dir[4096];
    int64_t step = -1;
    moe_err e;
    int rc = ckpt_latest(root, dir, sizeof dir, &step, &e);
    CHECK_MSG(rc == 0, "%s: no checkpoint found (rc %d): %s", when, rc, e.msg);
    if (rc != 0)
        return -1;
    CHECK_MSG(step == old_step || step == new_step, "%s: found step %lld, expected %lld or %lld", when,
              (long long)step, (long long)old_step, (long long)new_step);
    CHECK_MSG(e.msg[0] == '\0', "%s: skipped a broken checkpoint: %s", when, e.msg);
    CHECK_MSG(ckpt_verify(dir, &e) == 0, "%s: %s", when, e.msg);
    CHECK_MSG(step_in_dir(dir) == step, "%s: step.txt says %lld in %s", when, (long long)step_in_dir(dir), dir);
    return step;
}

static void test_ckpt_sigkill_timed(void)
{
    const char *root = make_root("ckpt_kill_timed");
    moe_err e;
    CHECK(commit_step(root, 1, 1, 256 << 10, &e) == 0);
    /* Calibrate: how long does an unhindered child take? */
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0)
        child_commit(root, 2, 1);
    int st;
    waitpid(pid, &st, 0);
    double full_us = (now_s() - t0) * 1e6;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int64_t latest = check_after_kill(root, 1, 2, "calibration");
    const int runs = 60;
    int saw_old = 0, saw_new = 0;
    for (int r = 0; r < runs; r++) {
        int64_t next = latest + 1;
        useconds_t delay = (useconds_t)(full_us * 1.2 * r / runs);
        pid = fork();
        if (pid == 0)
            child_commit(root, next, 1 + r % 2);
        if (delay)
            usleep(delay);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        char when[64];
        snprintf(when, sizeof when, "kill after %u us (run %d)", (unsigned)delay, r);
        int64_t got = check_after_kill(root, latest, next, when);
        saw_old += got == latest;
        saw_new += got == next;
        if (got >= 0)
            latest = got;
    }
    /* Both outcomes happen, or the sweep did not cover the commit. */
    CHECK_MSG(saw_old > 0 && saw_new > 0, "old %d new %d (commit took %.0f us)", saw_old, saw_new, full_us);
    ckpt_txn t;
    CHECK(ckpt_begin(&t, root, latest + 1, &e) == 0);
    CHECK(count_entries(root, ".tmp-") == 1 && count_entries(root, ".del-") == 0); /* only our own */
    ckpt_abort(&t);
}

/* Stop the traced child at its k-th system call entry and kill it there:
 * the file system changes only through system calls, so killing before
 * each one in turn visits every state a crash can leave. Returns the number
 * of system calls the child made when it was not killed (k <= 0), or -1
 * when ptrace is not available. */
static long run_traced(const char *root, int64_t step, int max_keep, long kill_at)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0)
            _exit(4);
        raise(SIGSTOP);
        child_commit(root, step, max_keep);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFSTOPPED(st)) {
        return -1;
    }
    ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)(PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL));
    long entries = 0;
    int in_syscall = 0, sig = 0;
    for (;;) {
        if (ptrace(PTRACE_SYSCALL, pid, NULL, (void *)(long)sig) != 0)
            break;
        sig = 0;
        if (waitpid(pid, &st, 0) < 0 || WIFEXITED(st) || WIFSIGNALED(st))
            break;
        if (WIFSTOPPED(st) && WSTOPSIG(st) == (SIGTRAP | 0x80)) {
            in_syscall = !in_syscall;
            if (in_syscall && ++entries == kill_at) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                return entries;
            }
        } else if (WIFSTOPPED(st)) {
            sig = WSTOPSIG(st); /* deliver the child's own signals */
        }
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 4)
        return -1;
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "traced child ended with status %d", st);
    return entries;
}

static void test_ckpt_sigkill_every_syscall(void)
{
    const char *root = make_root("ckpt_kill_ptrace");
    moe_err e;
    CHECK(commit_step(root, 1, 1, 4096, &e) == 0);
    long total = run_traced(root, 2, 1, 0);
    if (total < 0) {
        fprintf(stderr, "  note: ptrace is not permitted here; the timed SIGKILL test still ran\n");
        return;
    }
    int64_t latest = check_after_kill(root, 1, 2, "untraced run");
    CHECK(total > 20);
    /* New steps (rename into place, prune with max_keep 1), then the same
     * step again (exchange with the existing directory). */
    for (int pass = 0; pass < 2; pass++) {
        int saw_old = 0, saw_new = 0;
        for (long k = 1; k <= total + 5; k++) {
            int64_t next = pass == 0 ? latest + 1 : latest;
            long got = run_traced(root, next, 1, k);
            char when[96];
            snprintf(when, sizeof when, "pass %d: killed at system call %ld of %ld", pass, k, total);
            int64_t found = check_after_kill(root, latest, next, when);
            if (pass == 0) {
                saw_old += found == latest;
                saw_new += found == next;
                if (found >= 0)
                    latest = found;
            }
            if (got < k) /* finished before reaching k */
                break;
        }
        if (pass == 0)
            CHECK_MSG(saw_old > 0 && saw_new > 0, "old %d new %d", saw_old, saw_new);
    }
    ckpt_txn t;
    CHECK(ckpt_begin(&t, root, latest + 1, &e) == 0);
    CHECK(count_entries(root, ".tmp-") == 1 && count_entries(root, ".old-") == 0 && count_entries(root, ".del-") == 0);
    ckpt_abort(&t);
}

/* ---- main ----------------------------------------------------------------- */

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/moe_ckpt_test_XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    rng_state ^= (uint64_t)getpid();

    RUN(test_json_values);
    RUN(test_json_numbers);
    RUN(test_json_strings);
    RUN(test_json_malformed);
    RUN(test_json_limits);
    RUN(test_json_prefixes_and_mutations);
    RUN(test_json_big_object);
    RUN(test_json_writer);
    RUN(test_bf16);
    RUN(test_f16);
    RUN(test_sha256_vectors);
    RUN(test_st_round_trip);
    RUN(test_st_write_errors);
    RUN(test_st_known_bytes);
    RUN(test_st_python_fixture);
    RUN(test_st_truncations);
    RUN(test_st_malformed_headers);
    RUN(test_st_fuzz);
    RUN(test_hf_single);
    RUN(test_hf_sharded);
    RUN(test_hf_dir_errors);
    RUN(test_hf_transformers_fixture);
    RUN(test_hf_config_tf4);
    RUN(test_hf_config_tf5);
    RUN(test_hf_config_round_trip);
    RUN(test_hf_config_variants);
    RUN(test_export_for_transformers);
    RUN(test_shards_reshard);
    RUN(test_ckpt_commit_latest);
    RUN(test_ckpt_prune);
    RUN(test_ckpt_corruption);
    RUN(test_ckpt_replace_same_step);
    RUN(test_ckpt_errors);
    RUN(test_ckpt_stale_and_parked);
    RUN(test_ckpt_sigkill_timed);
    RUN(test_ckpt_sigkill_every_syscall);

    moe_err e;
    if (fsio_rm_rf(g_tmp, &e) != 0)
        fprintf(stderr, "cleanup: %s\n", e.msg);
    return check_summary("test_ckpt");
}

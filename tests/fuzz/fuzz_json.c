/* Fuzz the JSON parser (safetensors headers, config.json and shard indexes
 * all go through it): parse, walk every value, and check that each object
 * member is found again by json_get (keys are unique). */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/ckpt/json.h"

FUZZ_TARGET("json");

static void walk(const json_value *v, int depth)
{
    if (depth > JSON_DEFAULT_MAX_DEPTH + 1)
        abort(); /* the parser bounds nesting */
    switch (v->type) {
    case JSON_STRING:
        if (v->str.s[v->str.len] != '\0')
            abort();
        break;
    case JSON_ARRAY:
        for (size_t i = 0; i < v->arr.n; i++)
            walk(&v->arr.items[i], depth + 1);
        break;
    case JSON_OBJECT:
        for (size_t i = 0; i < v->obj.n; i++) {
            const json_member *m = &v->obj.members[i];
            /* json_get matches C strings: keys with \u0000 inside are skipped */
            if (strlen(m->key) == m->key_len && json_get(v, m->key) != &m->value)
                abort();
            walk(&m->value, depth + 1);
        }
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_doc *d = NULL;
    moe_err e = {{0}};
    /* the exact bytes, not NUL-terminated: the parser must not read past len */
    if (json_parse((const char *)data, size, NULL, &d, &e) != 0) {
        if (d || e.msg[0] == '\0')
            abort();
        return 0;
    }
    walk(json_root(d), 1);
    json_free(d);
    return 0;
}

/* Fuzz the plugin's reader of the trainer's answers (plugin/planner.c,
 * planner_parse): whatever a child prints, the parser returns 0 or -1 with
 * a reason, never reads or writes out of bounds, and what it accepts it
 * accepts again written back in the grammar trainer/query.c writes. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugin/planner.h"

FUZZ_TARGET("planner_answer");

static size_t put_string(char *out, size_t used, size_t n, const char *s)
{
    used += (size_t)snprintf(out + used, n - used, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p && used + 8 < n; p++) {
        if (*p == '"' || *p == '\\')
            used += (size_t)snprintf(out + used, n - used, "\\%c", *p);
        else if (*p < 0x20)
            used += (size_t)snprintf(out + used, n - used, "\\u%04x", *p);
        else
            out[used++] = (char)*p;
    }
    used += (size_t)snprintf(out + used, n - used, "\"");
    return used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static planner_answer a, b;
    moe_err e = {{0}};
    if (planner_parse((const char *)data, size, &a, &e) != 0) {
        if (!e.msg[0])
            abort();
        return 0;
    }
    if (a.n < 0 || a.n > PLANNER_MAX_FIELDS)
        abort();
    static char out[4 * PLANNER_OUT_MAX];
    size_t used = (size_t)snprintf(out, sizeof out, "{");
    for (int i = 0; i < a.n; i++) {
        const planner_field *f = &a.f[i];
        if (planner_get(&a, f->key, f->type) != f) /* keys are unique */
            abort();
        used += (size_t)snprintf(out + used, sizeof out - used, "%s\"%s\":", i ? "," : "", f->key);
        if (f->type == PLANNER_STRING)
            used = put_string(out, used, sizeof out, f->str);
        else if (f->type == PLANNER_INT)
            used += (size_t)snprintf(out + used, sizeof out - used, "%lld", f->num);
        else
            used += (size_t)snprintf(out + used, sizeof out - used, "%s", f->num ? "true" : "false");
    }
    used += (size_t)snprintf(out + used, sizeof out - used, "}\n");
    if (used >= sizeof out - 16)
        return 0;
    if (planner_parse(out, used, &b, &e) != 0) {
        fprintf(stderr, "an accepted answer written back does not parse: %s: %s\n", out, e.msg);
        abort();
    }
    if (b.n != a.n)
        abort();
    for (int i = 0; i < a.n; i++)
        if (strcmp(a.f[i].key, b.f[i].key) || a.f[i].type != b.f[i].type ||
            (a.f[i].type == PLANNER_STRING ? strcmp(a.f[i].str, b.f[i].str) != 0
                                           : a.f[i].num != b.f[i].num))
            abort();
    return 0;
}

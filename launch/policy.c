/* moekit: plugstack.conf arguments -> moe_policy. Table-driven like
 * NVIDIA/pyxis' config.c: one row per key, unknown keys rejected. */
#include "policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/install_dirs.h"
#include "../common/precision.h"

#define POLICY_MAX_WORDS 64

/* Every path key is copied with one size. */
_Static_assert(sizeof ((moe_policy *)0)->configs == sizeof ((moe_policy *)0)->trainer &&
                   sizeof ((moe_policy *)0)->data == sizeof ((moe_policy *)0)->trainer &&
                   sizeof ((moe_policy *)0)->topology_xml == sizeof ((moe_policy *)0)->trainer,
               "policy path fields differ in size");

typedef enum { KEY_PATH, KEY_BOOL, KEY_NONBW, KEY_SECONDS } key_kind;

typedef struct {
    const char *key;
    key_kind kind;
    size_t offset;
} policy_key;

#define FIELD(k, kind, f) {k, kind, offsetof(moe_policy, f)}
static const policy_key keys[] = {
    FIELD("trainer", KEY_PATH, trainer),
    FIELD("configs", KEY_PATH, configs),
    FIELD("data", KEY_PATH, data),
    FIELD("on_non_blackwell", KEY_NONBW, on_non_blackwell),
    FIELD("allow_user_configs", KEY_BOOL, allow_user_configs),
    FIELD("allow_cpu", KEY_BOOL, allow_cpu),
    FIELD("allow_fp8_block", KEY_BOOL, allow_fp8_block),
    FIELD("topology_xml", KEY_PATH, topology_xml),
    FIELD("bind", KEY_BOOL, bind),
    FIELD("refuse_memory_short", KEY_BOOL, refuse_memory_short),
    FIELD("planner_timeout", KEY_SECONDS, planner_timeout_s),
};
#define N_KEYS (sizeof keys / sizeof keys[0])

void policy_defaults(moe_policy *pol)
{
    memset(pol, 0, sizeof *pol);
    /* beside the plugin or moe-topo: PREFIX/bin/moe-train, PREFIX/share/moekit/... */
    moe_install_path(MOE_INSTALL_TRAINER, pol->trainer, sizeof pol->trainer);
    moe_install_path(MOE_INSTALL_CONFIGS, pol->configs, sizeof pol->configs);
    moe_install_path(MOE_INSTALL_DATA, pol->data, sizeof pol->data);
    pol->on_non_blackwell = MOE_NONBW_BF16;
    pol->allow_user_configs = 0;
    pol->allow_cpu = 0;
    pol->allow_fp8_block = 0;
    pol->topology_xml[0] = '\0';
    pol->bind = 1;
    pol->refuse_memory_short = 0;
    pol->planner_timeout_s = MOE_PLANNER_TIMEOUT_DEFAULT;
}

static int set_value(moe_policy *pol, const policy_key *k, const char *value, int argi,
                     const char *arg, moe_err *e)
{
    char *field = (char *)pol + k->offset;
    switch (k->kind) {
    case KEY_PATH:
        if (value[0] != '/')
            return moe_errf(e, "plugstack.conf argument %d \"%s\": %s must be an absolute path",
                            argi, arg, k->key);
        if (strlen(value) >= sizeof pol->trainer)
            return moe_errf(e, "plugstack.conf argument %d: %s is longer than %zu bytes", argi,
                            k->key, sizeof pol->trainer - 1);
        snprintf(field, sizeof pol->trainer, "%s", value);
        return 0;
    case KEY_BOOL: {
        int *b = (int *)(void *)field;
        if (strcmp(value, "yes") == 0)
            *b = 1;
        else if (strcmp(value, "no") == 0)
            *b = 0;
        else
            return moe_errf(e, "plugstack.conf argument %d \"%s\": %s must be yes or no", argi,
                            arg, k->key);
        return 0;
    }
    case KEY_SECONDS: {
        int *s = (int *)(void *)field;
        char *end;
        long v = strtol(value, &end, 10);
        if (*end || v < 1 || v > MOE_PLANNER_TIMEOUT_MAX || value[0] == '+' || value[0] == ' ')
            return moe_errf(e, "plugstack.conf argument %d \"%s\": %s must be a whole number "
                               "of seconds from 1 to %d", argi, arg, k->key,
                            MOE_PLANNER_TIMEOUT_MAX);
        *s = (int)v;
        return 0;
    }
    case KEY_NONBW: {
        moe_nonbw_policy *p = (moe_nonbw_policy *)(void *)field;
        moe_precision named;
        if (precision_parse(value, &named) == 0 && named == MOE_PREC_BF16)
            *p = MOE_NONBW_BF16;
        else if (strcmp(value, "reject") == 0)
            *p = MOE_NONBW_REJECT;
        else
            return moe_errf(e, "plugstack.conf argument %d \"%s\": %s must be bf16 or reject",
                            argi, arg, k->key);
        return 0;
    }
    }
    return moe_errf(e, "plugstack.conf argument %d: internal error", argi);
}

static void known_keys(char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_KEYS && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", keys[i].key);
}

int policy_parse(moe_policy *pol, int argc, char *const argv[], moe_err *e)
{
    int seen_at[N_KEYS] = {0};
    policy_defaults(pol);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        int argi = i + 1;
        const char *eq = strchr(arg, '=');
        if (!eq || eq == arg)
            return moe_errf(e, "plugstack.conf argument %d \"%s\": expected key=value", argi,
                            arg);
        size_t klen = (size_t)(eq - arg);
        const char *value = eq + 1;
        size_t k = 0;
        while (k < N_KEYS && !(strlen(keys[k].key) == klen && !strncmp(keys[k].key, arg, klen)))
            k++;
        if (k == N_KEYS) {
            char known[256];
            known_keys(known, sizeof known);
            return moe_errf(e, "plugstack.conf argument %d \"%s\": unknown key \"%.*s\" "
                               "(known keys: %s)", argi, arg, (int)klen, arg, known);
        }
        if (seen_at[k])
            return moe_errf(e, "plugstack.conf argument %d \"%s\": %s was already set by "
                               "argument %d", argi, arg, keys[k].key, seen_at[k]);
        if (!*value)
            return moe_errf(e, "plugstack.conf argument %d \"%s\": %s needs a value", argi, arg,
                            keys[k].key);
        if (set_value(pol, &keys[k], value, argi, arg, e))
            return -1;
        seen_at[k] = argi;
    }
    return 0;
}

int policy_parse_string(moe_policy *pol, const char *words, moe_err *e)
{
    char buf[POLICY_MAX_WORDS * 128];
    if (snprintf(buf, sizeof buf, "%s", words ? words : "") >= (int)sizeof buf)
        return moe_errf(e, "policy \"%.40s...\" is longer than %zu bytes", words,
                        sizeof buf - 1);
    char *argv[POLICY_MAX_WORDS];
    int argc = 0;
    char *save = NULL;
    for (char *w = strtok_r(buf, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
        if (argc == POLICY_MAX_WORDS)
            return moe_errf(e, "policy has more than %d words", POLICY_MAX_WORDS);
        argv[argc++] = w;
    }
    return policy_parse(pol, argc, argv, e);
}

void policy_format(const moe_policy *pol, char *buf, size_t len)
{
    /* topology_xml only when set: an empty value would not parse back. */
    snprintf(buf, len,
             "trainer=%s configs=%s data=%s on_non_blackwell=%s allow_user_configs=%s "
             "allow_cpu=%s allow_fp8_block=%s%s%s bind=%s refuse_memory_short=%s planner_timeout=%d",
             pol->trainer, pol->configs, pol->data,
             pol->on_non_blackwell == MOE_NONBW_REJECT ? "reject" : "bf16",
             pol->allow_user_configs ? "yes" : "no", pol->allow_cpu ? "yes" : "no",
             pol->allow_fp8_block ? "yes" : "no", pol->topology_xml[0] ? " topology_xml=" : "",
             pol->topology_xml, pol->bind ? "yes" : "no", pol->refuse_memory_short ? "yes" : "no",
             pol->planner_timeout_s > 0 ? pol->planner_timeout_s : MOE_PLANNER_TIMEOUT_DEFAULT);
}

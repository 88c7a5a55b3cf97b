/* moekit SPANK plugin: parsing of the --moe-* user options (see args.h). */
#include "args.h"

#include <stdio.h>
#include <string.h>

const moe_arg_desc moe_args[MOE_ARG_COUNT] = {
    [MOE_ARG_CONFIG] = {"moe-config", "NAME|PATH",
                        "moekit: train this config (a name from the site's config directory)"},
    [MOE_ARG_EP] = {"moe-ep", "N",
                    "moekit: expert-parallel size (default: the config's parallel.ep)"},
    [MOE_ARG_DP] = {"moe-dp", "N", "moekit: data-parallel size (default GPUs / EP)"},
    [MOE_ARG_PRECISION] = {"moe-precision", MOE_PRECISION_JOB_NAMES,
                           "moekit: compute precision (default auto: mxfp8 on Blackwell, "
                           "else bf16)"},
    [MOE_ARG_SET] = {"moe-set", "KEY=VALUE[,KEY=VALUE]",
                     "moekit: config overrides, e.g. "
                     "train.steps=100,checkpoint.ckpt_dir=/scratch/run1"},
    [MOE_ARG_CHECK] = {"moe-check", NULL,
                       "moekit: print the launch verdict for this job and exit without training"},
};

/* The plugin decides these from the admin's policy and the node; letting
 * --moe-set change them would bypass the verdict. */
static const struct {
    const char *key;
    const char *use_instead;
} reserved_keys[] = {
    {"precision.compute", "--moe-precision"},
    {"precision.allow_fp8_block", "--moe-precision (the site's allow_fp8_block decides)"},
    {"parallel.ep", "--moe-ep"},
    {"parallel.dp", "--moe-dp"},
    {"runtime.backend", "the site policy (the plugin picks the backend)"},
};

const char *args_option_name(moe_arg_id id)
{
    static const char *const names[MOE_ARG_COUNT] = {
        [MOE_ARG_CONFIG] = "--moe-config", [MOE_ARG_EP] = "--moe-ep",
        [MOE_ARG_DP] = "--moe-dp",         [MOE_ARG_PRECISION] = "--moe-precision",
        [MOE_ARG_SET] = "--moe-set",       [MOE_ARG_CHECK] = "--moe-check",
    };
    return (id >= 0 && id < MOE_ARG_COUNT) ? names[id] : "--moe-?";
}

static int is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

/* The first control character in s, as an offset, or -1. */
static long find_control(const char *s)
{
    for (const char *p = s; *p; p++)
        if (is_control((unsigned char)*p))
            return p - s;
    return -1;
}

int args_parse_count(const char *option, const char *value, int *out, moe_err *e)
{
    if (!value || !*value)
        return moe_errf(e, "%s needs a number, e.g. %s=2", option, option);
    long v = 0;
    for (const char *p = value; *p; p++) {
        if (*p < '0' || *p > '9')
            return moe_errf(e, "%s=%s: not a whole number (only digits 0-9 are accepted)", option,
                            value);
        v = v * 10 + (*p - '0');
        if (v > MOE_ARG_MAX_PARALLEL)
            return moe_errf(e, "%s=%s: too large (at most %d)", option, value,
                            MOE_ARG_MAX_PARALLEL);
    }
    if (v < 1)
        return moe_errf(e, "%s=%s: must be at least 1", option, value);
    *out = (int)v;
    return 0;
}

int args_config_is_path(const char *value) { return value && strchr(value, '/') != NULL; }

static int check_config_name(const char *value, moe_err *e)
{
    const char *opt = "--moe-config";
    size_t len = strlen(value);
    if (len > MOE_ARG_MAX_NAME)
        return moe_errf(e, "%s: the name is %zu characters long (at most %d)", opt, len,
                        MOE_ARG_MAX_NAME);
    if (value[0] == '.')
        return moe_errf(e, "%s=%s: a config name cannot start with '.'", opt, value);
    if (strstr(value, ".."))
        return moe_errf(e, "%s=%s: a config name cannot contain '..'", opt, value);
    for (const char *p = value; *p; p++) {
        char c = *p;
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.';
        if (!ok) {
            if (is_control((unsigned char)c))
                return moe_errf(e, "%s: control character (byte 0x%02x) at position %ld", opt,
                                (unsigned char)c, (long)(p - value) + 1);
            return moe_errf(e,
                            "%s=%s: '%c' is not allowed in a config name (use letters, digits, "
                            "'_', '-' and '.')",
                            opt, value, c);
        }
    }
    return 0;
}

int args_check_config(const char *value, int allow_paths, moe_err *e)
{
    const char *opt = "--moe-config";
    if (!value || !*value)
        return moe_errf(e, "%s needs a config name, e.g. %s=L0_sanity", opt, opt);
    long bad = find_control(value);
    if (bad >= 0)
        return moe_errf(e, "%s: control character (byte 0x%02x) at position %ld", opt,
                        (unsigned char)value[bad], bad + 1);
    if (!args_config_is_path(value))
        return check_config_name(value, e);
    if (!allow_paths)
        return moe_errf(e,
                        "%s=%s: this site accepts only config names from its config directory, "
                        "not paths (the admin set allow_user_configs=no)",
                        opt, value);
    size_t len = strlen(value);
    if (len >= sizeof ((moe_request *)0)->config)
        return moe_errf(e, "%s: the path is %zu characters long (at most %zu)", opt, len,
                        sizeof ((moe_request *)0)->config - 1);
    return 0;
}

/* One key=value item of --moe-set. */
static int check_set_item(const char *item, moe_err *e)
{
    const char *opt = "--moe-set";
    const char *eq = strchr(item, '=');
    if (!eq)
        return moe_errf(e, "%s: '%s' is not key=value (e.g. train.steps=100)", opt, item);
    size_t klen = (size_t)(eq - item);
    if (klen == 0)
        return moe_errf(e, "%s: '%s' has no key before '='", opt, item);
    for (size_t i = 0; i < klen; i++) {
        char c = item[i];
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.';
        if (!ok)
            return moe_errf(e,
                            "%s: key '%.*s' has '%c'; keys are config paths of letters, digits, "
                            "'_' and '.' (e.g. train.steps)",
                            opt, (int)klen, item, c);
    }
    if (item[0] == '.' || item[klen - 1] == '.' || memmem(item, klen, "..", 2))
        return moe_errf(e, "%s: key '%.*s' is not a config path like train.steps", opt, (int)klen,
                        item);
    for (size_t i = 0; i < sizeof reserved_keys / sizeof reserved_keys[0]; i++) {
        const char *key = reserved_keys[i].key;
        if (klen == strlen(key) && strncmp(item, key, klen) == 0)
            return moe_errf(e, "%s: '%.*s' is decided by the plugin; use %s", opt, (int)klen, item,
                            reserved_keys[i].use_instead);
    }
    const char *value = eq + 1;
    if (!*value)
        return moe_errf(e, "%s: '%.*s=' has no value", opt, (int)klen, item);
    size_t vlen = strlen(value);
    if (vlen > MOE_ARG_MAX_VALUE)
        return moe_errf(e, "%s: the value of '%.*s' is %zu characters long (at most %d)", opt,
                        (int)klen, item, vlen, MOE_ARG_MAX_VALUE);
    return 0;
}

/* Copy one item from *src to *dst (dst never runs ahead of src: unquoting
 * only shrinks), stopping at the ',' that ends it or at the end. A value
 * that starts with '"' is quoted: up to the closing '"', ',' '[' ']' are
 * plain, \" and \\ stand for '"' and '\', and the quotes go. An
 * unquoted value keeps its brackets, which must balance, and no '"'.
 * Returns 1 at the end of the list, 0 before the next item, -1 on error. */
static int take_item(char **src, char **dst, const char *set, moe_err *e)
{
    const char *opt = "--moe-set";
    char *p = *src, *q = *dst, *item = *dst;
    while (*p && *p != ',' && *p != '=')
        *q++ = *p++;
    if (*p == '=' && p[1] == '"') {
        *q++ = *p++;
        for (p++;; p++) {
            if (!*p)
                return moe_errf(e, "%s=%s: unterminated '\"'", opt, set);
            if (*p == '"')
                break;
            if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                p++;
            *q++ = *p;
        }
        p++;
        if (*p && *p != ',')
            return moe_errf(e, "%s=%s: text after the closing '\"' of '%.*s' (quote the whole "
                               "value)", opt, set, (int)(q - item), item);
    } else if (*p == '=') {
        int depth = 0;
        for (; *p && (*p != ',' || depth > 0); p++) {
            if (*p == '"')
                return moe_errf(e, "%s=%s: a '\"' inside a value; quote the whole value, as in "
                                   "key=\"a,b\" (\\\" for a '\"', \\\\ for a '\\')", opt, set);
            if (*p == '[')
                depth++;
            if (*p == ']' && --depth < 0)
                return moe_errf(e, "%s=%s: ']' without '['; quote a value that has one", opt,
                                set);
            *q++ = *p;
        }
        if (depth > 0)
            return moe_errf(e, "%s=%s: '[' without ']'; quote a value that has one", opt, set);
    }
    int end = (*p == '\0');
    *q = '\0';
    *src = end ? p : p + 1;
    *dst = q + 1;
    return end;
}

int args_split_set(const char *set, char *buf, size_t bufsz, char **items, int max_items,
                   moe_err *e)
{
    const char *opt = "--moe-set";
    if (!set || !*set)
        return moe_errf(e, "%s needs key=value items, e.g. %s=train.steps=100", opt, opt);
    size_t len = strlen(set);
    if (len >= bufsz)
        return moe_errf(e, "%s: %zu characters is too long (at most %zu)", opt, len, bufsz - 1);
    long bad = find_control(set);
    if (bad >= 0)
        return moe_errf(e, "%s: control character (byte 0x%02x) at position %ld", opt,
                        (unsigned char)set[bad], bad + 1);
    memcpy(buf, set, len + 1);

    int n = 0;
    for (char *src = buf, *dst = buf;;) {
        char *start = dst;
        int end = take_item(&src, &dst, set, e);
        if (end < 0)
            return -1;
        if (!*start)
            return moe_errf(e, "%s=%s: empty item (two commas in a row, or a comma at an end)", opt,
                            set);
        if (n == max_items)
            return moe_errf(e, "%s: more than %d items", opt, max_items);
        if (check_set_item(start, e) < 0)
            return -1;
        items[n++] = start;
        if (end)
            break;
    }
    return n;
}

int args_check_user_set(const char *set, moe_err *e)
{
    static char buf[MOE_ARG_MAX_SET + 1];
    char *items[MOE_ARG_MAX_ITEMS];
    return args_split_set(set, buf, sizeof buf, items, MOE_ARG_MAX_ITEMS, e) < 0 ? -1 : 0;
}

int args_apply(moe_request *req, moe_arg_id id, const char *value, int allow_config_paths,
               moe_err *e)
{
    const char *opt = args_option_name(id);
    if (id != MOE_ARG_CHECK && !value)
        return moe_errf(e, "%s needs a value", opt);
    switch (id) {
    case MOE_ARG_CONFIG:
        if (args_check_config(value, allow_config_paths, e) < 0)
            return -1;
        snprintf(req->config, sizeof req->config, "%s", value);
        break;
    case MOE_ARG_EP:
    case MOE_ARG_DP: {
        int n;
        if (args_parse_count(opt, value, &n, e) < 0)
            return -1;
        *(id == MOE_ARG_EP ? &req->ep : &req->dp) = n;
        break;
    }
    case MOE_ARG_PRECISION: {
        moe_precision p = MOE_PREC_AUTO;
        char names[96];
        if (verdict_parse_precision(value, &p) < 0)
            return moe_errf(e, "--moe-precision=%s: unknown precision (use %s)", value,
                            precision_name_list(names, sizeof names, ", ", " or ", 1));
        req->precision = p;
        break;
    }
    case MOE_ARG_SET: {
        static char buf[sizeof req->set];
        char *items[MOE_ARG_STEP_MAX_ITEMS];
        if (args_split_set(value, buf, sizeof buf, items, MOE_ARG_STEP_MAX_ITEMS, e) < 0)
            return -1;
        snprintf(req->set, sizeof req->set, "%s", value);
        break;
    }
    case MOE_ARG_CHECK:
        /* Slurm forwards a flag to inner sruns through the environment as
         * the text "(null)". */
        if (value && *value && strcmp(value, "(null)") != 0)
            return moe_errf(e, "%s takes no value (got '%s')", opt, value);
        req->check_only = 1;
        break;
    default:
        return moe_errf(e, "unknown moekit option number %d", (int)id);
    }
    req->active = 1;
    return 0;
}

void args_describe(const moe_request *req, char *buf, size_t n)
{
    int len = snprintf(buf, n, "--moe-config=%s", req->config[0] ? req->config : "(none)");
    if (len >= 0 && (size_t)len < n && req->ep)
        len += snprintf(buf + len, n - (size_t)len, " --moe-ep=%d", req->ep);
    if (len >= 0 && (size_t)len < n && req->dp)
        len += snprintf(buf + len, n - (size_t)len, " --moe-dp=%d", req->dp);
    if (len >= 0 && (size_t)len < n && req->precision != MOE_PREC_AUTO)
        len += snprintf(buf + len, n - (size_t)len, " --moe-precision=%s",
                        precision_name(req->precision));
    if (len >= 0 && (size_t)len < n && req->set[0])
        len += snprintf(buf + len, n - (size_t)len, " --moe-set=%s", req->set);
    if (len >= 0 && (size_t)len < n && req->check_only)
        snprintf(buf + len, n - (size_t)len, " --moe-check");
}

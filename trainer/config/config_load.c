/* moekit: loading a run configuration: find the file, load its base chain
 * parent first, apply command-line overrides, validate. */
#include <dirent.h>
#include <errno.h>
#include "config_libconfig.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "config_schema.h"
#include "config_source.h"
#include "config_suggest.h"

#include "../../common/install_dirs.h"

#define CONFIG_MAX_CHAIN 16              /* files in one base chain */
#define CONFIG_MAX_FILE_BYTES (1 << 20) /* a config is a page of text, not data */

/* ---- finding a config by name ---------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_readable_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "config 'x' not found in DIR; available: a, b (did you mean 'a'?)" */
static int config_not_found(const char *name, const char *dir, moe_err *e)
{
    DIR *d = opendir(dir);
    if (!d)
        return moe_err_errno(e, errno,
                             "config '%s' not found: cannot open the config directory %s "
                             "(set MOE_CONFIG_DIR or give a path)",
                             name, dir);
    enum { MAX_LISTED = 64 };
    char stems[MAX_LISTED][256];
    const char *names[MAX_LISTED];
    size_t n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) && n < MAX_LISTED) {
        size_t len = strlen(ent->d_name);
        if (ent->d_name[0] == '.' || !ends_with(ent->d_name, ".cfg") || len - 4 >= 256)
            continue;
        snprintf(stems[n], sizeof stems[n], "%.*s", (int)(len - 4), ent->d_name);
        names[n] = stems[n];
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof names[0], compare_names);
    char list[MOE_ERR_LEN / 2];
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; i < n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                                 names[i]);
    const char *hint = closest_word(name, names, n);
    char hint_text[300] = "";
    if (hint)
        snprintf(hint_text, sizeof hint_text, " (did you mean '%s'?)", hint);
    return moe_errf(e, "config '%s' not found in %s%s; available: %s", name, dir, hint_text,
                    n ? list : "none");
}

const char *config_default_dir(char *buf, size_t n)
{
    const char *env = getenv("MOE_CONFIG_DIR");
    if (env && *env)
        snprintf(buf, n, "%s", env);
    else if (moe_install_path(MOE_INSTALL_CONFIGS, buf, n))
        snprintf(buf, n, "configs");
    return buf;
}

int config_resolve_path(const char *name_or_path, const char *configs_dir, char *out,
                        size_t out_size, moe_err *e)
{
    if (!name_or_path || !*name_or_path)
        return moe_errf(e, "no config given: name one (e.g. L0_sanity) or give a path");
    int has_slash = strchr(name_or_path, '/') != NULL;
    if (has_slash || (ends_with(name_or_path, ".cfg") && is_readable_file(name_or_path))) {
        if (!is_readable_file(name_or_path)) {
            struct stat st;
            if (stat(name_or_path, &st) == 0)
                return moe_errf(e, "config file %s is not a regular file", name_or_path);
            return moe_err_errno(e, errno, "config file %s", name_or_path);
        }
        if ((size_t)snprintf(out, out_size, "%s", name_or_path) >= out_size)
            return moe_errf(e, "config path %s is too long", name_or_path);
        return 0;
    }
    char default_dir[MOE_PATH_MAX];
    const char *dir = configs_dir ? configs_dir : config_default_dir(default_dir, sizeof default_dir);
    /* "L0_sanity.cfg" not in the working directory: the configs dir's one. */
    int stem_len = (int)strlen(name_or_path) - (ends_with(name_or_path, ".cfg") ? 4 : 0);
    if ((size_t)snprintf(out, out_size, "%s/%.*s.cfg", dir, stem_len, name_or_path) >=
        out_size)
        return moe_errf(e, "config path %s/%s.cfg is too long", dir, name_or_path);
    if (is_readable_file(out))
        return 0;
    char name[256];
    snprintf(name, sizeof name, "%.*s", stem_len, name_or_path);
    return config_not_found(name, dir, e);
}

/* ---- one file of the chain ------------------------------------------- */

typedef struct {
    moe_config cfg;
    char **origin; /* per schema row: where it was last set, "file:line" */
    char real[CONFIG_MAX_CHAIN][PATH_MAX]; /* canonical paths, child first, for cycles */
    char shown[CONFIG_MAX_CHAIN][MOE_PATH_MAX]; /* the same, as the user would write them */
    int depth;
    const char *configs_dir; /* where a `base` name not beside its child is looked up */
    int *set_by;             /* per schema row: which source set it last (0 none, files
                                1, 2, ... in the order applied, INT_MAX the command line) */
    int files_applied;
} loader;

static int set_origin(loader *L, const config_key *k, const char *where, int source)
{
    size_t i = (size_t)(k - config_keys);
    L->set_by[i] = source;
    free(L->origin[i]);
    L->origin[i] = strdup(where);
    return L->origin[i] ? 0 : -1;
}

static int read_text(const char *path, char **out, moe_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return moe_err_errno(e, errno, "cannot open config %s", path);
    char *buf = malloc(CONFIG_MAX_FILE_BYTES + 1);
    if (!buf) {
        fclose(f);
        return moe_errf(e, "out of memory reading config %s", path);
    }
    size_t n = fread(buf, 1, CONFIG_MAX_FILE_BYTES + 1, f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return moe_errf(e, "cannot read config %s", path);
    }
    if (n > CONFIG_MAX_FILE_BYTES) {
        free(buf);
        return moe_errf(e, "config %s is larger than %d bytes; is it really a config?", path,
                        CONFIG_MAX_FILE_BYTES);
    }
    if (memchr(buf, '\0', n)) {
        free(buf);
        return moe_errf(e, "config %s contains a NUL byte; is it really a config?", path);
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

static const char *type_word(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a bool";
    case CONFIG_TYPE_FLOAT: return "a float";
    default: return "an integer";
    }
}

/* Every setting of one file, each a known key of a known group. */
static int apply_file(loader *L, const char *path, const config_setting_t *root, moe_err *e)
{
    int source = ++L->files_applied;
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *g = config_setting_get_elem(root, (unsigned)i);
        const char *gname = config_setting_name(g);
        int line = (int)config_setting_source_line(g);
        if (strcmp(gname, "base") == 0)
            continue;
        if (!config_group_known(gname)) {
            config_unknown_key(gname, config_setting_is_group(g), e);
            return moe_err_prefix(e, "%s:%d", path, line);
        }
        if (!config_setting_is_group(g))
            return moe_errf(e, "%s:%d: %s must be a group like %s = { ... }; found %s", path,
                            line, gname, gname, type_word(g));
        for (int j = 0; j < config_setting_length(g); j++) {
            const config_setting_t *s = config_setting_get_elem(g, (unsigned)j);
            char key[512];
            snprintf(key, sizeof key, "%s.%s", gname, config_setting_name(s));
            line = (int)config_setting_source_line(s);
            const config_key *k = config_key_find(key);
            if (!k) {
                config_unknown_key(key, config_setting_is_group(s), e);
                return moe_err_prefix(e, "%s:%d", path, line);
            }
            if (config_key_set_setting(k, &L->cfg, s, e))
                return moe_err_prefix(e, "%s:%d", path, line);
            char where[MOE_PATH_MAX + 16];
            snprintf(where, sizeof where, "%s:%d", path, line);
            if (set_origin(L, k, where, source))
                return moe_errf(e, "out of memory loading %s", path);
        }
    }
    return 0;
}

static void chain_text(const loader *L, const char *last, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < L->depth && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s -> ", L->shown[i]);
    if (used < size)
        snprintf(buf + used, size - used, "%s", last);
}

static int load_chain(loader *L, const char *path, moe_err *e);

/* The parent named by `base`: a name in the same directory as the child, or
 * a path (relative paths are relative to the child's directory too, so a
 * config tree can be moved as a whole). */
static int load_base(loader *L, const char *path, const config_setting_t *base, moe_err *e)
{
    int line = (int)config_setting_source_line(base);
    if (config_setting_type(base) != CONFIG_TYPE_STRING)
        return moe_errf(e, "%s:%d: base: expected a string (a config name or path), found %s",
                        path, line, type_word(base));
    const char *value = config_setting_get_string(base);
    if (!*value)
        return moe_errf(e, "%s:%d: base is empty: name a parent config or remove the line",
                        path, line);
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) : 1;
    const char *dir = slash ? path : ".";
    char parent[MOE_PATH_MAX];
    int n;
    if (value[0] == '/')
        n = snprintf(parent, sizeof parent, "%s", value);
    else if (strchr(value, '/') || ends_with(value, ".cfg"))
        n = snprintf(parent, sizeof parent, "%.*s/%s", dir_len, dir, value);
    else
        n = snprintf(parent, sizeof parent, "%.*s/%s.cfg", dir_len, dir, value);
    if ((size_t)n >= sizeof parent)
        return moe_errf(e, "%s:%d: base \"%s\": the path is too long", path, line, value);
    struct stat st;
    /* a config copied out of the configs directory still finds its parent
     * there when it names it ("defaults") and no such file is beside it */
    int is_name = value[0] != '/' && !strchr(value, '/');
    if (stat(parent, &st) != 0 && is_name) {
        char beside[MOE_PATH_MAX];
        snprintf(beside, sizeof beside, "%s", parent);
        int stem = (int)strlen(value) - (ends_with(value, ".cfg") ? 4 : 0);
        n = snprintf(parent, sizeof parent, "%s/%.*s.cfg", L->configs_dir, stem, value);
        if ((size_t)n >= sizeof parent || stat(parent, &st) != 0)
            return moe_err_errno(e, errno, "%s:%d: base \"%s\" not found as %s nor in %s",
                                 path, line, value, beside, L->configs_dir);
    } else if (stat(parent, &st) != 0)
        return moe_err_errno(e, errno, "%s:%d: base \"%s\" not found as %s", path, line, value,
                             parent);
    if (!S_ISREG(st.st_mode))
        return moe_errf(e, "%s:%d: base \"%s\": %s is not a regular file", path, line, value,
                        parent);
    return load_chain(L, parent, e);
}

static int load_chain(loader *L, const char *path, moe_err *e)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return moe_err_errno(e, errno, "cannot open config %s", path);
    for (int i = 0; i < L->depth; i++)
        if (strcmp(L->real[i], real) == 0) {
            char chain[MOE_ERR_LEN - 64];
            chain_text(L, path, chain, sizeof chain);
            return moe_errf(e, "base cycle: %s", chain);
        }
    if (L->depth == CONFIG_MAX_CHAIN) {
        char chain[MOE_ERR_LEN - 64];
        chain_text(L, path, chain, sizeof chain);
        return moe_errf(e, "base chain longer than %d files: %s", CONFIG_MAX_CHAIN, chain);
    }
    snprintf(L->real[L->depth], sizeof L->real[0], "%s", real);
    snprintf(L->shown[L->depth], sizeof L->shown[0], "%s", path);
    L->depth++;

    char *text = NULL;
    config_t c;
    config_init(&c);
    int rc = -1;
    if (read_text(path, &text, e) || config_source_check(path, text, e))
        goto out;
    if (!config_read_string(&c, text)) {
        moe_errf(e, "%s:%d: %s", path, config_error_line(&c), config_error_text(&c));
        goto out;
    }
    const config_setting_t *root = config_root_setting(&c);
    const config_setting_t *base = config_setting_get_member(root, "base");
    if (base && load_base(L, path, base, e))
        goto out;
    rc = apply_file(L, path, root, e);
out:
    config_destroy(&c);
    free(text);
    L->depth--;
    return rc;
}

/* ---- overrides and the whole load ------------------------------------ */

/* The override as quoted in messages: long values (paths) are cut so the
 * reason still fits in the message. */
static void override_label(const char *text, char *buf, size_t size)
{
    enum { SHOWN = 96 };
    if (strlen(text) <= SHOWN)
        snprintf(buf, size, "override '%s'", text);
    else
        snprintf(buf, size, "override '%.*s...'", SHOWN - 16, text);
}

static int apply_override(moe_config *cfg, const char *text, const config_key **which,
                          moe_err *e)
{
    char label[128];
    override_label(text, label, sizeof label);
    const char *eq = strchr(text, '=');
    if (!eq)
        return moe_errf(e, "%s: expected key=value, e.g. train.steps=100", label);
    if (eq == text)
        return moe_errf(e, "%s: the key before '=' is empty", label);
    char key[256];
    if ((size_t)(eq - text) >= sizeof key)
        return moe_errf(e, "%s: the key is too long", label);
    memcpy(key, text, (size_t)(eq - text));
    key[eq - text] = '\0';
    const config_key *k = config_key_find(key);
    if (!k) {
        for (size_t i = 0; i < config_key_count; i++) {
            const char *p = config_keys[i].path;
            if (strncmp(p, key, strlen(key)) == 0 && p[strlen(key)] == '.')
                return moe_errf(e, "%s: %s is a group; set one of its keys, e.g. %s=%s",
                                label, key, p, config_keys[i].def);
        }
        config_unknown_key(key, 0, e);
        return moe_err_prefix(e, "%s", label);
    }
    if (config_key_set_text(k, cfg, eq + 1, e))
        return moe_err_prefix(e, "%s", label);
    if (which)
        *which = k;
    return 0;
}

int config_apply_override(moe_config *cfg, const char *override, moe_err *e)
{
    return apply_override(cfg, override, NULL, e);
}

/* The environment variables that set runtime.* and parallel.* keys before
 * those keys existed, still taken: read here and nowhere else, applied between the
 * files and the command line (which wins), and told on stderr, so the key
 * shows in --print-config, the saved config and any error's origin. */
static const struct {
    const char *var, *key;
} env_keys[] = {
    {"MOE_FP8_GEMMS", "runtime.fp8_gemms"},   {"MOE_FP8_CHUNK_ROWS", "runtime.fp8_chunk_rows"},
    {"MOE_FP8_FUSED_SAVE", "runtime.fp8_fused_save"}, {"MOE_CUDA_GEMM", "runtime.gemm"},
    {"MOE_CUDA_ATTENTION", "runtime.attention"}, {"MOE_INIT_ON", "runtime.init_on"},
    {"MOE_CUDNN_LIB", "runtime.cudnn_lib"},   {"MOE_MPI_MAX_COUNT", "parallel.mpi_max_count"},
};

/* L NULL: no origins to record (config_apply_env) */
static int apply_env_keys(moe_config *cfg, loader *L, moe_err *e)
{
    for (size_t i = 0; i < sizeof env_keys / sizeof env_keys[0]; i++) {
        const char *v = getenv(env_keys[i].var);
        if (!v || !*v)
            continue;
        const config_key *k = config_key_find(env_keys[i].key);
        /* the bool was spelled 0 / 1 */
        const char *text = k->type == KEY_BOOL && !strcmp(v, "0")   ? "false"
                           : k->type == KEY_BOOL && !strcmp(v, "1") ? "true"
                                                                    : v;
        if (config_key_set_text(k, cfg, text, e))
            return moe_err_prefix(e, "environment %s (read as %s)", env_keys[i].var, k->path);
        char where[160];
        snprintf(where, sizeof where, "environment %s=%.64s", env_keys[i].var, v);
        if (L && set_origin(L, k, where, INT_MAX - 1)) /* after the files, before the command line */
            return moe_errf(e, "out of memory applying %s", where);
        fprintf(stderr, "moekit: %s=%s read as %s=%s (set the config key instead)\n",
                env_keys[i].var, v, k->path, text);
    }
    return 0;
}

int config_apply_env(moe_config *cfg, moe_err *e)
{
    return apply_env_keys(cfg, NULL, e);
}

/* The model.* keys set no earlier than checkpoint.init_from (same file, a
 * child, the command line): the run's own statements about the architecture. */
static void mark_model_explicit(loader *L)
{
    L->cfg.model_explicit = 0;
    const config_key *init = config_key_find("checkpoint.init_from");
    int init_by = init ? L->set_by[init - config_keys] : 0;
    if (!L->cfg.checkpoint.init_from[0] || init_by == 0)
        return;
    int bit = 0;
    for (size_t i = 0; i < config_key_count && bit < 32; i++) {
        if (strncmp(config_keys[i].path, "model.", 6) != 0)
            continue;
        if (L->set_by[i] >= init_by)
            L->cfg.model_explicit |= 1u << bit;
        bit++;
    }
}

int config_model_key_explicit(const moe_config *cfg, const char *path)
{
    int bit = 0;
    for (size_t i = 0; i < config_key_count && bit < 32; i++) {
        if (strncmp(config_keys[i].path, "model.", 6) != 0)
            continue;
        if (strcmp(config_keys[i].path, path) == 0)
            return (cfg->model_explicit >> bit) & 1;
        bit++;
    }
    return 0;
}

static void set_name(moe_config *cfg, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int len = (int)strlen(base) - (ends_with(base, ".cfg") ? 4 : 0);
    snprintf(cfg->name, sizeof cfg->name, "%.*s", len, base);
    snprintf(cfg->path, sizeof cfg->path, "%s", path);
}

int config_load(moe_config *cfg, const char *name_or_path, const char *configs_dir,
                int n_overrides, char *const *overrides, moe_err *e)
{
    char path[MOE_PATH_MAX];
    if (config_resolve_path(name_or_path, configs_dir, path, sizeof path, e))
        return -1;
    /* Built on the side: a failed load leaves the caller's struct untouched. */
    loader *L = calloc(1, sizeof *L);
    char **origin = calloc(config_key_count, sizeof *origin);
    int *set_by = calloc(config_key_count, sizeof *set_by);
    if (!L || !origin || !set_by) {
        free(L);
        free(origin);
        free(set_by);
        return moe_errf(e, "out of memory loading config %s", path);
    }
    L->origin = origin;
    L->set_by = set_by;
    char default_dir[MOE_PATH_MAX];
    L->configs_dir = configs_dir ? configs_dir : config_default_dir(default_dir, sizeof default_dir);
    config_defaults(&L->cfg);
    int rc = load_chain(L, path, e);
    if (rc == 0)
        rc = apply_env_keys(&L->cfg, L, e);
    for (int i = 0; rc == 0 && i < n_overrides; i++) {
        const config_key *k = NULL;
        rc = apply_override(&L->cfg, overrides[i], &k, e);
        char where[128];
        override_label(overrides[i], where, sizeof where);
        if (rc == 0 && set_origin(L, k, where, INT_MAX))
            rc = moe_errf(e, "out of memory applying %s", where);
    }
    if (rc == 0) {
        mark_model_explicit(L);
        set_name(&L->cfg, path);
        rc = config_validate_traced(&L->cfg, (const char *const *)L->origin, e);
        if (rc)
            moe_err_prefix(e, "config %s", L->cfg.name);
    }
    if (rc == 0)
        *cfg = L->cfg;
    for (size_t i = 0; i < config_key_count; i++)
        free(origin[i]);
    free(origin);
    free(set_by);
    free(L);
    return rc;
}

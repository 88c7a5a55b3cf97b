/* moekit SPANK plugin: config name resolution (see config_resolve.h). */
#include "config_resolve.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../trainer/config/config.h"
#include "args.h"
#include "../common/install_dirs.h"

/* policy_defaults fills configs= (install_dirs.h); an empty one, in a
 * policy built by hand, means the same installed directory. */
const char *resolve_configs_dir(const moe_policy *pol)
{
    static char installed[4096];
    if (pol->configs[0])
        return pol->configs;
    moe_install_path(MOE_INSTALL_CONFIGS, installed, sizeof installed);
    return installed;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "L0_sanity, L1_8x7B_ep, ..." : the config names in dir, for messages. */
static void list_configs(const char *dir, char *out, size_t n)
{
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(out, n, "(cannot list %s: %s)", dir, strerror(errno));
        return;
    }
    char *names[64];
    int count = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) && count < 64) {
        size_t len = strlen(ent->d_name);
        if (len > 4 && ent->d_name[0] != '.' && strcmp(ent->d_name + len - 4, ".cfg") == 0) {
            names[count] = strndup(ent->d_name, len - 4);
            if (names[count])
                count++;
        }
    }
    closedir(d);
    qsort(names, (size_t)count, sizeof names[0], by_name);
    size_t used = 0;
    for (int i = 0; i < count; i++) {
        int w = snprintf(out + used, n - used, "%s%s", i ? ", " : "", names[i]);
        if (w > 0 && (size_t)w < n - used)
            used += (size_t)w;
        free(names[i]);
    }
    if (count == 0)
        snprintf(out, n, "none");
}

int resolve_config_path(const moe_policy *pol, const char *requested, char *out, size_t n,
                        moe_err *e)
{
    if (args_check_config(requested, pol->allow_user_configs, e) < 0)
        return -1;
    const char *dir = resolve_configs_dir(pol);
    int w;
    if (args_config_is_path(requested))
        w = snprintf(out, n, "%s", requested);
    else
        w = snprintf(out, n, "%s/%s.cfg", dir, requested);
    if (w < 0 || (size_t)w >= n)
        return moe_errf(e, "--moe-config=%s: the config path is too long", requested);

    struct stat st;
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, R_OK) == 0)
        return 0;
    int err = errno;
    if (args_config_is_path(requested)) {
        if (stat(out, &st) == 0 && !S_ISREG(st.st_mode))
            return moe_errf(e, "--moe-config=%s: not a regular file", requested);
        return moe_err_errno(e, err, "--moe-config=%s: cannot read the config file", requested);
    }
    char names[2048];
    list_configs(dir, names, sizeof names);
    return moe_errf(e, "--moe-config=%s: no such config in %s (available: %s)", requested, dir,
                    names);
}

int resolve_config_facts(const moe_policy *pol, const char *path, char *const *items,
                         int n_items, moe_config_facts *facts, moe_err *e)
{
    moe_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return moe_errf(e, "out of memory loading %s", path);
    int rc = config_load(cfg, path, resolve_configs_dir(pol), n_items, items, e);
    if (rc == 0) {
        facts->num_experts = cfg->model.num_experts;
        facts->ep = cfg->parallel.ep;
        facts->dp = cfg->parallel.dp;
        facts->precision_strict = cfg->precision.strict;
    }
    free(cfg);
    return rc;
}

void resolve_apply_layout(moe_request *req, const moe_config_facts *facts)
{
    if (req->ep == 0 && req->dp == 0)
        req->dp = facts->dp > 0 ? facts->dp : 0;
    if (req->ep == 0)
        req->ep = facts->ep > 0 ? facts->ep : 0;
}

int resolve_request(const moe_policy *pol, const moe_request *req, moe_resolved *out, moe_err *e)
{
    out->want = *req;
    out->n_items = 0;
    if (req->set[0]) {
        out->n_items = args_split_set(req->set, out->set_buf, sizeof out->set_buf, out->items,
                                      MOE_ARG_STEP_MAX_ITEMS, e);
        if (out->n_items < 0)
            return -1;
    }
    if (resolve_config_path(pol, req->config, out->config_path, sizeof out->config_path, e) < 0 ||
        resolve_config_facts(pol, out->config_path, out->items, out->n_items, &out->facts, e) < 0)
        return -1;
    resolve_apply_layout(&out->want, &out->facts);
    out->want.precision_strict = out->facts.precision_strict;
    return 0;
}

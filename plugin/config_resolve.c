/* moekit SPANK plugin: config name resolution (see config_resolve.h). */
#include "config_resolve.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/install_dirs.h"
#include "../launch/policy.h"
#include "args.h"
#include "planner.h"

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

int resolve_planner_timeout(const moe_policy *pol)
{
    return pol->planner_timeout_s > 0 ? pol->planner_timeout_s : MOE_PLANNER_TIMEOUT_DEFAULT;
}

/* argv for `trainer query MODE --config PATH --configs-dir DIR [extra] [items]`;
 * extra is NULL-terminated. Returns the count, or -1 when it does not fit. */
static int query_argv(const moe_policy *pol, const char *mode, const char *path,
                      char *const *extra, char *const *items, int n_items, char **argv, int max)
{
    int n = 0;
    char *head[] = {(char *)pol->trainer, "query", (char *)mode, "--config", (char *)path,
                    "--configs-dir", (char *)resolve_configs_dir(pol)};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        argv[n++] = head[i];
    for (int i = 0; extra && extra[i]; i++) {
        if (n >= max - 1)
            return -1;
        argv[n++] = extra[i];
    }
    /* "--" ends the options: an item is never read as one */
    if (n >= max - 1)
        return -1;
    argv[n++] = "--";
    for (int i = 0; i < n_items; i++) {
        if (n >= max - 1)
            return -1;
        argv[n++] = items[i];
    }
    argv[n] = NULL;
    return n;
}

#define QUERY_ARGV_MAX (MOE_ARG_STEP_MAX_ITEMS + 32)

int resolve_config_facts(const moe_policy *pol, const char *path, char *const *items,
                         int n_items, moe_config_facts *facts, moe_err *e)
{
    if (!pol->trainer[0])
        return moe_errf(e, "the site's plugstack.conf names no trainer= for spank_moe.so, "
                           "which the plugin asks for the config's facts");
    char *argv[QUERY_ARGV_MAX];
    if (query_argv(pol, "--config-facts", path, NULL, items, n_items, argv, QUERY_ARGV_MAX) < 0)
        return moe_errf(e, "too many --moe-set items");
    planner_answer *a = malloc(sizeof *a);
    if (!a)
        return moe_errf(e, "out of memory loading %s", path);
    int rc = -1;
    if (planner_ask(pol->trainer, argv, resolve_planner_timeout(pol), a, e) < 0) {
        moe_err_prefix(e, "reading %s (the plugin asks the trainer)", path);
        goto out;
    }
    const planner_field *ok = planner_get(a, "ok", PLANNER_BOOL), *err;
    if (!ok->num) {
        err = planner_get(a, "error", PLANNER_STRING);
        moe_errf(e, "%s", err ? err->str : "the trainer refused the config without a reason");
        goto out;
    }
    const planner_field *x = planner_get(a, "num_experts", PLANNER_INT),
                        *ep = planner_get(a, "ep", PLANNER_INT),
                        *dp = planner_get(a, "dp", PLANNER_INT),
                        *prec = planner_get(a, "precision", PLANNER_STRING),
                        *strict = planner_get(a, "strict", PLANNER_BOOL);
    if (!x || !ep || !dp || !prec || !strict || x->num < 0 || x->num > 1 << 20 || ep->num < 0 ||
        ep->num > 1 << 20 || dp->num < 0 || dp->num > 1 << 20 ||
        strlen(prec->str) >= sizeof facts->precision) {
        moe_errf(e, "reading %s: %s answered without num_experts, ep, dp, precision and strict "
                    "in range",
                 path, pol->trainer);
        goto out;
    }
    facts->num_experts = (int)x->num;
    facts->ep = (int)ep->num;
    facts->dp = (int)dp->num;
    snprintf(facts->precision, sizeof facts->precision, "%s", prec->str);
    facts->precision_strict = strict->num != 0;
    rc = 0;
out:
    free(a);
    return rc;
}

int resolve_plan_fit(const moe_policy *pol, const char *path, char *const *items, int n_items,
                     const char *precision, int ep, int dp, unsigned long long room_bytes,
                     const char *room_what, char *msg, size_t n, moe_err *e)
{
    if (n)
        msg[0] = '\0';
    if (!pol->trainer[0])
        return moe_errf(e, "the site's plugstack.conf names no trainer= for spank_moe.so, "
                           "which the plugin asks for the memory plan"),
               RESOLVE_PLAN_FAILED;
    char s_ep[16], s_dp[16], s_room[32];
    snprintf(s_ep, sizeof s_ep, "%d", ep);
    snprintf(s_dp, sizeof s_dp, "%d", dp);
    snprintf(s_room, sizeof s_room, "%llu", room_bytes);
    char *extra[] = {"--precision", (char *)precision, "--ep", s_ep, "--dp", s_dp,
                     "--room-bytes", s_room, "--room-what", (char *)room_what,
                     pol->refuse_memory_short ? "--refuse" : NULL, NULL};
    char *argv[QUERY_ARGV_MAX];
    if (query_argv(pol, "--plan-fit", path, extra, items, n_items, argv, QUERY_ARGV_MAX) < 0)
        return moe_errf(e, "too many --moe-set items"), RESOLVE_PLAN_FAILED;
    planner_answer *a = malloc(sizeof *a);
    if (!a)
        return moe_errf(e, "out of memory"), RESOLVE_PLAN_FAILED;
    int rc = RESOLVE_PLAN_FAILED;
    if (planner_ask(pol->trainer, argv, resolve_planner_timeout(pol), a, e) < 0)
        goto out;
    const planner_field *ok = planner_get(a, "ok", PLANNER_BOOL);
    if (!ok->num) {
        const planner_field *err = planner_get(a, "error", PLANNER_STRING);
        snprintf(msg, n, "%s", err ? err->str : "no reason given");
        rc = RESOLVE_PLAN_NONE;
        goto out;
    }
    const planner_field *fit = planner_get(a, "fit", PLANNER_STRING),
                        *m = planner_get(a, "message", PLANNER_STRING);
    if (!fit || !m ||
        (strcmp(fit->str, "fits") && strcmp(fit->str, "warn") && strcmp(fit->str, "refuse"))) {
        moe_errf(e, "%s answered the memory plan without fit (fits, warn or refuse) and message",
                 pol->trainer);
        goto out;
    }
    snprintf(msg, n, "%s", m->str);
    rc = !strcmp(fit->str, "fits")   ? RESOLVE_PLAN_FITS
         : !strcmp(fit->str, "warn") ? RESOLVE_PLAN_WARN
                                     : RESOLVE_PLAN_REFUSE;
out:
    free(a);
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

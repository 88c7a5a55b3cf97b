/* Unit tests for plugin/config_resolve.c: --moe-config names and paths
 * against the admin's policy, on the shipped configs and a scratch
 * directory; the facts come from the build's moe-train, asked as the
 * plugin asks the site's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../check.h"
#include "../../plugin/config_resolve.h"

static char scratch[256];

static moe_policy policy(const char *configs, int allow_user_configs)
{
    moe_policy p;
    memset(&p, 0, sizeof p);
    /* the plugin asks the trainer for a config's facts (planner.h) */
    snprintf(p.trainer, sizeof p.trainer, "%s", MOE_TEST_TRAINER);
    snprintf(p.configs, sizeof p.configs, "%s", configs);
    p.allow_user_configs = allow_user_configs;
    return p;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_shipped_names(void)
{
    moe_policy p = policy(MOE_CONFIG_DIR_DEFAULT, 0);
    char path[4096];
    moe_err e;
    CHECK_MSG(resolve_config_path(&p, "L0_sanity", path, sizeof path, &e) == 0, "%s", e.msg);
    char want[4200];
    snprintf(want, sizeof want, "%s/L0_sanity.cfg", MOE_CONFIG_DIR_DEFAULT);
    CHECK(strcmp(path, want) == 0);

    moe_config_facts f;
    CHECK_MSG(resolve_config_facts(&p, path, NULL, 0, &f, &e) == 0, "%s", e.msg);
    CHECK(f.num_experts == 4 && f.ep == 2 && f.dp == 1 && !f.precision_strict);
    char *items[] = {"model.num_experts=8", "model.top_k=2", "precision.strict=true"};
    CHECK_MSG(resolve_config_facts(&p, path, items, 3, &f, &e) == 0, "%s", e.msg);
    CHECK(f.num_experts == 8 && f.precision_strict); /* the verdict's precision.strict */

    /* A bad override is reported here, before the trainer starts. */
    char *bad[] = {"train.no_such_key=1"};
    CHECK(resolve_config_facts(&p, path, bad, 1, &f, &e) == -1);
    CHECK_MSG(strstr(e.msg, "no_such_key") != NULL, "%s", e.msg);

    /* The empty policy field means the build's default directory. */
    moe_policy d = policy("", 0);
    CHECK(strcmp(resolve_configs_dir(&d), MOE_CONFIG_DIR_DEFAULT) == 0);
}

static void test_unknown_name_lists_available(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/site", scratch);
    CHECK(mkdir(dir, 0755) == 0);
    char file[600];
    snprintf(file, sizeof file, "%s/beta.cfg", dir);
    write_file(file, "model = { num_experts = 2; top_k = 1; };\n");
    snprintf(file, sizeof file, "%s/alpha.cfg", dir);
    write_file(file, "model = { num_experts = 6; top_k = 2; };\n");
    snprintf(file, sizeof file, "%s/notes.txt", dir);
    write_file(file, "not a config\n");

    moe_policy p = policy(dir, 0);
    char path[4096];
    moe_err e;
    CHECK(resolve_config_path(&p, "gamma", path, sizeof path, &e) == -1);
    CHECK_MSG(strstr(e.msg, "--moe-config=gamma") && strstr(e.msg, dir) &&
                  strstr(e.msg, "available: alpha, beta)"),
              "%s", e.msg);

    CHECK(resolve_config_path(&p, "alpha", path, sizeof path, &e) == 0);
    moe_config_facts f;
    CHECK_MSG(resolve_config_facts(&p, path, NULL, 0, &f, &e) == 0, "%s", e.msg);
    CHECK(f.num_experts == 6 && f.ep == 1 && f.dp == 0); /* the built-in defaults */

    moe_policy none = policy("/nonexistent/moekit-configs", 0);
    CHECK(resolve_config_path(&none, "alpha", path, sizeof path, &e) == -1);
    CHECK_MSG(strstr(e.msg, "cannot list"), "%s", e.msg);
}

static void test_paths_follow_policy(void)
{
    char mine[512];
    snprintf(mine, sizeof mine, "%s/mine.cfg", scratch);
    write_file(mine, "model = { num_experts = 3; top_k = 1; };\n");

    moe_policy strict = policy(MOE_CONFIG_DIR_DEFAULT, 0);
    char path[4096];
    moe_err e;
    CHECK(resolve_config_path(&strict, mine, path, sizeof path, &e) == -1);
    CHECK_MSG(strstr(e.msg, "allow_user_configs=no"), "%s", e.msg);
    CHECK(resolve_config_path(&strict, "../configs/L0_sanity", path, sizeof path, &e) == -1);
    /* A file named like a config in the working directory is not a name. */
    CHECK(resolve_config_path(&strict, "mine.cfg", path, sizeof path, &e) == -1);

    moe_policy open = policy(MOE_CONFIG_DIR_DEFAULT, 1);
    CHECK_MSG(resolve_config_path(&open, mine, path, sizeof path, &e) == 0, "%s", e.msg);
    CHECK(strcmp(path, mine) == 0);
    moe_config_facts f;
    CHECK(resolve_config_facts(&open, path, NULL, 0, &f, &e) == 0 && f.num_experts == 3);

    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing.cfg", scratch);
    CHECK(resolve_config_path(&open, missing, path, sizeof path, &e) == -1);
    CHECK_MSG(strstr(e.msg, "cannot read") && strstr(e.msg, "No such file"), "%s", e.msg);
    CHECK(resolve_config_path(&open, scratch, path, sizeof path, &e) == -1);
    CHECK_MSG(strstr(e.msg, "not a regular file"), "%s", e.msg);
    /* Names keep the name rules even when paths are allowed. */
    CHECK(resolve_config_path(&open, "x;y", path, sizeof path, &e) == -1);
}

static void test_layout_defaults(void)
{
    moe_config_facts f = {.num_experts = 8, .ep = 2, .dp = 1};
    moe_request r;
    memset(&r, 0, sizeof r);
    resolve_apply_layout(&r, &f);
    CHECK(r.ep == 2 && r.dp == 1); /* neither given: the config's layout */

    memset(&r, 0, sizeof r);
    r.ep = 4;
    resolve_apply_layout(&r, &f);
    CHECK(r.ep == 4 && r.dp == 0); /* EP given: DP = GPUs / EP, not the config's */

    memset(&r, 0, sizeof r);
    r.dp = 3;
    resolve_apply_layout(&r, &f);
    CHECK(r.ep == 2 && r.dp == 3);

    moe_config_facts none = {.num_experts = 8, .ep = 1, .dp = 0};
    memset(&r, 0, sizeof r);
    resolve_apply_layout(&r, &none);
    CHECK(r.ep == 1 && r.dp == 0);
}

/* The opening the submit and remote contexts share: --moe-set split, the
 * config found and loaded with it, its layout applied. */
static void test_resolve_request(void)
{
    moe_policy p = policy(MOE_CONFIG_DIR_DEFAULT, 0);
    moe_resolved *r = malloc(sizeof *r);
    moe_request req;
    moe_err e;
    CHECK(r != NULL);
    memset(&req, 0, sizeof req);
    snprintf(req.config, sizeof req.config, "L0_sanity");
    snprintf(req.set, sizeof req.set, "model.num_experts=8,optimizer.betas=[0.9,0.95]");
    CHECK_MSG(resolve_request(&p, &req, r, &e) == 0, "%s", e.msg);
    CHECK(r->n_items == 2 && strcmp(r->items[1], "optimizer.betas=[0.9,0.95]") == 0);
    CHECK(r->facts.num_experts == 8 && r->want.ep == 2 && r->want.dp == 1);
    CHECK(strstr(r->config_path, "/L0_sanity.cfg") != NULL);
    CHECK(strcmp(r->want.set, req.set) == 0);

    req.ep = 4; /* given: kept, and DP left to the verdict */
    CHECK_MSG(resolve_request(&p, &req, r, &e) == 0, "%s", e.msg);
    CHECK(r->want.ep == 4 && r->want.dp == 0);

    snprintf(req.set, sizeof req.set, "train.no_such_key=1");
    CHECK(resolve_request(&p, &req, r, &e) == -1);
    CHECK_MSG(strstr(e.msg, "no_such_key") != NULL, "%s", e.msg);
    snprintf(req.set, sizeof req.set, "a=1,,b=2");
    CHECK(resolve_request(&p, &req, r, &e) == -1);
    CHECK_MSG(strstr(e.msg, "--moe-set") != NULL, "%s", e.msg);
    req.set[0] = '\0';
    snprintf(req.config, sizeof req.config, "no_such_config");
    CHECK(resolve_request(&p, &req, r, &e) == -1);
    CHECK_MSG(strstr(e.msg, "L0_sanity") != NULL, "%s", e.msg); /* lists what there is */
    free(r);
}

int main(void)
{
    snprintf(scratch, sizeof scratch, "/tmp/moe-test-config-XXXXXX");
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_shipped_names);
    RUN(test_unknown_name_lists_available);
    RUN(test_paths_follow_policy);
    RUN(test_layout_defaults);
    RUN(test_resolve_request);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", scratch);
    return check_summary("test_plugin_config");
}

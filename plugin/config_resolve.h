/* moekit SPANK plugin: from --moe-config to the file the trainer reads.
 *
 * A name resolves to <configs>/<name>.cfg in the admin's configs= directory
 * and nowhere else (not the task's working directory, not $MOE_CONFIG_DIR),
 * so with allow_user_configs=no users train only what the site ships. A path
 * is taken as given, and only when the admin set allow_user_configs=yes.
 * Runs in task_init, after Slurm dropped to the user: the files are opened
 * (and the trainer asked, planner.h) with the user's rights. */
#ifndef MOE_PLUGIN_CONFIG_RESOLVE_H
#define MOE_PLUGIN_CONFIG_RESOLVE_H

#include <stddef.h>

#include "../launch/verdict.h"
#include "args.h"

/* The configs directory the policy names, or the build's default. */
const char *resolve_configs_dir(const moe_policy *pol);

/* The config file for `requested` (a --moe-config value), checked to be a
 * readable file. Errors name the value, the directory and the configs that
 * are there. */
int resolve_config_path(const moe_policy *pol, const char *requested, char *out, size_t n,
                        moe_err *e);

/* What the plugin needs from a config. */
typedef struct {
    int num_experts;    /* model.num_experts */
    int ep, dp;         /* parallel.ep, parallel.dp (0 = world / ep) */
    char precision[16]; /* precision.compute, as the config names it */
    int precision_strict; /* precision.strict: the verdict refuses what it would fall back from */
} moe_config_facts;

/* The config loaded with the --moe-set items (so a bad override is reported
 * now, not by the trainer) and its facts: asked of the site's trainer
 * (`trainer query --config-facts`, planner.h), which loads it as it will
 * when it trains; the plugin links no config code. A bad config or item is
 * refused with the trainer's own message; a trainer that cannot answer
 * (missing, timed out, crashed, garbage) with one naming it and why. */
int resolve_config_facts(const moe_policy *pol, const char *path, char *const *items,
                         int n_items, moe_config_facts *facts, moe_err *e);

/* The run's memory plan at the verdict's precision, EP and DP against a GPU
 * with room_bytes (room_what says what that figure is, "GPU 3 has free"),
 * asked of the trainer (`trainer query --plan-fit`, plan_fit_config there)
 * with the policy's refuse_memory_short. msg gets the plan's rows and what
 * would fit (WARN, REFUSE) or why no plan could be made (NONE); e why the
 * trainer could not be asked (FAILED). */
enum {
    RESOLVE_PLAN_FITS = 0,
    RESOLVE_PLAN_WARN = 1,
    RESOLVE_PLAN_REFUSE = 2,
    RESOLVE_PLAN_NONE = 3,   /* the trainer made no plan: msg says why */
    RESOLVE_PLAN_FAILED = -1 /* the trainer did not answer: e says why */
};
int resolve_plan_fit(const moe_policy *pol, const char *path, char *const *items, int n_items,
                     const char *precision, int ep, int dp, unsigned long long room_bytes,
                     const char *room_what, char *msg, size_t n, moe_err *e);

/* planner_timeout= or its default, in seconds. */
int resolve_planner_timeout(const moe_policy *pol);

/* The request with the config's layout where the user gave none: no
 * --moe-ep and no --moe-dp takes the config's parallel.ep and parallel.dp;
 * --moe-dp alone takes its parallel.ep; --moe-ep alone leaves DP to the
 * verdict (GPUs / EP). */
void resolve_apply_layout(moe_request *req, const moe_config_facts *facts);

/* A request resolved against its config: the opening both the submit and
 * the remote contexts need. items point into set_buf. */
typedef struct {
    moe_request want;          /* the request with the config's layout applied */
    char config_path[4096];    /* the config file the trainer reads */
    moe_config_facts facts;
    char set_buf[sizeof ((moe_request *)0)->set];
    char *items[MOE_ARG_STEP_MAX_ITEMS]; /* the --moe-set items */
    int n_items;
} moe_resolved;

/* Split --moe-set, find the config (resolve_config_path), load it with the
 * items (resolve_config_facts) and apply its layout (resolve_apply_layout)
 * and its precision.strict. Returns 0, or -1 with the reason in e. */
int resolve_request(const moe_policy *pol, const moe_request *req, moe_resolved *out, moe_err *e);

#endif

/* moekit SPANK plugin: checks and exports at submit time, shared by the
 * allocator (sbatch, salloc) and local (srun) contexts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/layout.h"
#include "args.h"
#include "config_resolve.h"
#include "spank_moe.h"

extern char **environ;

/* The config, when this host can read it (resolve_request, as on the node),
 * so a wrong name, a bad --moe-set item or experts that EP cannot split are
 * refused before the job queues.
 * The config is read by the site's trainer (resolve_request asks it,
 * planner.h), run as a child of this sbatch, salloc or srun: the user's own
 * process, so with the user's rights.
 * A submit host without the site's configs (or the user's path), or
 * without the trainer, leaves that to the node. Fills *want with the
 * config's layout defaults. */
static int check_config_here(const char *who, moe_request *want)
{
    const moe_policy *pol = &moe_state.policy;
    struct stat st;
    const char *where = args_config_is_path(want->config) ? want->config
                                                          : resolve_configs_dir(pol);
    if (stat(where, &st) != 0)
        return 0;
    if (access(pol->trainer, X_OK) != 0) {
        slurm_verbose("moekit: %s is not here: the config is checked on the node", pol->trainer);
        return 0;
    }

    moe_err e;
    moe_resolved *r = malloc(sizeof *r);
    int rc = r ? resolve_request(pol, want, r, &e) : moe_errf(&e, "out of memory");
    if (rc == 0) {
        *want = r->want;
        if (want->ep > 0 && layout_rule(0, want->ep, 0, r->facts.num_experts, NULL) ==
                                MOE_LAYOUT_EP_SPLITS_EXPERTS)
            rc = moe_errf(&e, "EP=%d does not divide the %d experts of %s (--moe-ep must "
                              "divide model.num_experts)",
                          want->ep, r->facts.num_experts, r->config_path);
    }
    free(r);
    if (rc < 0)
        slurm_error("moekit: %s refused before queueing: %s", who, e.msg);
    return rc;
}

int moe_submit_check(const char *who, int requested_gpus, int requested_tasks)
{
    moe_request want = moe_state.request;
    moe_err e;
    if (moe_state.policy_failed) {
        slurm_error("moekit: %s refused before queueing: %s", who, moe_state.policy_err.msg);
        return -1;
    }
    if (moe_state.option_failed) {
        slurm_error("moekit: %s", moe_state.option_err.msg);
        return -1;
    }
    /* The user's limits where a job is submitted; an srun inside a job is a
     * step, which has room for what the job script added. */
    int new_job = strcmp(who, "srun") != 0 || !getenv("SLURM_JOB_ID");
    if (new_job && want.set[0] && args_check_user_set(want.set, &e) < 0) {
        slurm_error("moekit: %s refused before queueing: %s", who, e.msg);
        return -1;
    }
    if (!want.config[0]) {
        slurm_error("moekit: %s: the --moe-* options need --moe-config=NAME (the config to train)",
                    who);
        return -1;
    }
    if (check_config_here(who, &want) < 0)
        return -1;
    if (verdict_precheck(&moe_state.policy, &want, requested_gpus, requested_tasks, &e) < 0) {
        /* The layout may not be what the user typed: say where it came from. */
        const moe_request *typed = &moe_state.request;
        char from_config[160] = "";
        if (want.ep != typed->ep || want.dp != typed->dp)
            snprintf(from_config, sizeof from_config,
                     " (the config sets parallel.ep=%d parallel.dp=%d; choose others with "
                     "--moe-ep and --moe-dp)",
                     want.ep, want.dp);
        slurm_error("moekit: %s refused before queueing: %s%s", who, e.msg, from_config);
        return -1;
    }
    return 0;
}

static void export_var(spank_t sp, const char *name, const char *value)
{
    spank_err_t rc = spank_job_control_setenv(sp, name, value, 1);
    if (rc != ESPANK_SUCCESS)
        slurm_verbose("moekit: job control variable %s not set: %s", name, spank_strerror(rc));
}

void moe_submit_export(spank_t sp)
{
    const moe_request *req = &moe_state.request;
    char num[16];
    export_var(sp, "MOE_CONFIG", req->config);
    if (req->ep) {
        snprintf(num, sizeof num, "%d", req->ep);
        export_var(sp, "MOE_EP", num);
    }
    if (req->dp) {
        snprintf(num, sizeof num, "%d", req->dp);
        export_var(sp, "MOE_DP", num);
    }
    export_var(sp, "MOE_PRECISION", precision_name(req->precision));
    if (req->set[0])
        export_var(sp, "MOE_SET", req->set);
    if (req->check_only)
        export_var(sp, "MOE_CHECK", "1");
}

void moe_submit_kill_on_bad_exit(void)
{
    /* A rank that dies leaves the others blocked in a collective until the
     * trainer's watchdog (parallel.timeout_s) ends them; with kill-on-bad-exit
     * Slurm ends them at once. srun reads SLURM_KILL_BAD_EXIT as that option,
     * and sbatch and salloc hand SLURM_* variables of their own environment
     * to the job (sbatch even under --export=NONE), so every srun of the job
     * inherits it; an srun's own --kill-on-bad-exit=0 still wins. It must be
     * set here: an srun reads it before any plugin runs, and a job control
     * variable (spank_job_control_setenv) arrives renamed SLURM_SPANK_*. */
    if (!getenv("SLURM_KILL_BAD_EXIT") && setenv("SLURM_KILL_BAD_EXIT", "1", 0) != 0)
        slurm_verbose("moekit: SLURM_KILL_BAD_EXIT not set: out of memory");
}

void moe_submit_job_size(moe_job_size *js, const char *env_prefix)
{
    memset(js, 0, sizeof *js);
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (f) {
        static char buf[65536];
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *argv[1024];
        int argc = 0;
        for (size_t i = 0; i < len && argc < 1023; i += strlen(buf + i) + 1)
            argv[argc++] = buf + i;
        argv[argc] = NULL;
        job_size_scan_argv(js, argc, argv);
    }
    job_size_scan_env(js, env_prefix, environ);
    if (js->script[0]) {
        FILE *script = fopen(js->script, "r");
        if (script) {
            job_size_scan_script(js, script);
            fclose(script);
        }
    }
}

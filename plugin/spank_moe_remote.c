/* moekit SPANK plugin: remote context (slurmstepd).
 *
 * Everything happens in task_init, which runs in each task's own process
 * after Slurm dropped to the user's uid and just before Slurm would exec the
 * user's program. There the plugin reads the node, reaches the verdict,
 * prints it to the job's stderr, and execs the admin's trainer in place of
 * the user's program (Slurm 22.05 has no spank_prepend_task_argv). A refusal
 * returns -1: the job's stderr says why, the task exits 1, the node stays up.
 *
 * Only srun steps are ours: the batch script itself, the extern step and
 * salloc's interactive step run untouched, so a batch script runs normally
 * and each `srun` in it becomes one training step. */
#include <errno.h>
#include <slurm/slurm.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../topo/step.h"
#include "../topo/topo.h"
#include "args.h"
#include "bind.h"
#include "config_resolve.h"
#include "launch.h"
#include "spank_moe.h"

typedef struct {
    uint32_t job_id, step_id, global_id, total_tasks, local_tasks, nnodes;
    int local_id;
    char **env;
} task_info;

static int get_task_info(spank_t sp, task_info *ti)
{
    memset(ti, 0, sizeof *ti);
    return (spank_get_item(sp, S_JOB_ID, &ti->job_id) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_JOB_STEPID, &ti->step_id) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_TASK_GLOBAL_ID, &ti->global_id) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_TASK_ID, &ti->local_id) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ti->total_tasks) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ti->local_tasks) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_JOB_NNODES, &ti->nnodes) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_JOB_ENV, &ti->env) == ESPANK_SUCCESS)
               ? 0
               : -1;
}

static int refuse(const task_info *ti, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(const task_info *ti, const char *fmt, ...)
{
    char msg[MOE_ERR_LEN + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "moekit: job %u step %u task %u refused: %s\n", ti->job_id, ti->step_id,
            ti->global_id, msg);
    fflush(stderr);
    return -1;
}

/* The node as the policy says to read it, and the step's GPUs on it. */
static int read_node(const task_info *ti, moe_topo *topo, moe_step *step, int *gpu_idx,
                     int *n_idx, moe_err *e)
{
    const moe_policy *pol = &moe_state.policy;
    const char *xml = pol->topology_xml[0] ? pol->topology_xml : NULL;
    if (topo_load(topo, xml, 0, e) < 0)
        return moe_err_prefix(e, "reading this node's topology");
    if (topo_fill_step(topo, ti->env, step, e) < 0)
        return -1;
    if (topo_slurm_step_gpus(topo, ti->env, gpu_idx, n_idx, NULL, e) < 0)
        return -1;
    topo_step_from_indices(topo, gpu_idx, *n_idx, step);
    step->ntasks = (int)ti->total_tasks;
    step->nnodes = (int)ti->nnodes;
    return 0;
}

/* bind=yes: this task's GPU, CPUs and memory. Returns the CUDA_VISIBLE_DEVICES
 * value for the trainer (NULL: keep Slurm's) in buf. */
static const char *bind_task(const task_info *ti, const moe_topo *topo, const int *gpu_idx,
                             int n_idx, char *buf, size_t n)
{
    const char *visible = launch_getenv(ti->env, "CUDA_VISIBLE_DEVICES");
    int n_visible = bind_list_count(visible);
    int pick = bind_pick_gpu(n_visible, ti->local_id, (int)ti->local_tasks);
    int mine = pick >= 0 ? pick : (n_idx == 1 ? 0 : -1);
    char note[1024] = "";
    const char *narrowed = NULL;
    moe_err e;
    if (pick >= 0 && bind_list_entry(visible, pick, buf, n, &e) == 0)
        narrowed = buf;
    if (mine < 0 || mine >= n_idx) {
        fprintf(stderr, "moekit: task %u: bind=yes, but no single GPU is this task's; not bound\n",
                ti->global_id);
        return narrowed;
    }
    const moe_topo_gpu *g = &topo->gpus[gpu_idx[mine]];
    bind_apply(g->cpus, g->numa_node, note, sizeof note);
    fprintf(stderr, "moekit: task %u: GPU %s%s%s: %s\n", ti->global_id, g->pci_bus_id,
            narrowed ? ", CUDA_VISIBLE_DEVICES=" : "", narrowed ? narrowed : "", note);
    return narrowed;
}

static void print_launch(const task_info *ti, const char *trainer, char **argv)
{
    fprintf(stderr, "moekit: starting %s", trainer);
    for (int i = 1; argv[i]; i++)
        fprintf(stderr, " %s", argv[i]);
    fprintf(stderr, " (%u task%s)\n", ti->total_tasks, ti->total_tasks == 1 ? "" : "s");
}

/* Never returns on success: the task becomes the trainer. */
static int start_trainer(const task_info *ti, const moe_verdict *v, const char *config_path,
                         char *const *items, int n_items, const char *cuda_visible)
{
    const moe_policy *pol = &moe_state.policy;
    moe_task_place place = {
        .rank = (int)ti->global_id,
        .world_size = (int)ti->total_tasks,
        .local_rank = ti->local_id,
        .local_world_size = (int)ti->local_tasks,
        .job_id = ti->job_id,
        .step_id = ti->step_id,
    };
    moe_err e;
    const char *nodes = launch_getenv(ti->env, "SLURM_STEP_NODELIST");
    if (!nodes)
        nodes = launch_getenv(ti->env, "SLURM_NODELIST");
    if (launch_first_host(nodes, place.master_addr, sizeof place.master_addr, &e) < 0)
        return refuse(ti, "finding the step's first node: %s", e.msg);
    if (!pol->trainer[0])
        return refuse(ti, "the site's plugstack.conf names no trainer= for spank_moe.so");

    moe_launch l;
    if (launch_build(&l, v, config_path, pol->data, items, n_items, &place, ti->env, cuda_visible, &e) < 0)
        return refuse(ti, "%s", e.msg);
    if (ti->global_id == 0)
        print_launch(ti, pol->trainer, l.argv);
    fflush(NULL);
    execve(pol->trainer, l.argv, l.envp);
    int err = errno;
    launch_free(&l);
    return refuse(ti, "cannot start the trainer %s: %s (ask the site's admins)", pol->trainer,
                  strerror(err));
}


/* The run's memory plan at the verdict's EP x DP against the smallest GPU
 * of the step, asked of the trainer (resolve_plan_fit: plan_fit_config in
 * `trainer query --plan-fit`): -1 when it does not fit and the policy
 * refuses (refuse_memory_short=yes), or when the trainer cannot be asked;
 * else 0 (a warning printed by rank 0). */
static int check_memory(const task_info *ti, const moe_policy *pol, const char *config_path,
                        char *const *items, int n_items, const moe_topo *topo, const int *idx,
                        int n, const moe_verdict *v)
{
    int gpu, is_free;
    unsigned long long mem = topo_step_room(topo, idx, n, &gpu, &is_free);
    char msg[4096], what[64];
    moe_err e = {{0}};
    if (!mem)
        return 0;
    /* the node's driver says what is free now (another job's memory is not ours) */
    if (is_free)
        snprintf(what, sizeof what, "GPU %d has free", gpu);
    else
        snprintf(what, sizeof what, "a GPU has (the card's total; NVML did not say what is free)");
    int fit = resolve_plan_fit(pol, config_path, items, n_items, precision_name(v->precision),
                               v->ep, v->dp, mem, what, msg, sizeof msg, &e);
    if (fit == RESOLVE_PLAN_FITS)
        return 0;
    if (fit == RESOLVE_PLAN_FAILED) {
        fprintf(stderr, "moekit: memory plan: cannot ask the trainer: %s\n", e.msg);
        return -1;
    }
    if (fit == RESOLVE_PLAN_NONE) {
        if (ti->global_id == 0)
            fprintf(stderr, "moekit: warning: no memory plan: %s\n", msg);
        return 0;
    }
    if (ti->global_id == 0 || fit == RESOLVE_PLAN_REFUSE)
        fprintf(stderr, "moekit: memory %s: %s\n", fit == RESOLVE_PLAN_REFUSE ? "refused" : "warning",
                msg);
    return fit == RESOLVE_PLAN_REFUSE ? -1 : 0;
}

int moe_remote_task_init(spank_t sp)
{
    const moe_policy *pol = &moe_state.policy;
    const moe_request *req = &moe_state.request;
    if (!req->active && !moe_state.option_failed)
        return 0;
    task_info ti;
    if (get_task_info(sp, &ti) < 0) {
        fprintf(stderr, "moekit: refused: Slurm did not tell the plugin this task's ids\n");
        return -1;
    }
    if (ti.step_id >= SLURM_MAX_NORMAL_STEP_ID)
        return 0;
    if (moe_state.policy_failed)
        return refuse(&ti, "%s", moe_state.policy_err.msg);
    if (moe_state.option_failed)
        return refuse(&ti, "%s", moe_state.option_err.msg);
    if (!req->config[0])
        return refuse(&ti, "the --moe-* options need --moe-config=NAME (the config to train)");

    /* Opened with the user's rights: task_init runs after Slurm drops root. */
    moe_err e;
    moe_resolved *r = malloc(sizeof *r);
    if (!r)
        return refuse(&ti, "out of memory");
    if (resolve_request(pol, req, r, &e) < 0) {
        free(r);
        return refuse(&ti, "%s", e.msg);
    }

    moe_topo *topo = malloc(sizeof *topo);
    moe_step *step = malloc(sizeof *step);
    moe_verdict *v = malloc(sizeof *v);
    int gpu_idx[TOPO_MAX_GPUS], n_idx = 0, rc = -1;
    if (!topo || !step || !v) {
        rc = refuse(&ti, "out of memory");
        goto out;
    }
    if (read_node(&ti, topo, step, gpu_idx, &n_idx, &e) < 0) {
        rc = refuse(&ti, "%s", e.msg);
        goto out;
    }
    step->num_experts = r->facts.num_experts;
    verdict_decide(pol, &r->want, step, v);

    if (ti.global_id == 0 || v->kind == MOE_VERDICT_REFUSE)
        fprintf(stderr, "%s\n", v->paragraph);
    if (v->kind == MOE_VERDICT_REFUSE) {
        rc = refuse(&ti, "see the verdict above");
        goto out;
    }
    if (check_memory(&ti, pol, r->config_path, r->items, r->n_items, topo, gpu_idx, n_idx, v) < 0) {
        rc = refuse(&ti, "see the memory plan above");
        goto out;
    }
    if (req->check_only) {
        if (ti.global_id == 0)
            fprintf(stderr, "moekit: --moe-check: the job would run as above; not training.\n");
        fflush(NULL);
        _exit(0);
    }
    char visible_buf[256];
    const char *cuda_visible = NULL;
    if (n_idx == 0)
        cuda_visible = ""; /* a step without GPUs must not reach the node's */
    else if (pol->bind)
        cuda_visible = bind_task(&ti, topo, gpu_idx, n_idx, visible_buf, sizeof visible_buf);
    rc = start_trainer(&ti, v, r->config_path, r->items, r->n_items, cuda_visible);
out:
    free(r);
    free(topo);
    free(step);
    free(v);
    return rc;
}

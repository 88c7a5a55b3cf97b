/* moekit: mapping Slurm's and CUDA's GPU names onto the node's GPUs. */
#include "step.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

_Static_assert(TOPO_MAX_GPUS <= MOE_VERDICT_MAX_GPUS, "a moe_step must hold every GPU of a node");

static int by_minor(const moe_topo *t, int minor)
{
    for (int i = 0; i < t->n_gpus; i++)
        if (t->gpus[i].minor == minor)
            return i;
    return -1;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static int no_such_gpu(const moe_topo *t, const char *what, const char *value, int idx,
                       moe_err *e)
{
    if (t->n_gpus == 0)
        return moe_errf(e, "%s=\"%s\" names GPU %d, but this node has no NVIDIA GPU that hwloc "
                           "or NVML can see (%s)", what, value, idx, t->origin);
    if (t->n_gpus == 1)
        return moe_errf(e, "%s=\"%s\" names GPU %d, but this node has one GPU, GPU 0 (%s)",
                        what, value, idx, t->origin);
    return moe_errf(e, "%s=\"%s\" names GPU %d, but this node's GPUs are 0-%d (%s)", what,
                    value, idx, t->n_gpus - 1, t->origin);
}

/* SLURM_*_GPUS: minors; CUDA numbers the step's devices in PCI order. */
int topo_gpus_from_list(const moe_topo *t, const char *what, const char *value, int *out,
                        int *n_out, moe_err *e)
{
    int minors[TOPO_MAX_GPUS], n;
    if (topo_parse_index_list(value, what, minors, TOPO_MAX_GPUS, &n, e))
        return -1;
    for (int k = 0; k < n; k++) {
        out[k] = by_minor(t, minors[k]);
        if (out[k] < 0)
            return no_such_gpu(t, what, value, minors[k], e);
    }
    qsort(out, (size_t)n, sizeof out[0], cmp_int);
    *n_out = n;
    return 0;
}

static int by_uuid(const moe_topo *t, const char *what, const char *value, const char *uuid,
                   moe_err *e)
{
    if (strncmp(uuid, "MIG-", 4) == 0)
        return moe_errf(e, "%s=\"%s\": \"%s\" is a MIG device; moekit trains on whole GPUs",
                        what, value, uuid);
    for (int i = 0; i < t->n_gpus; i++)
        if (t->gpus[i].uuid[0] && strcmp(t->gpus[i].uuid, uuid) == 0)
            return i;
    if (!t->nvml_used) {
        int any = 0;
        for (int i = 0; i < t->n_gpus; i++)
            any |= t->gpus[i].uuid[0] != '\0';
        if (!any)
            return moe_errf(e, "%s=\"%s\": cannot resolve GPU UUID \"%s\" without NVML (%s); "
                               "use GPU indices", what, value, uuid, t->nvml_note);
    }
    return moe_errf(e, "%s=\"%s\": no GPU on this node has UUID \"%s\"", what, value, uuid);
}

/* CUDA_VISIBLE_DEVICES: indices or UUIDs, order kept (it is CUDA's order). */
static int from_cuda_visible(const moe_topo *t, const char *value, int *out, int *n_out,
                             moe_err *e)
{
    const char *what = "CUDA_VISIBLE_DEVICES";
    if (strcmp(value, "NoDevFiles") == 0) { /* Slurm's word for "none" */
        *n_out = 0;
        return 0;
    }
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", value) >= (int)sizeof buf)
        return moe_errf(e, "%s is too long (%zu bytes)", what, strlen(value));
    /* strtok_r skips empty fields: "0,,1" would pass silently otherwise. */
    if (strstr(value, ",,") || value[0] == ',' || value[strlen(value) - 1] == ',')
        return moe_errf(e, "%s=\"%s\": empty entry", what, value);
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        int idx;
        if (strncmp(tok, "GPU-", 4) == 0 || strncmp(tok, "MIG-", 4) == 0) {
            idx = by_uuid(t, what, value, tok, e);
            if (idx < 0)
                return -1;
        } else {
            char *end;
            errno = 0;
            long v = strtol(tok, &end, 10);
            if (end == tok || *end || errno || v < 0 || v > INT_MAX)
                return moe_errf(e, "%s=\"%s\": \"%s\" is neither a GPU index nor a GPU UUID",
                                what, value, tok);
            idx = by_minor(t, (int)v);
            if (idx < 0)
                return no_such_gpu(t, what, value, (int)v, e);
        }
        for (int k = 0; k < n; k++)
            if (out[k] == idx)
                return moe_errf(e, "%s=\"%s\": GPU %s is listed twice", what, value,
                                t->gpus[idx].pci_bus_id);
        if (n == TOPO_MAX_GPUS)
            return moe_errf(e, "%s=\"%s\": more than %d GPUs", what, value, TOPO_MAX_GPUS);
        out[n++] = idx;
    }
    *n_out = n;
    return 0;
}

int topo_step_gpus(const moe_topo *t, const char *step_gpus, const char *job_gpus,
                   const char *cuda_visible, int *out, int *n_out, const char **from,
                   moe_err *e)
{
    *n_out = 0;
    const char *src;
    int rc;
    if (step_gpus) {
        src = "SLURM_STEP_GPUS";
        rc = *step_gpus ? topo_gpus_from_list(t, src, step_gpus, out, n_out, e) : 0;
    } else if (job_gpus) {
        src = "SLURM_JOB_GPUS";
        rc = *job_gpus ? topo_gpus_from_list(t, src, job_gpus, out, n_out, e) : 0;
    } else if (cuda_visible) {
        src = "CUDA_VISIBLE_DEVICES";
        rc = *cuda_visible ? from_cuda_visible(t, cuda_visible, out, n_out, e) : 0;
    } else {
        src = "all GPUs of the node";
        for (int i = 0; i < t->n_gpus; i++)
            out[i] = i;
        *n_out = t->n_gpus;
        rc = 0;
    }
    if (from)
        *from = src;
    if (rc)
        *n_out = 0;
    return rc;
}

int topo_slurm_step_gpus(const moe_topo *t, char *const env[], int *out, int *n_out,
                         const char **from, moe_err *e)
{
    /* Slurm sets SLURM_STEP_GPUS for every step that holds GPUs. A step
     * without it holds none: SLURM_JOB_GPUS and CUDA_VISIBLE_DEVICES may be
     * the batch step's, inherited by `srun --gres=none`. */
    const char *step_gpus = topo_env_get(env, "SLURM_STEP_GPUS");
    *n_out = 0;
    if (from)
        *from = step_gpus ? "SLURM_STEP_GPUS" : "none (the step holds no GPU)";
    if (!step_gpus || !*step_gpus)
        return 0;
    return topo_step_gpus(t, step_gpus, NULL, NULL, out, n_out, NULL, e);
}

const char *topo_env_get(char *const env[], const char *name)
{
    if (!env)
        env = environ;
    size_t len = strlen(name);
    for (; env && *env; env++)
        if (strncmp(*env, name, len) == 0 && (*env)[len] == '=')
            return *env + len + 1;
    return NULL;
}

/* A positive count from the first of two variables that is set; 0 if none. */
static int env_count(char *const env[], const char *name, const char *fallback, int *out,
                     moe_err *e)
{
    const char *used = name;
    const char *v = topo_env_get(env, name);
    if (!v) {
        used = fallback;
        v = topo_env_get(env, fallback);
    }
    *out = 0;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n <= 0 || n > INT_MAX)
        return moe_errf(e, "%s=\"%s\" is not a positive count", used, v);
    *out = (int)n;
    return 0;
}

void topo_step_from_indices(const moe_topo *t, const int *idx, int n, moe_step *step)
{
    step->n_gpus = n;
    for (int k = 0; k < n; k++) {
        const moe_topo_gpu *g = &t->gpus[idx[k]];
        moe_step_gpu *s = &step->gpus[k];
        if (g->model[0])
            snprintf(s->model, sizeof s->model, "%s", g->model);
        else /* name the part even when nothing knows it */
            snprintf(s->model, sizeof s->model, "unknown NVIDIA GPU [%04x:%04x]", g->vendor_id,
                     g->device_id);
        snprintf(s->pci_bus_id, sizeof s->pci_bus_id, "%s", g->pci_bus_id);
        s->cc_major = g->cc_major;
        s->cc_minor = g->cc_minor;
        s->numa_node = g->numa_node;
    }
}

int topo_fill_step(const moe_topo *t, char *const env[], moe_step *step, moe_err *e)
{
    memset(step, 0, sizeof *step);
    int idx[TOPO_MAX_GPUS], n;
    if (topo_step_gpus(t, topo_env_get(env, "SLURM_STEP_GPUS"),
                       topo_env_get(env, "SLURM_JOB_GPUS"),
                       topo_env_get(env, "CUDA_VISIBLE_DEVICES"), idx, &n, NULL, e))
        return -1;
    topo_step_from_indices(t, idx, n, step);
    if (env_count(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", &step->ntasks, e) ||
        env_count(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", &step->nnodes, e))
        return -1;
    return 0;
}

unsigned long long topo_step_room(const moe_topo *t, const int *idx, int n, int *gpu, int *is_free)
{
    unsigned long long room = 0;
    *gpu = -1, *is_free = n > 0;
    for (int k = 0; k < n; k++)
        if (!t->gpus[idx[k]].memory_free_bytes)
            *is_free = 0;
    for (int k = 0; k < n; k++) {
        const moe_topo_gpu *g = &t->gpus[idx[k]];
        unsigned long long m = *is_free ? g->memory_free_bytes : g->memory_bytes;
        if (m && (!room || m < room))
            room = m, *gpu = g->index;
    }
    return room;
}

unsigned long long topo_step_min_memory(const moe_topo *t, const int *idx, int n)
{
    unsigned long long mem = 0;
    for (int k = 0; k < n; k++) {
        unsigned long long m = t->gpus[idx[k]].memory_bytes;
        if (m && (!mem || m < mem))
            mem = m;
    }
    return mem;
}

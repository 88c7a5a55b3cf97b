/* moekit SPANK plugin: the trainer's argv and environment (see launch.h). */
#include "launch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *launch_getenv(char *const *env, const char *name)
{
    size_t len = strlen(name);
    for (char *const *p = env; p && *p; p++)
        if (strncmp(*p, name, len) == 0 && (*p)[len] == '=')
            return *p + len + 1;
    return NULL;
}

int launch_master_port(unsigned job_id, unsigned step_id)
{
    /* Consecutive jobs land 16 ports apart, so steps 0-15 of neighbouring
     * jobs on a shared node never collide. */
    unsigned long long key = (unsigned long long)job_id * 16u + (step_id % 16u);
    return 20000 + (int)(key % 12000u);
}

int launch_first_host(const char *nodelist, char *out, size_t n, moe_err *e)
{
    if (!nodelist || !*nodelist)
        return moe_errf(e, "empty Slurm node list");
    size_t o = 0;
    for (const char *p = nodelist; *p && *p != ','; p++) {
        if (*p == '[') {
            /* Take the first number of the range, keeping its zero padding. */
            const char *q = p + 1;
            while (*q >= '0' && *q <= '9') {
                if (o + 1 >= n)
                    return moe_errf(e, "node list '%s': host name too long", nodelist);
                out[o++] = *q++;
            }
            if (q == p + 1)
                return moe_errf(e, "node list '%s': '[' not followed by a number", nodelist);
            const char *close = strchr(q, ']');
            if (!close)
                return moe_errf(e, "node list '%s': '[' without ']'", nodelist);
            p = close;
            continue;
        }
        if (o + 1 >= n)
            return moe_errf(e, "node list '%s': host name too long", nodelist);
        out[o++] = *p;
    }
    if (o == 0)
        return moe_errf(e, "node list '%s' starts with an empty name", nodelist);
    out[o] = '\0';
    return 0;
}

/* A growable NULL-terminated array of owned strings. */
typedef struct {
    char **v;
    size_t n, cap;
} strvec;

static int vec_push_owned(strvec *s, char *str)
{
    if (!str)
        return -1;
    if (s->n + 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(str);
            return -1;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    s->v[s->n] = NULL;
    return 0;
}

static int vec_pushf(strvec *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int vec_pushf(strvec *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *str = NULL;
    int rc = vasprintf(&str, fmt, ap);
    va_end(ap);
    return rc < 0 ? -1 : vec_push_owned(s, str);
}

static void vec_free(strvec *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* Variables the plugin sets: inherited copies are dropped. */
static int replaced_by_plugin(const char *entry, int replace_cuda_visible)
{
    if (strncmp(entry, "MOE_", 4) == 0)
        return 1;
    if (strncmp(entry, "CUDA_DEVICE_ORDER=", 18) == 0)
        return 1;
    return replace_cuda_visible && strncmp(entry, "CUDA_VISIBLE_DEVICES=", 21) == 0;
}

int launch_build(moe_launch *l, const moe_verdict *v, const char *config_path,
                 const char *data_dir, char *const *set_items, int n_items, const moe_task_place *place,
                 char *const *job_env, const char *cuda_visible, moe_err *e)
{
    strvec argv = {0}, env = {0};
    int ok = 1;

    ok &= vec_pushf(&argv, "moe-train") == 0;
    ok &= vec_pushf(&argv, "--config") == 0;
    ok &= vec_pushf(&argv, "%s", config_path) == 0;
    if (v->cpu_only) {
        ok &= vec_pushf(&argv, "--backend") == 0;
        ok &= vec_pushf(&argv, "cpu") == 0;
    }
    ok &= vec_pushf(&argv, "precision.compute=%s", precision_name(v->precision)) == 0;
    /* fp8_block is chosen only where the site allows it: a config's false must not undo it */
    if (v->precision == MOE_PREC_FP8_BLOCK)
        ok &= vec_pushf(&argv, "precision.allow_fp8_block=true") == 0;
    ok &= vec_pushf(&argv, "parallel.ep=%d", v->ep) == 0;
    ok &= vec_pushf(&argv, "parallel.dp=%d", v->dp) == 0;
    for (int i = 0; i < n_items; i++)
        ok &= vec_pushf(&argv, "%s", set_items[i]) == 0;
    /* The verdict decided: moe-train trains in exactly that or stops, never deciding again
     * (after the items, which may name precision.strict for the verdict). */
    ok &= vec_pushf(&argv, "precision.strict=true") == 0;

    for (char *const *p = job_env; p && *p; p++)
        if (!replaced_by_plugin(*p, cuda_visible != NULL))
            ok &= vec_pushf(&env, "%s", *p) == 0;
    ok &= vec_pushf(&env, "MOE_CONFIG=%s", config_path) == 0;
    if (data_dir && *data_dir)
        ok &= vec_pushf(&env, "MOE_DATA_DIR=%s", data_dir) == 0;
    ok &= vec_pushf(&env, "MOE_PRECISION=%s", precision_name(v->precision)) == 0;
    ok &= vec_pushf(&env, "MOE_DP=%d", v->dp) == 0;
    ok &= vec_pushf(&env, "MOE_RANK=%d", place->rank) == 0;
    ok &= vec_pushf(&env, "MOE_WORLD_SIZE=%d", place->world_size) == 0;
    ok &= vec_pushf(&env, "MOE_LOCAL_RANK=%d", place->local_rank) == 0;
    ok &= vec_pushf(&env, "MOE_LOCAL_WORLD_SIZE=%d", place->local_world_size) == 0;
    ok &= vec_pushf(&env, "MOE_MASTER_ADDR=%s", place->master_addr) == 0;
    ok &= vec_pushf(&env, "MOE_MASTER_PORT=%d",
                    launch_master_port(place->job_id, place->step_id)) == 0;
    /* topo/ numbers GPUs in PCI bus order; CUDA must agree. */
    ok &= vec_pushf(&env, "CUDA_DEVICE_ORDER=PCI_BUS_ID") == 0;
    if (cuda_visible)
        ok &= vec_pushf(&env, "CUDA_VISIBLE_DEVICES=%s", cuda_visible) == 0;

    if (!ok) {
        vec_free(&argv);
        vec_free(&env);
        return moe_errf(e, "out of memory building the trainer's command line");
    }
    l->argv = argv.v;
    l->envp = env.v;
    return 0;
}

void launch_free(moe_launch *l)
{
    for (int k = 0; k < 2; k++) {
        char **v = k ? l->envp : l->argv;
        for (size_t i = 0; v && v[i]; i++)
            free(v[i]);
        free(v);
    }
    l->argv = l->envp = NULL;
}

/* moekit SPANK plugin: the size a job asks for, from its command line,
 * environment and #SBATCH lines (see job_size.h). */
#include "job_size.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Short options of sbatch, srun and salloc (Slurm 22.05) that take an
 * argument, so "-p debug script.sh" skips "debug" and finds the script. */
static const char short_with_arg[] = "AaBbCcDdeFGgiJLMmNnopqSTtUwx";

/* Long options that take no argument or only an "=value" one. Every other
 * long option given without '=' takes the next word as its value. */
static const char *const long_without_arg[] = {
    "bell", "contiguous", "disable-status", "exact", "exclusive", "get-user-env", "help",
    "hold", "ignore-pbs", "kill-on-bad-exit", "label", "moe-check", "multi-prog", "nice",
    "no-allocate", "no-bell", "no-kill", "no-requeue", "no-shell", "overcommit", "overlap",
    "oversubscribe", "parsable", "preserve-env", "propagate", "pty", "quiet",
    "quit-on-interrupt", "reboot", "requeue", "resv-ports", "send-libs", "spread-job",
    "test-only", "unbuffered", "usage", "use-min-nodes", "verbose", "version", "wait", "whole",
    "x11",
};

static int takes_arg_long(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof long_without_arg / sizeof long_without_arg[0]; i++)
        if (strlen(long_without_arg[i]) == len && strncmp(long_without_arg[i], name, len) == 0)
            return 0;
    return 1;
}

/* A leading decimal number; 0 when there is none. */
static int leading_int(const char *s)
{
    if (!s || !isdigit((unsigned char)*s))
        return 0;
    long v = strtol(s, NULL, 10);
    return (v > 0 && v < 1000000) ? (int)v : 0;
}

/* "[type:]N[,[type:]N...]" as in --gpus=b200:2 or --gpus=4: the sum. */
static int parse_gpu_count(const char *s)
{
    int total = 0;
    while (s && *s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *num = s;
        const char *colon = memchr(s, ':', len);
        if (colon)
            num = colon + 1;
        total += leading_int(num);
        s = end ? end + 1 : NULL;
    }
    return total;
}

/* --gres=gpu:2 / gpu:b200:2 / gres/gpu:2 / gpu (one) / gpu:b200 (one), among
 * other comma-separated GRES. */
static int parse_gres_gpus(const char *s)
{
    int total = 0;
    while (s && *s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char item[256];
        if (len < sizeof item) {
            memcpy(item, s, len);
            item[len] = '\0';
            char *name = item;
            if (strncmp(name, "gres/", 5) == 0 || strncmp(name, "gres:", 5) == 0)
                name += 5;
            if (strncmp(name, "gpu", 3) == 0 && (name[3] == '\0' || name[3] == ':')) {
                /* The count is the last field when it is a number, else 1. */
                const char *last = strrchr(name, ':');
                int n = last ? leading_int(last + 1) : 0;
                total += n > 0 ? n : 1;
            }
        }
        s = end ? end + 1 : NULL;
    }
    return total;
}

static void set_if_unset(int *field, int value)
{
    if (*field == 0 && value > 0)
        *field = value;
}

/* Apply one size option (long name, or the short letter as a 1-char name). */
static void apply_option(moe_job_size *js, const char *name, size_t len, const char *value)
{
#define IS(s) (len == strlen(s) && strncmp(name, s, len) == 0)
    if (IS("n") || IS("ntasks"))
        set_if_unset(&js->ntasks, leading_int(value));
    else if (IS("N") || IS("nodes"))
        set_if_unset(&js->nodes, leading_int(value));
    else if (IS("ntasks-per-node"))
        set_if_unset(&js->ntasks_per_node, leading_int(value));
    else if (IS("G") || IS("gpus"))
        set_if_unset(&js->gpus, parse_gpu_count(value));
    else if (IS("gpus-per-node"))
        set_if_unset(&js->gpus_per_node, parse_gpu_count(value));
    else if (IS("gpus-per-task"))
        set_if_unset(&js->gpus_per_task, parse_gpu_count(value));
    else if (IS("gres") && js->gpus_per_node == 0) {
        /* a --gres given replaces the script's whole request: "none" or a
         * list without gpu means no GPU, marked -1 so no later source
         * (a #SBATCH line) fills it in */
        int n = parse_gres_gpus(value);
        js->gpus_per_node = n > 0 ? n : -1;
    }
#undef IS
}

/* Parse options from words[0..n); returns the index of the first operand
 * (n if none). */
static int scan_words(moe_job_size *js, int n, char *const *words)
{
    int i = 0;
    while (i < n) {
        const char *w = words[i];
        if (strcmp(w, "--") == 0)
            return i + 1;
        if (w[0] != '-' || w[1] == '\0')
            return i;
        if (w[1] == '-') {
            const char *name = w + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            const char *value = NULL;
            if (eq)
                value = eq + 1;
            else if (takes_arg_long(name, len) && i + 1 < n)
                value = words[++i];
            if (value)
                apply_option(js, name, len, value);
            i++;
            continue;
        }
        /* A cluster of short options: "-vN2", "-n", "4". */
        for (const char *p = w + 1; *p; p++) {
            if (!strchr(short_with_arg, *p))
                continue;
            const char *value = p[1] ? p + 1 : (i + 1 < n ? words[++i] : NULL);
            if (value)
                apply_option(js, p, 1, value);
            break;
        }
        i++;
    }
    return n;
}

void job_size_scan_argv(moe_job_size *js, int argc, char *const *argv)
{
    if (argc < 1)
        return;
    int first = 1 + scan_words(js, argc - 1, argv + 1);
    const char *prog = strrchr(argv[0], '/');
    prog = prog ? prog + 1 : argv[0];
    if (strcmp(prog, "sbatch") == 0 && first < argc && !js->script[0] &&
        strlen(argv[first]) < sizeof js->script)
        strcpy(js->script, argv[first]);
}

void job_size_scan_script(moe_job_size *js, FILE *script)
{
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, script)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        /* sbatch stops reading directives at the first command. */
        if (*p == '\n' || *p == '\0' || (lineno == 1 && strncmp(p, "#!", 2) == 0))
            continue;
        if (*p != '#')
            break;
        if (strncmp(p, "#SBATCH", 7) != 0 || (p[7] != ' ' && p[7] != '\t'))
            continue;
        char *words[64];
        int n = 0;
        for (char *tok = strtok(p + 7, " \t\r\n"); tok && n < 64; tok = strtok(NULL, " \t\r\n")) {
            if (tok[0] == '#')
                break; /* a trailing comment */
            words[n++] = tok;
        }
        scan_words(js, n, words);
    }
}

static const char *env_get(char *const *env, const char *prefix, const char *suffix)
{
    size_t plen = strlen(prefix), slen = strlen(suffix);
    for (char *const *e = env; e && *e; e++)
        if (strncmp(*e, prefix, plen) == 0 && strncmp(*e + plen, suffix, slen) == 0 &&
            (*e)[plen + slen] == '=')
            return *e + plen + slen + 1;
    return NULL;
}

void job_size_scan_env(moe_job_size *js, const char *prefix, char *const *env)
{
    set_if_unset(&js->nodes, leading_int(env_get(env, prefix, "NNODES")));
    set_if_unset(&js->ntasks, leading_int(env_get(env, prefix, "NTASKS")));
    set_if_unset(&js->ntasks_per_node, leading_int(env_get(env, prefix, "NTASKS_PER_NODE")));
    set_if_unset(&js->gpus, parse_gpu_count(env_get(env, prefix, "GPUS")));
    set_if_unset(&js->gpus_per_node, parse_gpu_count(env_get(env, prefix, "GPUS_PER_NODE")));
    set_if_unset(&js->gpus_per_task, parse_gpu_count(env_get(env, prefix, "GPUS_PER_TASK")));
    set_if_unset(&js->gpus_per_node, parse_gres_gpus(env_get(env, prefix, "GRES")));
    /* Inside an allocation: the GPUs this node holds for the job. */
    set_if_unset(&js->gpus_per_node, leading_int(env_get(env, prefix, "GPUS_ON_NODE")));
}

int job_size_total_tasks(const moe_job_size *js)
{
    if (js->ntasks > 0)
        return js->ntasks;
    if (js->ntasks_per_node > 0)
        return js->ntasks_per_node * (js->nodes > 0 ? js->nodes : 1);
    return 0;
}

int job_size_total_gpus(const moe_job_size *js)
{
    if (js->gpus > 0)
        return js->gpus;
    if (js->gpus_per_node > 0)
        return js->gpus_per_node * (js->nodes > 0 ? js->nodes : 1);
    int tasks = job_size_total_tasks(js);
    if (js->gpus_per_task > 0 && tasks > 0)
        return js->gpus_per_task * tasks;
    return 0;
}

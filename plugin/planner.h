/* moekit SPANK plugin: asking the installed trainer instead of linking it.
 *
 * The plugin needs two things only the trainer's code knows: a config's
 * facts (config_load with the user's overrides) and whether the run's memory
 * plan fits the step's GPUs (plan_fit_config). Linking that code would load
 * the config, planner, model, parallel and low-precision libraries and
 * OpenMP into slurmstepd; instead the plugin runs the site's trainer= as a
 * child process, the way pyxis hands work to enroot:
 *
 *   <trainer> query --config-facts --config PATH --configs-dir DIR [key=value ...]
 *   <trainer> query --plan-fit ... --precision P --ep E --dp D --room-bytes N ...
 *
 * and reads its answer, one line of JSON (trainer/query.h has the grammar).
 * The trainer answers for itself: the facts and the plan come from the very
 * binary the step will run.
 *
 * The child:
 *  - runs with the caller's credentials, made permanent (real = effective
 *    uid and gid) before exec: in task_init that is the user (Slurm dropped
 *    root for good before it), in sbatch, salloc and srun the submitting user;
 *  - gets a fixed environment, nothing from the job's: PATH=/usr/bin:/bin,
 *    LC_ALL=C, OMP_NUM_THREADS=1 (so LD_PRELOAD, MOE_CONFIG_DIR or
 *    MOE_FP8_GEMMS in a job cannot change the answer; the configs directory
 *    is an argument);
 *  - gets /dev/null as stdin, pipes as stdout and stderr, and no other
 *    descriptor (close_range), in its own process group, with default
 *    signal dispositions and an empty signal mask;
 *  - is killed (its whole process group, SIGKILL) when it has not finished
 *    within the policy's planner_timeout= seconds.
 * Anything but a well-formed answer (no such program, exec failure, a
 * timeout, a crash, a non-zero exit, garbage, an oversized answer) is an
 * error naming the program and the reason, with the end of its stderr; the
 * caller refuses the job step with it. No Slurm here: unit-tested directly
 * (tests/plugin/test_planner.c). */
#ifndef MOE_PLUGIN_PLANNER_H
#define MOE_PLUGIN_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define PLANNER_OUT_MAX 32768 /* the longest answer read (a plan's message is ~2 KiB) */
#define PLANNER_MAX_FIELDS 16
#define PLANNER_ANSWER_VERSION 1

/* One parsed answer: the object's members in order. */
typedef enum { PLANNER_STRING, PLANNER_INT, PLANNER_BOOL } planner_type;
typedef struct {
    char key[32];
    planner_type type;
    long long num;     /* PLANNER_INT, PLANNER_BOOL (0/1) */
    const char *str;   /* PLANNER_STRING: NUL-terminated, in the answer's buffer */
} planner_field;

typedef struct {
    int n;
    planner_field f[PLANNER_MAX_FIELDS];
    char buf[PLANNER_OUT_MAX]; /* the decoded strings */
} planner_answer;

/* Parse text (len bytes, not NUL-terminated) as one answer: a JSON object
 * of at most PLANNER_MAX_FIELDS members, keys unique, values strings,
 * integers or true/false, optional blanks and one final newline. -1 with
 * where and what is wrong in e. */
int planner_parse(const char *text, size_t len, planner_answer *a, moe_err *e);

/* The field named key of the given type, or NULL. */
const planner_field *planner_get(const planner_answer *a, const char *key, planner_type type);

/* Run prog with argv (argv[0] included, NULL-terminated) as described above,
 * for at most timeout_s seconds, and parse its stdout. On success the
 * answer's "moekit_query" is PLANNER_ANSWER_VERSION and "ok" is present.
 * -1 with the reason in e ("/opt/moekit/bin/moe-train did not answer
 * within 30 s (killed)"). */
int planner_ask(const char *prog, char *const argv[], int timeout_s, planner_answer *a,
                moe_err *e);

/* Called once in slurmstepd before the tasks are forked (init_post_opt):
 * maps a small anonymous shared region that every task of the step on this
 * node inherits. planner_ask then asks each distinct question once per node
 * and step: the first task to ask runs the child, the others wait for its
 * answer (the same argv, byte for byte, gets the same answer) and fall back
 * to asking themselves if it dies or times out. Without it (submit
 * contexts, a failed mmap) each caller asks alone. Returns 0 or -1; never
 * fatal. planner_share_stats tells how many children this process ran and
 * how many answers it took from another task (tests). */
int planner_share_init(void);
void planner_share_stats(int *ran, int *shared);

#endif

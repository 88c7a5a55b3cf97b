/* A stand-in trainer for the Slurm tests: records how the plugin started it.
 *
 * The plugin execs the admin's trainer= binary; pointing trainer= at this
 * program shows exactly what a task received. It writes
 * $RECORD_LAUNCH_DIR/launch.<MOE_RANK> with one "argv[i]=..." line per
 * argument, then "env NAME=value" for the MOE_*, CUDA_* and SLURM_PROCID
 * variables, and its CPU affinity, and exits 0. Without RECORD_LAUNCH_DIR it
 * prints the same to stdout.
 *
 * The plugin also asks its trainer= questions (`query --config-facts`,
 * `query --plan-fit`, plugin/planner.h) before it starts it; this stand-in
 * hands those to the build's moe-train (RECORD_LAUNCH_TRAINER), which
 * answers them as the installed one would, and appends the question's kind
 * to RECORD_LAUNCH_QUERY_LOG. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "query") == 0) {
        /* one line a question, for the tests that count them (the child's
         * environment is the plugin's, so the file is compiled in) */
        FILE *log = fopen(RECORD_LAUNCH_QUERY_LOG, "a");
        if (log) {
            fprintf(log, "%s asked by %ld\n", argc > 2 ? argv[2] : "?", (long)getppid());
            fclose(log);
        }
        argv[0] = RECORD_LAUNCH_TRAINER;
        execv(RECORD_LAUNCH_TRAINER, argv);
        perror(RECORD_LAUNCH_TRAINER);
        return 127;
    }
    const char *dir = getenv("RECORD_LAUNCH_DIR");
    const char *rank = getenv("MOE_RANK");
    FILE *out = stdout;
    char path[4096];
    if (dir) {
        snprintf(path, sizeof path, "%s/launch.%s", dir, rank ? rank : "norank");
        out = fopen(path, "w");
        if (!out) {
            perror(path);
            return 1;
        }
    }
    for (int i = 0; i < argc; i++)
        fprintf(out, "argv[%d]=%s\n", i, argv[i]);
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "MOE_", 4) == 0 || strncmp(*e, "CUDA_", 5) == 0 ||
            strncmp(*e, "SLURM_PROCID=", 13) == 0 || strncmp(*e, "SLURM_SPANK_MOE_", 16) == 0)
            fprintf(out, "env %s\n", *e);
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
        fprintf(out, "cpus %d\n", CPU_COUNT(&cpus));
    if (out != stdout && fclose(out) != 0) {
        perror(path);
        return 1;
    }
    return 0;
}

/* Unit tests for plugin/job_size.c: GPUs and tasks a submission asks for. */
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "../../plugin/job_size.h"

/* Scan a NULL-terminated command line. */
static moe_job_size scan(char **argv)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    moe_job_size js;
    memset(&js, 0, sizeof js);
    job_size_scan_argv(&js, argc, argv);
    return js;
}

#define SCAN(...) scan((char *[]){__VA_ARGS__, NULL})

static void test_long_and_short_forms(void)
{
    moe_job_size js = SCAN("sbatch", "--gres=gpu:2", "--ntasks-per-node=2", "job.sbatch");
    CHECK(js.gpus_per_node == 2 && js.ntasks_per_node == 2);
    CHECK(strcmp(js.script, "job.sbatch") == 0);
    CHECK(job_size_total_gpus(&js) == 2 && job_size_total_tasks(&js) == 2);

    js = SCAN("sbatch", "-N", "4", "--gpus-per-node", "b200:8", "-n32", "-p", "gpu", "s.sh", "-n",
              "9");
    CHECK(js.nodes == 4 && js.gpus_per_node == 8 && js.ntasks == 32);
    CHECK(strcmp(js.script, "s.sh") == 0); /* the script's own arguments are not sbatch's */
    CHECK(job_size_total_gpus(&js) == 32 && job_size_total_tasks(&js) == 32);

    /* A cluster of flags ending in an option with its value attached. */
    js = SCAN("srun", "-vvn4", "-G", "h200:3,b200:1", "moe-train");
    CHECK(js.ntasks == 4 && js.gpus == 4);
    CHECK(js.script[0] == '\0'); /* srun has no batch script */
}

static void test_gres_forms(void)
{
    moe_job_size js = SCAN("sbatch", "--gres=gpu:b200:4", "x.sh");
    CHECK(js.gpus_per_node == 4);
    js = SCAN("sbatch", "--gres=nic:1,gres/gpu:h200:3", "x.sh");
    CHECK(js.gpus_per_node == 3);
    js = SCAN("sbatch", "--gres=gpu", "x.sh");
    CHECK(js.gpus_per_node == 1);
    js = SCAN("sbatch", "--gres=gpu:b200", "x.sh");
    CHECK(js.gpus_per_node == 1);
    /* a --gres without gpu asks for no GPU at all (-1: set, and zero) */
    js = SCAN("sbatch", "--gres=gpumem:4", "x.sh");
    CHECK(js.gpus_per_node == -1);
    js = SCAN("sbatch", "--gres=none", "x.sh");
    CHECK(js.gpus_per_node == -1);
    CHECK(job_size_total_gpus(&js) == 0);
}

static void test_operand_detection(void)
{
    /* Flags must not swallow the script; options with values must. */
    moe_job_size js = SCAN("sbatch", "--parsable", "--moe-check", "--exclusive", "--time", "10",
                           "--moe-config=L0_sanity", "run.sh");
    CHECK(strcmp(js.script, "run.sh") == 0);
    js = SCAN("sbatch", "--wrap", "hostname");
    CHECK(js.script[0] == '\0'); /* --wrap takes the next word: no script */
    js = SCAN("sbatch", "-Wv", "--", "after-dashes.sh");
    CHECK(strcmp(js.script, "after-dashes.sh") == 0);
    js = SCAN("sbatch", "-n");
    CHECK(js.ntasks == 0 && js.script[0] == '\0');
}

static void test_ranges_and_junk(void)
{
    moe_job_size js = SCAN("sbatch", "--nodes=2-4", "--ntasks-per-node=8", "x.sh");
    CHECK(js.nodes == 2 && job_size_total_tasks(&js) == 16);
    js = SCAN("sbatch", "--ntasks=many", "--gpus-per-task=2", "x.sh");
    CHECK(js.ntasks == 0 && js.gpus_per_task == 2);
    CHECK(job_size_total_tasks(&js) == 0 && job_size_total_gpus(&js) == 0);
    js = SCAN("sbatch", "-n", "4", "--gpus-per-task=2", "x.sh");
    CHECK(job_size_total_gpus(&js) == 8);
    js = SCAN("sbatch");
    CHECK(job_size_total_tasks(&js) == 0);
}

static void test_script_directives(void)
{
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f)
        return;
    fputs("#!/bin/bash\n"
          "# a comment\n"
          "#SBATCH --gres=gpu:2   # two GPUs\n"
          "\n"
          "#SBATCH --ntasks-per-node=2 --nodes 1\n"
          "#SBATCH--ntasks=99\n"
          "srun moe-train\n"
          "#SBATCH --gpus=7\n",
          f);
    rewind(f);
    moe_job_size js;
    memset(&js, 0, sizeof js);
    js.ntasks_per_node = 4; /* the command line wins */
    job_size_scan_script(&js, f);
    fclose(f);
    CHECK(js.gpus_per_node == 2);
    CHECK(js.ntasks_per_node == 4);
    CHECK(js.nodes == 1);
    CHECK(js.ntasks == 0); /* "#SBATCH--" is not a directive */
    CHECK(js.gpus == 0);   /* directives after the first command are ignored */
}

static void test_environment(void)
{
    char *env[] = {"PATH=/bin", "SLURM_NTASKS=4", "SLURM_GPUS_ON_NODE=2", "SLURM_NNODES=2",
                   "SBATCH_GPUS_PER_NODE=b200:8", "SLURM_NTASKS_PER_NODEX=9", NULL};
    moe_job_size js;
    memset(&js, 0, sizeof js);
    job_size_scan_env(&js, "SLURM_", env);
    CHECK(js.ntasks == 4 && js.gpus_per_node == 2 && js.nodes == 2);
    CHECK(js.ntasks_per_node == 0);
    CHECK(job_size_total_gpus(&js) == 4);

    memset(&js, 0, sizeof js);
    js.gpus_per_node = 1;
    job_size_scan_env(&js, "SBATCH_", env);
    CHECK(js.gpus_per_node == 1); /* already set by a stronger source */
    CHECK(js.ntasks == 0);
    job_size_scan_env(&js, "SBATCH_", NULL);
}

int main(void)
{
    RUN(test_long_and_short_forms);
    RUN(test_gres_forms);
    RUN(test_operand_detection);
    RUN(test_ranges_and_junk);
    RUN(test_script_directives);
    RUN(test_environment);
    return check_summary("test_plugin_job_size");
}

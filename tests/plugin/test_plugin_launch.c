/* Unit tests for plugin/launch.c and plugin/bind.c: the trainer's command
 * line and environment, the rendezvous, and the per-task GPU choice. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "../../plugin/bind.h"
#include "../../plugin/launch.h"

static int argv_count(char **v)
{
    int n = 0;
    while (v && v[n])
        n++;
    return n;
}

static int env_count(char **env, const char *name)
{
    size_t len = strlen(name);
    int n = 0;
    for (char **p = env; p && *p; p++)
        n += strncmp(*p, name, len) == 0 && (*p)[len] == '=';
    return n;
}

static moe_verdict gpu_verdict(void)
{
    moe_verdict v;
    memset(&v, 0, sizeof v);
    v.kind = MOE_VERDICT_RUN;
    v.precision = MOE_PREC_MXFP8;
    v.ep = 2;
    v.dp = 4;
    return v;
}

static moe_task_place place(void)
{
    moe_task_place p = {.rank = 3, .world_size = 8, .local_rank = 1, .local_world_size = 4,
                        .job_id = 1234, .step_id = 0};
    snprintf(p.master_addr, sizeof p.master_addr, "node01");
    return p;
}

static void test_argv_contract(void)
{
    moe_verdict v = gpu_verdict();
    moe_task_place p = place();
    char *items[] = {"train.steps=20", "checkpoint.ckpt_dir=/tmp/c d"};
    char *env[] = {"PATH=/usr/bin", NULL};
    moe_launch l;
    moe_err e;
    CHECK(launch_build(&l, &v, "/etc/moekit/configs/L0_sanity.cfg", "/srv/genomes", items, 2, &p, env, NULL, &e) ==
          0);
    const char *want[] = {"moe-train",       "--config",      "/etc/moekit/configs/L0_sanity.cfg",
                          "precision.compute=mxfp8", "parallel.ep=2", "parallel.dp=4",
                          "train.steps=20",  "checkpoint.ckpt_dir=/tmp/c d",
                          "precision.strict=true"};
    int n = argv_count(l.argv);
    CHECK(n == 9);
    for (int i = 0; i < n && i < 9; i++)
        CHECK_MSG(strcmp(l.argv[i], want[i]) == 0, "argv[%d] = '%s', want '%s'", i, l.argv[i],
                  want[i]);
    launch_free(&l);
    CHECK(l.argv == NULL && l.envp == NULL);

    /* CPU-only: --backend cpu right after the config. */
    v.cpu_only = 1;
    v.precision = MOE_PREC_FP32;
    CHECK(launch_build(&l, &v, "c.cfg", NULL, NULL, 0, &p, env, NULL, &e) == 0);
    CHECK(argv_count(l.argv) == 9);
    CHECK(strcmp(l.argv[3], "--backend") == 0 && strcmp(l.argv[4], "cpu") == 0);
    CHECK(strcmp(l.argv[5], "precision.compute=fp32") == 0);
    launch_free(&l);

    /* fp8_block, which the site allowed: a config's precision.allow_fp8_block=false must not
     * make moe-train refuse it; the user's precision.strict=false must not make it decide
     * again: the plugin's strict comes last */
    v = gpu_verdict();
    v.precision = MOE_PREC_FP8_BLOCK;
    char *loose[] = {"precision.strict=false"};
    CHECK(launch_build(&l, &v, "c.cfg", NULL, loose, 1, &p, env, NULL, &e) == 0);
    CHECK(argv_count(l.argv) == 9);
    CHECK(strcmp(l.argv[3], "precision.compute=fp8_block") == 0);
    CHECK(strcmp(l.argv[4], "precision.allow_fp8_block=true") == 0);
    CHECK(strcmp(l.argv[7], "precision.strict=false") == 0);
    CHECK(strcmp(l.argv[8], "precision.strict=true") == 0);
    launch_free(&l);
}

static void test_environment(void)
{
    moe_verdict v = gpu_verdict();
    moe_task_place p = place();
    /* The user's own MOE_* values must not reach the trainer. */
    char *env[] = {"PATH=/usr/bin", "MOE_PRECISION=fp8_block", "MOE_EP=64", "MOE_BACKDOOR=1",
                   "CUDA_VISIBLE_DEVICES=2,3", "CUDA_DEVICE_ORDER=FASTEST_FIRST",
                   "SLURM_SPANK_MOE_CONFIG=L0_sanity", NULL};
    moe_launch l;
    moe_err e;
    CHECK(launch_build(&l, &v, "/c/L0.cfg", NULL, NULL, 0, &p, env, NULL, &e) == 0);
    CHECK(strcmp(launch_getenv(l.envp, "PATH"), "/usr/bin") == 0);
    CHECK(strcmp(launch_getenv(l.envp, "MOE_PRECISION"), "mxfp8") == 0);
    CHECK(env_count(l.envp, "MOE_PRECISION") == 1);
    CHECK(env_count(l.envp, "MOE_EP") == 0); /* parallel.ep on the command line says it */
    CHECK(strcmp(launch_getenv(l.envp, "MOE_DP"), "4") == 0);
    CHECK(strcmp(launch_getenv(l.envp, "MOE_CONFIG"), "/c/L0.cfg") == 0);
    CHECK(strcmp(launch_getenv(l.envp, "MOE_RANK"), "3") == 0);
    CHECK(strcmp(launch_getenv(l.envp, "MOE_WORLD_SIZE"), "8") == 0);
    CHECK(strcmp(launch_getenv(l.envp, "MOE_LOCAL_RANK"), "1") == 0);
    CHECK(strcmp(launch_getenv(l.envp, "MOE_LOCAL_WORLD_SIZE"), "4") == 0);
    CHECK(strcmp(launch_getenv(l.envp, "MOE_MASTER_ADDR"), "node01") == 0);
    char port[16];
    snprintf(port, sizeof port, "%d", launch_master_port(1234, 0));
    CHECK(strcmp(launch_getenv(l.envp, "MOE_MASTER_PORT"), port) == 0);
    CHECK(launch_getenv(l.envp, "MOE_BACKDOOR") == NULL);
    CHECK(launch_getenv(l.envp, "MOE_DATA_DIR") == NULL);
    CHECK(launch_getenv(l.envp, "MOE_CHECK_ONLY") == NULL);
    CHECK(strcmp(launch_getenv(l.envp, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID") == 0);
    CHECK(env_count(l.envp, "CUDA_DEVICE_ORDER") == 1);
    CHECK(strcmp(launch_getenv(l.envp, "CUDA_VISIBLE_DEVICES"), "2,3") == 0);
    CHECK(strcmp(launch_getenv(l.envp, "SLURM_SPANK_MOE_CONFIG"), "L0_sanity") == 0);
    launch_free(&l);

    /* data= reaches the trainer as MOE_DATA_DIR, and a job's own is dropped. */
    char *env_data[] = {"MOE_DATA_DIR=/home/u/other", NULL};
    CHECK(launch_build(&l, &v, "/c/L0.cfg", "/srv/genomes", NULL, 0, &p, env_data, NULL, &e) == 0);
    CHECK(strcmp(launch_getenv(l.envp, "MOE_DATA_DIR"), "/srv/genomes") == 0);
    CHECK(env_count(l.envp, "MOE_DATA_DIR") == 1);
    launch_free(&l);

    /* Binding narrows CUDA_VISIBLE_DEVICES to the task's GPU. */
    CHECK(launch_build(&l, &v, "/c/L0.cfg", NULL, NULL, 0, &p, env, "3", &e) == 0);
    CHECK(strcmp(launch_getenv(l.envp, "CUDA_VISIBLE_DEVICES"), "3") == 0);
    CHECK(env_count(l.envp, "CUDA_VISIBLE_DEVICES") == 1);
    launch_free(&l);

    CHECK(launch_getenv(NULL, "PATH") == NULL);
    char *tricky[] = {"PATHX=1", "PATH", NULL};
    CHECK(launch_getenv(tricky, "PATH") == NULL);
}

static void test_first_host(void)
{
    char h[64];
    moe_err e;
    CHECK(launch_first_host("vm", h, sizeof h, &e) == 0 && strcmp(h, "vm") == 0);
    CHECK(launch_first_host("node[03-05,9],gpu7", h, sizeof h, &e) == 0);
    CHECK(strcmp(h, "node03") == 0);
    CHECK(launch_first_host("a,b", h, sizeof h, &e) == 0 && strcmp(h, "a") == 0);
    CHECK(launch_first_host("rack[2-3]-n[007-009]", h, sizeof h, &e) == 0);
    CHECK_MSG(strcmp(h, "rack2-n007") == 0, "%s", h);
    CHECK(launch_first_host("", h, sizeof h, &e) == -1 && strstr(e.msg, "empty"));
    CHECK(launch_first_host(NULL, h, sizeof h, &e) == -1);
    CHECK(launch_first_host("node[", h, sizeof h, &e) == -1 && strstr(e.msg, "not followed"));
    CHECK(launch_first_host("node[1-2", h, sizeof h, &e) == -1 && strstr(e.msg, "without ']'"));
    CHECK(launch_first_host(",a", h, sizeof h, &e) == -1 && strstr(e.msg, "empty name"));
    char tiny[4];
    CHECK(launch_first_host("longname", tiny, sizeof tiny, &e) == -1 && strstr(e.msg, "too long"));
}

static void test_master_port(void)
{
    for (unsigned job = 0; job < 5000; job += 7) {
        for (unsigned step = 0; step < 20; step++) {
            int p = launch_master_port(job, step);
            CHECK(p >= 20000 && p < 32000);
        }
    }
    CHECK(launch_master_port(42, 1) == launch_master_port(42, 1));
    CHECK(launch_master_port(42, 0) != launch_master_port(42, 1));
    CHECK(launch_master_port(42, 0) != launch_master_port(43, 0));
    CHECK(launch_master_port(4294967295u, 4294967294u) >= 20000);
}

static void test_pick_gpu(void)
{
    CHECK(bind_pick_gpu(2, 0, 2) == 0);
    CHECK(bind_pick_gpu(2, 1, 2) == 1);
    CHECK(bind_pick_gpu(8, 5, 8) == 5);
    CHECK(bind_pick_gpu(2, 3, 4) == 1); /* more tasks than GPUs: round the list */
    CHECK(bind_pick_gpu(1, 0, 2) == -1);
    CHECK(bind_pick_gpu(8, 0, 1) == -1);
    CHECK(bind_pick_gpu(0, 0, 2) == -1);

    char out[16];
    moe_err e;
    CHECK(bind_list_count("2,3,5") == 3 && bind_list_count("") == 0 && bind_list_count(NULL) == 0);
    CHECK(bind_list_entry("2,3,5", 1, out, sizeof out, &e) == 0 && strcmp(out, "3") == 0);
    CHECK(bind_list_entry("2,3,5", 2, out, sizeof out, &e) == 0 && strcmp(out, "5") == 0);
    CHECK(bind_list_entry("2,3,5", 3, out, sizeof out, &e) == -1 && strstr(e.msg, "no entry 3"));
    CHECK(bind_list_entry("GPU-aaaa,GPU-b", 0, out, 4, &e) == -1 && strstr(e.msg, "too long"));
}

static void test_cpu_lists(void)
{
    cpu_set_t s;
    moe_err e;
    CHECK(bind_parse_cpus("0-3,8,10-11", &s, &e) == 0);
    CHECK(CPU_COUNT(&s) == 7 && CPU_ISSET(8, &s) && !CPU_ISSET(4, &s) && CPU_ISSET(11, &s));
    CHECK(bind_parse_cpus("", &s, &e) == -1);
    CHECK(bind_parse_cpus("3-1", &s, &e) == -1 && strstr(e.msg, "bad range"));
    CHECK(bind_parse_cpus("1,x", &s, &e) == -1 && strstr(e.msg, "expected a number"));
    CHECK(bind_parse_cpus("1;2", &s, &e) == -1 && strstr(e.msg, "unexpected"));
    CHECK(bind_parse_cpus("99999", &s, &e) == -1 && strstr(e.msg, "beyond"));
}

static void test_bind_apply(void)
{
    cpu_set_t before, after;
    CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &before))
            first = c;
    char list[16], note[512] = "";
    snprintf(list, sizeof list, "%d", first);
    bind_apply(list, -1, note, sizeof note);
    CHECK(sched_getaffinity(0, sizeof after, &after) == 0);
    CHECK(CPU_COUNT(&after) == 1 && CPU_ISSET(first, &after));
    CHECK_MSG(strstr(note, "Bound to 1 CPU") && strstr(note, "NUMA node is unknown"), "%s", note);

    /* CPUs outside what the task may use are left alone, with a note. */
    note[0] = '\0';
    bind_apply("1000-1010", -1, note, sizeof note);
    CHECK_MSG(strstr(note, "are none of the"), "%s", note);
    CHECK(sched_getaffinity(0, sizeof after, &after) == 0 && CPU_COUNT(&after) == 1);
    note[0] = '\0';
    bind_apply("", -1, note, sizeof note);
    CHECK(strstr(note, "local CPUs are unknown") != NULL);
    note[0] = '\0';
    bind_apply(NULL, 100000, note, sizeof note);
    CHECK_MSG(strstr(note, "NUMA node 100000"), "%s", note);
    sched_setaffinity(0, sizeof before, &before);
}

int main(void)
{
    RUN(test_argv_contract);
    RUN(test_environment);
    RUN(test_first_host);
    RUN(test_master_port);
    RUN(test_pick_gpu);
    RUN(test_cpu_lists);
    RUN(test_bind_apply);
    return check_summary("test_plugin_launch");
}

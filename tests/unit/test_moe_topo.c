/* Unit tests: the moe-topo CLI, run as a user runs it (popen), on the
 * fixture nodes: the table, --json (checked by a strict JSON parser here,
 * and by python3 -m json.tool where python3 exists), --check exit codes,
 * usage errors. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../../common/exit_codes.h"
#include "../../common/version.h"
#include "../check.h"

#ifndef MOE_TOPO_BIN
#error "MOE_TOPO_BIN must name the moe-topo binary"
#endif
#ifndef TOPO_FIXTURES
#error "TOPO_FIXTURES must name tests/fixtures/topo"
#endif

static char out[1 << 18];

/* Run moe-topo with `args` (and an environment prefix); stdout into out,
 * stderr too when `merge`. Returns the exit status, or -1. */
static int run_env(const char *env, const char *args, int merge)
{
    char cmd[8192];
    /* Start from a clean slate: no Slurm or CUDA variables of the caller. */
    snprintf(cmd, sizeof cmd,
             "env -u SLURM_STEP_GPUS -u SLURM_JOB_GPUS -u CUDA_VISIBLE_DEVICES "
             "-u SLURM_STEP_NUM_TASKS -u SLURM_NTASKS -u SLURM_STEP_NUM_NODES -u SLURM_NNODES "
             "-u HWLOC_XMLFILE -u HWLOC_THISSYSTEM %s %s %s %s",
             env ? env : "", MOE_TOPO_BIN, args, merge ? "2>&1" : "2>/dev/null");
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run(const char *args) { return run_env(NULL, args, 0); }

#define HAS(s) CHECK_MSG(strstr(out, (s)) != NULL, "no \"%s\" in:\n%s", (s), out)

/* A strict JSON syntax check (RFC 8259), enough to know the output parses. */
static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *value(const char *p, int depth);

static const char *string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    while (*p != '"') {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)p[i]))
                        return NULL;
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p) || !*p) {
                return NULL;
            }
        }
        p++;
    }
    return p + 1;
}

static const char *number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (isdigit((unsigned char)*p))
        while (isdigit((unsigned char)*p))
            p++;
    else
        return NULL;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return NULL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    return p;
}

static const char *members(const char *p, char close, int depth, int keyed)
{
    p = ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (keyed) {
            if (!(p = string(ws(p))))
                return NULL;
            p = ws(p);
            if (*p++ != ':')
                return NULL;
        }
        if (!(p = value(p, depth + 1)))
            return NULL;
        p = ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *value(const char *p, int depth)
{
    if (depth > 32)
        return NULL;
    p = ws(p);
    switch (*p) {
    case '{': return members(p, '}', depth, 1);
    case '[': return members(p, ']', depth, 0);
    case '"': return string(p);
    case 't': return strncmp(p, "true", 4) ? NULL : p + 4;
    case 'f': return strncmp(p, "false", 5) ? NULL : p + 5;
    case 'n': return strncmp(p, "null", 4) ? NULL : p + 4;
    default: return number(p);
    }
}

static int valid_json(const char *s)
{
    const char *end = value(s, 0);
    return end && *ws(end) == '\0';
}

static void test_json_checker_can_fail(void)
{
    CHECK(valid_json("{\"a\": [1, 2.5, -3, true, null, \"x\\n\"]}"));
    CHECK(!valid_json("{\"a\": [1, 2,]}"));
    CHECK(!valid_json("{\"a\" 1}"));
    CHECK(!valid_json("{\"a\": 01}"));
    CHECK(!valid_json("{\"a\": \"tab\there\"}"));
    CHECK(!valid_json("{} {}"));
    CHECK(!valid_json("{\"a\": nul}"));
}

/* python3 -m json.tool, where python3 exists, as a second opinion. */
static void python_agrees(const char *args)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0)
        return;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null | python3 -m json.tool >/dev/null 2>&1",
             MOE_TOPO_BIN, args);
    CHECK_MSG(system(cmd) == 0, "python3 -m json.tool rejects: moe-topo %s", args);
}

#define FIX(name) "--xml " TOPO_FIXTURES "/" name

static void test_table(void)
{
    CHECK(run(FIX("b200x8.xml")) == 0);
    HAS("node b200-node (xml ");
    HAS("2 sockets, 32 cores, 64 PUs, 2 NUMA nodes, CPUs 0-63");
    HAS("8 NVIDIA GPUs, in CUDA order (CUDA_DEVICE_ORDER=PCI_BUS_ID)");
    HAS("GPU  PCI bus id");
    HAS("NVLink peers");
    /* One row, its columns in order. */
    const char *start = strstr(out, "\n4 ");
    char line[512] = "";
    if (start) {
        const char *end = strchr(start + 1, '\n');
        snprintf(line, sizeof line, "%.*s", end ? (int)(end - start - 1) : 0, start + 1);
    }
    const char *cols[] = {"4 ", "0000:9d:00.0", "NVIDIA B200", "sm_100", "179 GiB", " 1 ",
                          "16-31,48-63", "0-3,5-7", "xml-info"};
    const char *at = line;
    for (int i = 0; i < 9; i++) {
        const char *next = strstr(at, cols[i]);
        CHECK_MSG(next != NULL, "column \"%s\" missing or out of order in: %s", cols[i], line);
        if (next)
            at = next + strlen(cols[i]);
    }
    CHECK(run(FIX("h200x8.xml")) == 0);
    HAS("NVIDIA H200");
    HAS("sm_90");
    HAS("pci-id table (model, cc, memory), xml-info (nvlink)");
    CHECK(run(FIX("mixed-h100-l40s.xml")) == 0);
    HAS("NVIDIA H100 NVL");
    HAS("NVIDIA L40S");
    CHECK(run(FIX("rtx4090x4.xml")) == 0);
    HAS("NVIDIA GeForce RTX 4090");
    HAS("sm_89");
    CHECK(run(FIX("unknown-gpu.xml")) == 0);
    HAS("? [10de:2bff]");
    HAS("sm_??");
    HAS("unknown");
    CHECK(run(FIX("cpu-only.xml")) == 0);
    HAS("no NVIDIA GPUs");
    HAS("NVML not queried");
}

static void test_json(void)
{
    const char *fixtures[] = {"b200x8.xml", "h200x8.xml", "mixed-h100-l40s.xml",
                              "rtx4090x4.xml", "unknown-gpu.xml", "cpu-only.xml",
                              "base-vm.xml"};
    for (int i = 0; i < 7; i++) {
        char args[1024];
        snprintf(args, sizeof args, "--json --xml %s/%s", TOPO_FIXTURES, fixtures[i]);
        CHECK(run(args) == 0);
        CHECK_MSG(valid_json(out), "%s: invalid JSON:\n%s", fixtures[i], out);
        python_agrees(args);
    }
    CHECK(run("--json " FIX("b200x8.xml")) == 0);
    HAS("\"hostname\": \"b200-node\"");
    HAS("\"pci_bus_id\": \"0000:1b:00.0\"");
    HAS("\"compute_capability\": \"10.0\"");
    HAS("\"sm\": \"sm_100\"");
    HAS("\"arch\": \"Blackwell\"");
    HAS("\"memory_bytes\": 192265846784");
    HAS("\"numa_node\": 1");
    HAS("\"cpus\": \"16-31,48-63\"");
    HAS("\"nvlink_peers\": [0, 1, 2, 3, 4, 5, 6]");
    HAS("\"sources\": {\"model\": \"xml-info\"");
    CHECK(run("--json " FIX("unknown-gpu.xml")) == 0);
    HAS("\"compute_capability\": null");
    HAS("\"nvlink_peers\": null");
    HAS("\"model\": \"unknown\"");
    CHECK(run("--json " FIX("cpu-only.xml")) == 0);
    HAS("\"gpus\": []");
}

static void test_check_exit_codes(void)
{
    CHECK(run("--check --ep 8 " FIX("b200x8.xml")) == 0);
    HAS("moekit: this step has 8x NVIDIA B200 (sm_100, Blackwell).");
    HAS("Running EP=8 x DP=1 on 8 GPUs.");
    CHECK(run("--check --ep 2 --gpus 0,1 " FIX("h200x8.xml")) == 0);
    HAS("moekit: this step has 2x NVIDIA H200 (sm_90, Hopper). MXFP8 needs");
    HAS("falls back to BF16 (policy on_non_blackwell=bf16). Running EP=2 x DP=1 on 2 GPUs.");
    CHECK(run("--check --ep 2 --policy \"on_non_blackwell=reject\" " FIX("h200x8.xml")) ==
          MOE_EXIT_REFUSED);
    HAS("moekit: refusing this job:");
    CHECK(run("--check --ep 2 --precision fp8_block --policy \"allow_fp8_block=yes\" "
              FIX("h200x8.xml")) == 0);
    HAS("trains in FP8 with block scaling");
    CHECK(run("--check --ep 3 " FIX("b200x8.xml")) == MOE_EXIT_REFUSED);
    CHECK(run("--check --ep 4 --experts 6 " FIX("b200x8.xml")) == MOE_EXIT_REFUSED);
    HAS("1, 2.");
    CHECK(run("--check --ep 4 --dp 2 --ntasks 8 --experts 8 " FIX("b200x8.xml")) == 0);
    CHECK(run("--check --ep 8 --ntasks 4 " FIX("b200x8.xml")) == MOE_EXIT_REFUSED);
    CHECK(run("--check --ep 8 --nodes 2 --ntasks 16 " FIX("b200x8.xml")) == 0);
    HAS("(2 nodes x 8)");
    /* 536870913 x 8 wraps a 32-bit int to 8: refused by name, not "on 8 GPUs". */
    CHECK(run("--check --ep 8 --nodes 536870913 " FIX("b200x8.xml")) == MOE_EXIT_REFUSED);
    HAS("536870913 nodes of 8 GPUs is 4294967304 GPUs");
    CHECK(run("--check " FIX("cpu-only.xml")) == MOE_EXIT_REFUSED);

    HAS("allow_cpu=no");
    CHECK(run("--check --ep 2 --ntasks 2 --policy allow_cpu=yes " FIX("cpu-only.xml")) == 0);
    HAS("FP32 CPU backend");
    /* topology_xml= in the policy is read, as the plugin would. */
    CHECK(run("--check --ep 8 --policy topology_xml=" TOPO_FIXTURES "/b200x8.xml") == 0);
    HAS("8x NVIDIA B200");
}

/* --config: the run's memory plan against the step's GPUs; refused or warned by policy */
static void test_check_memory_plan(void)
{
    const char *pol = "--policy \"configs=" MOE_CONFIGS " allow_fp8_block=yes";
    char args[1024];
    snprintf(args, sizeof args, "--check --ep 8 --config L1_8x7B_ep %s\" %s", pol,
             FIX("b200x8.xml"));
    CHECK(run(args) == 0);
    HAS("memory: L1_8x7B_ep fits the 179 GiB GPUs (the card's total) at EP=8 x DP=1");
    /* the distributed optimizer's shards fit EP=8 x DP=1 in an H200's 141 GB */
    snprintf(args, sizeof args, "--check --ep 8 --config L1_8x7B_ep %s\" %s", pol,
             FIX("h200x8.xml"));
    CHECK(run(args) == 0);
    HAS("memory: L1_8x7B_ep fits");
    /* EP=4 on four 94 GiB H100 NVL: the experts' state of two experts a rank does not */
    snprintf(args, sizeof args,
             "--check --ep 4 --gpus 0-3 --config L1_8x7B_ep %s refuse_memory_short=yes\" %s", pol,
             FIX("mixed-h100-l40s.xml"));
    CHECK(run(args) == 3);
    HAS("memory: refused: L1_8x7B_ep at EP=4 x DP=1 needs");
    HAS("EP=4 x DP=8 (32 GPUs)");
    snprintf(args, sizeof args, "--check --ep 4 --gpus 0-3 --config L1_8x7B_ep %s\" %s", pol,
             FIX("mixed-h100-l40s.xml"));
    CHECK(run(args) == 0);
    HAS("memory: warning: L1_8x7B_ep");
    snprintf(args, sizeof args, "--check --ep 8 --config no_such_config %s\" %s", pol,
             FIX("b200x8.xml"));
    CHECK(run(args) == 2);
    /* where the driver says what is free, the tightest GPU decides: EP=8 x DP=2 on
     * H100 80GB fits 79.1 GiB free, not GPU 5's 49.1 (another job holds 30 GiB) */
    snprintf(args, sizeof args,
             "--check --ep 8 --nodes 2 --config L1_8x7B_ep %s refuse_memory_short=yes\" %s", pol,
             FIX("h100x8-free.xml"));
    CHECK(run(args) == 3);
    HAS("memory: refused: L1_8x7B_ep at EP=8 x DP=2 needs");
    HAS("but GPU 5 has free 49.1 GiB");
    HAS("NCCL buffers");
}

static void test_check_reads_slurm_environment(void)
{
    CHECK(run_env("SLURM_STEP_GPUS=4-7 SLURM_STEP_NUM_TASKS=4", "--check --ep 4 "
                  FIX("mixed-h100-l40s.xml"), 0) == 0);
    HAS("4x NVIDIA L40S");
    HAS("Running EP=4 x DP=1 on 4 GPUs.");
    CHECK(run_env("SLURM_JOB_GPUS=0,1 SLURM_NTASKS=1", "--check --ep 2 "
                  FIX("mixed-h100-l40s.xml"), 0) == MOE_EXIT_REFUSED);
    HAS("runs 1 tasks on its 2 GPUs");
    /* --gpus wins over the environment. */
    CHECK(run_env("SLURM_STEP_GPUS=4-7", "--check --gpus 0-1 --ep 2 " FIX("mixed-h100-l40s.xml"),
                  0) == 0);
    HAS("2x NVIDIA H100 NVL");
    CHECK(run_env("CUDA_VISIBLE_DEVICES=9", "--check " FIX("mixed-h100-l40s.xml"), 1) == 1);
    HAS("CUDA_VISIBLE_DEVICES=\"9\" names GPU 9");
    CHECK(run_env("HWLOC_XMLFILE=" TOPO_FIXTURES "/rtx4090x4.xml", "", 0) == 0);
    HAS("RTX 4090");
    HAS("(HWLOC_XMLFILE)");
}

static void test_check_json(void)
{
    const char *args = "--check --json --ep 2 --gpus 0,1 " FIX("h200x8.xml");
    CHECK(run(args) == 0);
    CHECK_MSG(valid_json(out), "invalid JSON:\n%s", out);
    python_agrees(args);
    HAS("\"step\": {\"gpus\": [0, 1], \"from\": \"--gpus\"");
    HAS("\"verdict\": {\"kind\": \"run\", \"precision\": \"bf16\", \"ep\": 2, \"dp\": 1");
    HAS("\"policy\": \"trainer=");
    args = "--check --json --ep 3 " FIX("b200x8.xml");
    CHECK(run(args) == MOE_EXIT_REFUSED);
    CHECK_MSG(valid_json(out), "invalid JSON:\n%s", out);
    HAS("\"kind\": \"refuse\", \"precision\": null");
}

static void test_usage_errors(void)
{
    CHECK(run("--help") == 0);
    HAS("Usage: moe-topo");
    HAS("--check");
    CHECK(run("--version") == 0);
    HAS("moe-topo (moekit) " MOEKIT_VERSION);
    struct {
        const char *args, *msg;
        int status; /* usage: the command line; failure: what it names cannot be used */
    } bad[] = {
        {"--bogus", "unknown option --bogus", MOE_EXIT_USAGE},
        {"--check --ep", "option --ep needs a value", MOE_EXIT_USAGE},
        {"--check --ep 0", "--ep \"0\": expected a positive integer", MOE_EXIT_USAGE},
        {"--check --dp x", "--dp \"x\": expected a positive integer", MOE_EXIT_USAGE},
        {"--check --precision fp16", "--precision \"fp16\": expected auto, bf16, fp8_block or mxfp8",
         MOE_EXIT_USAGE},
        {"--ep 2", "only apply with --check", MOE_EXIT_USAGE},
        {"--gpus 0", "only apply with --check", MOE_EXIT_USAGE},
        {"extra", "unexpected argument \"extra\"", MOE_EXIT_USAGE},
        {"--xml /nonexistent.xml", "topology XML /nonexistent.xml: No such file",
         MOE_EXIT_FAILURE},
        {"--check --policy allow_cpu=maybe", "--policy: plugstack.conf argument 1 "
                                             "\"allow_cpu=maybe\": allow_cpu must be yes or no",
         MOE_EXIT_USAGE},
        {"--check --policy topology_xml=rel.xml", "must be an absolute path", MOE_EXIT_USAGE},
        {"--check --gpus 0,9 " FIX("b200x8.xml"), "--gpus=\"0,9\" names GPU 9", MOE_EXIT_FAILURE},
        {"--check --gpus 1-0 " FIX("b200x8.xml"), "runs backwards", MOE_EXIT_FAILURE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run_env(NULL, bad[i].args, 1);
        CHECK_MSG(rc == bad[i].status, "moe-topo %s: exit %d, want %d", bad[i].args, rc,
                  bad[i].status);
        CHECK_MSG(strstr(out, bad[i].msg), "moe-topo %s: want \"%s\" in: %s", bad[i].args,
                  bad[i].msg, out);
    }
}

/* valgrind memcheck on a fixture: no invalid access, nothing definitely
 * lost (hwloc keeps a few blocks reachable, which is fine). Not under
 * AddressSanitizer, which valgrind cannot run. */
static void test_valgrind_clean(void)
{
#ifndef __SANITIZE_ADDRESS__
    if (system("command -v valgrind >/dev/null 2>&1") != 0) {
        fprintf(stderr, "  (valgrind not installed: skipped)\n");
        return;
    }
    const char *runs[] = {FIX("b200x8.xml"), "--check --json --ep 2 --gpus 0,1 "
                                             FIX("h200x8.xml")};
    for (int i = 0; i < 2; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd,
                 "valgrind -q --error-exitcode=99 --leak-check=full "
                 "--errors-for-leak-kinds=definite %s %s >/dev/null 2>&1",
                 MOE_TOPO_BIN, runs[i]);
        int st = system(cmd);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) != 99, "valgrind reports errors: %s", cmd);
    }
#endif
}

int main(void)
{
    RUN(test_json_checker_can_fail);
    RUN(test_table);
    RUN(test_json);
    RUN(test_check_exit_codes);
    RUN(test_check_memory_plan);
    RUN(test_check_reads_slurm_environment);
    RUN(test_check_json);
    RUN(test_usage_errors);
    RUN(test_valgrind_clean);
    return check_summary("moe_topo");
}

/* Unit tests: topo/ discovery of every fixture node, PCI bus ids, GPU index
 * lists, and the mapping of Slurm's and CUDA's GPU names to the node's GPUs. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../topo/step.h"
#include "../../topo/topo.h"
#include "../check.h"

#ifndef TOPO_FIXTURES
#error "TOPO_FIXTURES must name tests/fixtures/topo"
#endif

static moe_topo *t; /* large: one, reused */

static const char *fixture(const char *name)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", TOPO_FIXTURES, name);
    return path;
}

static int load(const char *name)
{
    moe_err e = {{0}};
    int rc = topo_load(t, fixture(name), 0, &e);
    CHECK_MSG(rc == 0, "%s: %s", name, e.msg);
    return rc;
}

/* Every GPU of a fixture with the same facts. */
static void check_all(const char *model, int major, int minor, unsigned long long mib,
                      topo_source src_model, topo_source src_cc, topo_source src_mem)
{
    for (int i = 0; i < t->n_gpus; i++) {
        const moe_topo_gpu *g = &t->gpus[i];
        CHECK_MSG(strcmp(g->model, model) == 0, "GPU %d: %s", i, g->model);
        CHECK(g->cc_major == major && g->cc_minor == minor);
        CHECK_MSG(g->memory_bytes == mib << 20, "GPU %d: %llu", i, g->memory_bytes);
        CHECK(g->model_src == src_model);
        CHECK(g->cc_src == src_cc);
        CHECK(g->memory_src == src_mem);
        CHECK(g->vendor_id == 0x10de);
        CHECK(g->index == i && g->minor == i);
    }
}

static void check_sorted(void)
{
    for (int i = 1; i < t->n_gpus; i++)
        CHECK_MSG(strcmp(t->gpus[i - 1].pci_bus_id, t->gpus[i].pci_bus_id) < 0, "%s !< %s",
                  t->gpus[i - 1].pci_bus_id, t->gpus[i].pci_bus_id);
}

static void test_b200_node(void)
{
    if (load("b200x8.xml"))
        return;
    CHECK(strcmp(t->hostname, "b200-node") == 0);
    CHECK(strncmp(t->origin, "xml ", 4) == 0 && strstr(t->origin, "b200x8.xml"));
    CHECK(t->n_packages == 2 && t->n_cores == 32 && t->n_pus == 64 && t->n_numa == 2);
    CHECK(strcmp(t->cpus, "0-63") == 0);
    CHECK(!t->this_system && !t->nvml_used);
    CHECK_MSG(strstr(t->nvml_note, "not this machine's"), "%s", t->nvml_note);
    CHECK(t->n_gpus == 8); /* the two ConnectX-7 NICs are not GPUs */
    check_all("NVIDIA B200", 10, 0, 183359, TOPO_SRC_XML_INFO, TOPO_SRC_XML_INFO,
              TOPO_SRC_XML_INFO);
    check_sorted();
    static const char *bus[8] = {"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0",
                                 "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0",
                                 "0000:d1:00.0", "0000:df:00.0"};
    for (int i = 0; i < 8; i++) {
        const moe_topo_gpu *g = &t->gpus[i];
        CHECK_MSG(strcmp(g->pci_bus_id, bus[i]) == 0, "GPU %d at %s", i, g->pci_bus_id);
        CHECK(g->device_id == 0x2901 && g->class_id == 0x0302);
        /* Four GPUs per socket; socket 0 owns the first thread of cores
         * 0-15 and their SMT siblings 32-47. */
        CHECK(g->numa_node == (i < 4 ? 0 : 1));
        CHECK_MSG(strcmp(g->cpus, i < 4 ? "0-15,32-47" : "16-31,48-63") == 0, "%s", g->cpus);
        /* NVSwitch: every other GPU is a peer. */
        CHECK(g->nvlink_src == TOPO_SRC_XML_INFO);
        CHECK(g->n_peers == 7);
        for (int p = 0, want = 0; p < g->n_peers; p++, want++) {
            if (want == i)
                want++;
            CHECK(g->peers[p] == want);
        }
        CHECK(strncmp(g->uuid, "GPU-", 4) == 0 && g->uuid_src == TOPO_SRC_XML_INFO);
    }
    CHECK(topo_gpu_by_busid(t, "00000000:C3:00.0") == 5); /* NVML's spelling */
    CHECK(topo_gpu_by_busid(t, "0000:13:00.0") == -1);    /* the NIC */
    CHECK(topo_gpu_by_busid(t, "junk") == -1);
}

static void test_h200_node_uses_the_pci_table(void)
{
    if (load("h200x8.xml"))
        return;
    CHECK(t->n_packages == 2 && t->n_cores == 48 && t->n_pus == 96);
    CHECK(t->n_gpus == 8); /* the NVSwitch (NVIDIA, bridge class) is not a GPU */
    check_all("NVIDIA H200", 9, 0, 143771, TOPO_SRC_PCI_TABLE, TOPO_SRC_PCI_TABLE,
              TOPO_SRC_PCI_TABLE);
    CHECK(strcmp(t->gpus[0].cpus, "0-23,48-71") == 0);
    CHECK(strcmp(t->gpus[7].cpus, "24-47,72-95") == 0);
    for (int i = 0; i < 8; i++) {
        CHECK(t->gpus[i].n_peers == 7 && t->gpus[i].nvlink_src == TOPO_SRC_XML_INFO);
        CHECK(t->gpus[i].uuid[0] == '\0' && t->gpus[i].uuid_src == TOPO_SRC_UNKNOWN);
    }
}

static void test_mixed_node(void)
{
    if (load("mixed-h100-l40s.xml"))
        return;
    CHECK(t->n_gpus == 8);
    check_sorted();
    for (int i = 0; i < 8; i++) {
        const moe_topo_gpu *g = &t->gpus[i];
        if (i < 4) {
            CHECK(strcmp(g->model, "NVIDIA H100 NVL") == 0);
            CHECK(g->cc_major == 9 && g->cc_minor == 0);
            CHECK(g->cc_src == TOPO_SRC_XML_INFO); /* moe.cc, while the model is from the table */
            CHECK(g->model_src == TOPO_SRC_PCI_TABLE);
            /* Socket 1, yet first in PCI order (see make_fixtures.py). */
            CHECK(g->numa_node == 1 && strcmp(g->cpus, "32-63,96-127") == 0);
            /* NVLink bridges in pairs: 0-1, 2-3. */
            CHECK(g->n_peers == 1 && g->peers[0] == (i ^ 1));
            CHECK(g->nvlink_src == TOPO_SRC_XML_INFO);
        } else {
            CHECK(strcmp(g->model, "NVIDIA L40S") == 0);
            CHECK(g->cc_major == 8 && g->cc_minor == 9 && g->cc_src == TOPO_SRC_PCI_TABLE);
            CHECK(g->numa_node == 0 && strcmp(g->cpus, "0-31,64-95") == 0);
            /* The L40S has no NVLink at all: known from the table. */
            CHECK(g->n_peers == 0 && g->nvlink_src == TOPO_SRC_PCI_TABLE);
        }
    }
}

static void test_consumer_node(void)
{
    if (load("rtx4090x4.xml"))
        return;
    CHECK(t->n_packages == 1 && t->n_numa == 1 && t->n_pus == 48);
    CHECK(t->n_gpus == 4); /* the cards' audio functions and the NVMe drive are not GPUs */
    check_all("NVIDIA GeForce RTX 4090", 8, 9, 24564, TOPO_SRC_PCI_TABLE, TOPO_SRC_PCI_TABLE,
              TOPO_SRC_PCI_TABLE);
    for (int i = 0; i < 4; i++) {
        CHECK(t->gpus[i].class_id == 0x0300); /* VGA, not 3D controller */
        CHECK(t->gpus[i].numa_node == 0 && strcmp(t->gpus[i].cpus, "0-47") == 0);
        CHECK(t->gpus[i].n_peers == 0);
    }
}

static void test_unknown_gpu(void)
{
    if (load("unknown-gpu.xml"))
        return;
    CHECK(t->n_gpus == 1);
    const moe_topo_gpu *g = &t->gpus[0];
    CHECK(g->device_id == 0x2bff);
    CHECK(g->model[0] == '\0' && g->model_src == TOPO_SRC_UNKNOWN);
    CHECK(g->cc_major == -1 && g->cc_minor == -1 && g->cc_src == TOPO_SRC_UNKNOWN);
    CHECK(g->memory_bytes == 0 && g->memory_src == TOPO_SRC_UNKNOWN);
    CHECK(g->nvlink_src == TOPO_SRC_UNKNOWN);
    CHECK(g->numa_node == 0 && strcmp(g->cpus, "0-15") == 0);
}

static void test_cpu_nodes(void)
{
    if (load("cpu-only.xml"))
        return;
    CHECK(t->n_gpus == 0 && t->n_packages == 2 && t->n_pus == 128 && t->n_numa == 2);
    if (load("base-vm.xml")) /* the unedited export the fixtures came from */
        return;
    CHECK(t->n_gpus == 0 && t->n_pus == 2 && strcmp(t->hostname, "vm") == 0);
}

static void test_source_names(void)
{
    CHECK(strcmp(topo_source_name(TOPO_SRC_NVML), "nvml") == 0);
    CHECK(strcmp(topo_source_name(TOPO_SRC_XML_INFO), "xml-info") == 0);
    CHECK(strcmp(topo_source_name(TOPO_SRC_PCI_TABLE), "pci-id table") == 0);
    CHECK(strcmp(topo_source_name(TOPO_SRC_UNKNOWN), "unknown") == 0);
}

static void test_live_node(void)
{
    moe_err e = {{0}};
    unsetenv("HWLOC_XMLFILE");
    /* Without hwloc's PCI component: libpciaccess keeps its device-name
     * cache (pci_get_strings, ~1 KiB once per process) after hwloc unloads
     * the plugin, which LeakSanitizer reports and cannot be told to ignore.
     * The fixtures cover PCI discovery. */
    setenv("HWLOC_COMPONENTS", "-pci", 1);
    int rc = topo_load(t, NULL, TOPO_NO_NVML, &e);
    unsetenv("HWLOC_COMPONENTS");
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(strcmp(t->origin, "live") == 0 && t->this_system);
    CHECK(t->n_packages >= 1 && t->n_cores >= 1 && t->n_pus >= t->n_cores && t->n_numa >= 1);
    CHECK(t->cpus[0] != '\0');
    CHECK(strstr(t->nvml_note, "asked not to") != NULL);
    int first = -1;
    CHECK(sscanf(t->cpus, "%d", &first) == 1 && first >= 0);
}

static void test_hwloc_xmlfile_env(void)
{
    moe_err e = {{0}};
    setenv("HWLOC_XMLFILE", fixture("h200x8.xml"), 1);
    int rc = topo_load(t, NULL, 0, &e);
    unsetenv("HWLOC_XMLFILE");
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(t->n_gpus == 8 && strcmp(t->gpus[0].model, "NVIDIA H200") == 0);
    CHECK_MSG(strstr(t->origin, "(HWLOC_XMLFILE)"), "%s", t->origin);
    CHECK(!t->this_system && !t->nvml_used);

    /* HWLOC_THISSYSTEM=1 vouches for the XML: then NVML is asked. Where the
     * driver is absent the answer is a note and the other sources stand. */
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (nvml) {
        dlclose(nvml);
        return;
    }
    setenv("HWLOC_THISSYSTEM", "1", 1);
    rc = topo_load(t, fixture("b200x8.xml"), 0, &e);
    unsetenv("HWLOC_THISSYSTEM");
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(t->this_system && !t->nvml_used);
    CHECK_MSG(strstr(t->nvml_note, "NVML not available"), "%s", t->nvml_note);
    CHECK(t->n_gpus == 8 && t->gpus[0].cc_src == TOPO_SRC_XML_INFO);
}

/* A copy of a fixture with one text replaced, for the error paths. */
static int edited(const char *name, const char *from, const char *to, char *out, size_t n)
{
    FILE *f = fopen(fixture(name), "r");
    if (!f)
        return -1;
    static char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *at = strstr(buf, from);
    if (!at)
        return -1;
    snprintf(out, n, "/tmp/moekit-test-topo-%d.xml", (int)getpid());
    f = fopen(out, "w");
    if (!f)
        return -1;
    fwrite(buf, 1, (size_t)(at - buf), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    return 0;
}

static void expect_load_error(const char *path, const char *phrase)
{
    moe_err e = {{0}};
    CHECK(topo_load(t, path, 0, &e) == -1);
    CHECK_MSG(strstr(e.msg, phrase) != NULL, "want \"%s\" in: %s", phrase, e.msg);
}

static void test_load_errors(void)
{
    expect_load_error("/nonexistent/node.xml", "topology XML /nonexistent/node.xml: No such file");
    char path[256];
    if (edited("b200x8.xml", "<topology version=\"2.0\">", "<topology version=\"2.0\"><oops>",
               path, sizeof path) == 0) {
        expect_load_error(path, "is it an `lstopo --of xml` export?");
        CHECK(strstr(t->origin, path) != NULL);
        unlink(path);
    }
    if (edited("b200x8.xml", "name=\"moe.cc\" value=\"10.0\"", "name=\"moe.cc\" value=\"ten\"",
               path, sizeof path) == 0) {
        expect_load_error(path, "GPU 0000:1b:00.0: moe.cc=\"ten\" is not a compute capability");
        unlink(path);
    }
    const char *loose_cc[] = {"+10.0", "9.10", "09.0", "10.", "1e1.0", " 9.0", "100.0"};
    for (size_t i = 0; i < sizeof loose_cc / sizeof loose_cc[0]; i++) {
        char to[64];
        snprintf(to, sizeof to, "name=\"moe.cc\" value=\"%s\"", loose_cc[i]);
        if (edited("b200x8.xml", "name=\"moe.cc\" value=\"10.0\"", to, path, sizeof path) == 0) {
            expect_load_error(path, "is not a compute capability");
            unlink(path);
        }
    }
    int maj = 0, min = 0;
    CHECK(topo_parse_cc("10.3", &maj, &min) == 0 && maj == 10 && min == 3);
    CHECK(topo_parse_cc("9.0", &maj, &min) == 0 && maj == 9 && min == 0);
    if (edited("b200x8.xml", "name=\"moe.memory_mib\" value=\"183359\"",
               "name=\"moe.memory_mib\" value=\"lots\"", path, sizeof path) == 0) {
        expect_load_error(path, "moe.memory_mib=\"lots\" is not a positive number of MiB");
        unlink(path);
    }
    if (edited("b200x8.xml", "value=\"GPU-", "value=\"XPU-", path, sizeof path) == 0) {
        expect_load_error(path, "moe.uuid=\"XPU-");
        unlink(path);
    }
    /* A peer that is the NIC, not a GPU. */
    if (edited("b200x8.xml", "value=\"0000:43:00.0,", "value=\"0000:13:00.0,", path,
               sizeof path) == 0) {
        expect_load_error(path, "moe.nvlink_peers names \"0000:13:00.0\", which is not an "
                                "NVIDIA GPU of this topology");
        unlink(path);
    }
    if (edited("b200x8.xml", "value=\"0000:43:00.0,", "value=\"0000:1b:00.0,", path,
               sizeof path) == 0) {
        expect_load_error(path, "which is the GPU itself");
        unlink(path);
    }
    if (edited("b200x8.xml", "value=\"0000:43:00.0,", "value=\"0000:43:00.0,0000:43:00.0,",
               path, sizeof path) == 0) {
        expect_load_error(path, "names 0000:43:00.0 twice");
        unlink(path);
    }
}

static void test_busid(void)
{
    unsigned d, b, s, f;
    CHECK(topo_parse_busid("0000:1b:00.0", &d, &b, &s, &f) == 0 && d == 0 && b == 0x1b &&
          s == 0 && f == 0);
    CHECK(topo_parse_busid("00000001:C3:1F.7", &d, &b, &s, &f) == 0 && d == 1 && b == 0xc3 &&
          s == 0x1f && f == 7);
    CHECK(topo_parse_busid("1b:00.1", &d, &b, &s, &f) == 0 && d == 0 && b == 0x1b && f == 1);
    CHECK(topo_parse_busid(" 0000:1b:00.0\n", &d, &b, &s, &f) == 0);
    const char *bad[] = {"", "1b", "0000:1b:00", "0000:1b:00.8", "0000:1b:20.0", "0000:1bb:00.0",
                         "0000:1b:00.0x", "000000000:1b:00.0", "zz:00.0", "0000:1b.00.0", NULL};
    for (int i = 0; bad[i]; i++)
        CHECK_MSG(topo_parse_busid(bad[i], &d, &b, &s, &f) == -1, "accepted \"%s\"", bad[i]);
    CHECK(topo_parse_busid(NULL, &d, &b, &s, &f) == -1);
    char buf[32];
    topo_format_busid(buf, sizeof buf, 0, 0xc3, 0, 0);
    CHECK(strcmp(buf, "0000:c3:00.0") == 0);
    topo_format_busid(buf, sizeof buf, 0x10000, 1, 2, 3);
    CHECK(strcmp(buf, "10000:01:02.3") == 0);
}

static void test_index_lists(void)
{
    int v[TOPO_MAX_GPUS], n;
    moe_err e = {{0}};
    CHECK(topo_parse_index_list("0,1", "X", v, TOPO_MAX_GPUS, &n, &e) == 0 && n == 2 &&
          v[0] == 0 && v[1] == 1);
    CHECK(topo_parse_index_list("0-3", "X", v, TOPO_MAX_GPUS, &n, &e) == 0 && n == 4 &&
          v[3] == 3);
    CHECK(topo_parse_index_list("6,0-1,4", "X", v, TOPO_MAX_GPUS, &n, &e) == 0 && n == 4 &&
          v[0] == 6 && v[1] == 0 && v[2] == 1 && v[3] == 4);
    CHECK(topo_parse_index_list("", "X", v, TOPO_MAX_GPUS, &n, &e) == 0 && n == 0);
    struct {
        const char *s, *msg;
    } bad[] = {
        {"a", "expected a GPU index"}, {"1,", "trailing comma"},
        {",1", "expected a GPU index"}, {"1,,2", "expected a GPU index"},
        {"3-1", "runs backwards"},     {"1,1", "listed twice"},
        {"0-2,1", "listed twice"},     {"-1", "expected a GPU index"},
        {"1;2", "unexpected \";\""},   {"0 1", "unexpected \" \""},
        {"99999999999", "out of range"}, {"0-", "expected a GPU index"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(topo_parse_index_list(bad[i].s, "SLURM_STEP_GPUS", v, TOPO_MAX_GPUS, &n, &e) ==
                      -1,
                  "accepted \"%s\"", bad[i].s);
        CHECK_MSG(strstr(e.msg, bad[i].msg) && strstr(e.msg, "SLURM_STEP_GPUS"), "\"%s\": %s",
                  bad[i].s, e.msg);
    }
    CHECK(topo_parse_index_list("0-100", "X", v, 8, &n, &e) == -1);
    CHECK_MSG(strstr(e.msg, "more than 8 GPUs"), "%s", e.msg);
    CHECK(topo_parse_index_list(NULL, "X", v, 8, &n, &e) == -1);

    char buf[64];
    int w[] = {0, 1, 2, 4, 6, 7};
    topo_format_index_list(buf, sizeof buf, w, 6);
    CHECK_MSG(strcmp(buf, "0-2,4,6-7") == 0, "%s", buf);
    topo_format_index_list(buf, sizeof buf, w, 0);
    CHECK(buf[0] == '\0');
    topo_format_index_list(buf, 4, w, 6); /* truncates, stays terminated */
    CHECK(strlen(buf) < 4);
}

static int step(const char *sg, const char *jg, const char *cv, int *idx, int *n,
                const char **from, moe_err *e)
{
    memset(e, 0, sizeof *e);
    return topo_step_gpus(t, sg, jg, cv, idx, n, from, e);
}

static void test_step_gpus(void)
{
    if (load("b200x8.xml"))
        return;
    int idx[TOPO_MAX_GPUS], n;
    const char *from;
    moe_err e;
    /* Slurm's node-level indices; CUDA numbers them in PCI order. */
    CHECK(step("5,2", NULL, NULL, idx, &n, &from, &e) == 0 && n == 2 && idx[0] == 2 &&
          idx[1] == 5);
    CHECK(strcmp(from, "SLURM_STEP_GPUS") == 0);
    CHECK(step("0-3", "4-7", "6,7", idx, &n, &from, &e) == 0 && n == 4 && idx[3] == 3);
    CHECK(step(NULL, "4-7", "0", idx, &n, &from, &e) == 0 && n == 4 && idx[0] == 4);
    CHECK(strcmp(from, "SLURM_JOB_GPUS") == 0);
    /* CUDA_VISIBLE_DEVICES keeps its order: that is CUDA's order. */
    CHECK(step(NULL, NULL, "3,1", idx, &n, &from, &e) == 0 && n == 2 && idx[0] == 3 &&
          idx[1] == 1);
    CHECK(strcmp(from, "CUDA_VISIBLE_DEVICES") == 0);
    CHECK(step(NULL, NULL, NULL, idx, &n, &from, &e) == 0 && n == 8 && idx[7] == 7);
    CHECK(strcmp(from, "all GPUs of the node") == 0);
    /* Set but empty, or Slurm's NoDevFiles: no GPUs. */
    CHECK(step("", NULL, NULL, idx, &n, NULL, &e) == 0 && n == 0);
    CHECK(step(NULL, NULL, "", idx, &n, NULL, &e) == 0 && n == 0);
    CHECK(step(NULL, NULL, "NoDevFiles", idx, &n, NULL, &e) == 0 && n == 0);

    /* UUIDs, from the fixture's moe.uuid standing in for NVML. */
    char cv[256];
    snprintf(cv, sizeof cv, "%s,%s", t->gpus[6].uuid, t->gpus[2].uuid);
    CHECK(step(NULL, NULL, cv, idx, &n, NULL, &e) == 0 && n == 2 && idx[0] == 6 && idx[1] == 2);
    snprintf(cv, sizeof cv, "%s,1", t->gpus[0].uuid); /* mixing both forms */
    CHECK(step(NULL, NULL, cv, idx, &n, NULL, &e) == 0 && n == 2 && idx[0] == 0 && idx[1] == 1);

    struct {
        const char *sg, *cv, *msg;
    } bad[] = {
        {"8", NULL, "SLURM_STEP_GPUS=\"8\" names GPU 8, but this node's GPUs are 0-7"},
        {"0,x", NULL, "SLURM_STEP_GPUS=\"0,x\": expected a GPU index"},
        {"1,1", NULL, "listed twice"},
        {NULL, "9", "CUDA_VISIBLE_DEVICES=\"9\" names GPU 9"},
        {NULL, "0,0", "is listed twice"},
        {NULL, "0,,1", "empty entry"},
        {NULL, "1,", "empty entry"},
        {NULL, "-1", "neither a GPU index nor a GPU UUID"},
        {NULL, "GPU-00000000-0000-0000-0000-000000000000", "no GPU on this node has UUID"},
        {NULL, "MIG-1234", "is a MIG device"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(step(bad[i].sg, NULL, bad[i].cv, idx, &n, NULL, &e) == -1 && n == 0);
        CHECK_MSG(strstr(e.msg, bad[i].msg), "want \"%s\" in: %s", bad[i].msg, e.msg);
    }
    CHECK(step(NULL, "3-2", NULL, idx, &n, NULL, &e) == -1);
    CHECK_MSG(strstr(e.msg, "SLURM_JOB_GPUS"), "%s", e.msg);

    /* Without NVML or moe.uuid, a UUID cannot be resolved: say so. */
    if (load("h200x8.xml"))
        return;
    CHECK(step(NULL, NULL, "GPU-ddd35bea-5c43-a543-3c21-273bc0f8945c", idx, &n, NULL, &e) == -1);
    CHECK_MSG(strstr(e.msg, "without NVML") && strstr(e.msg, "use GPU indices"), "%s", e.msg);
    if (load("unknown-gpu.xml"))
        return;
    CHECK(step("1", NULL, NULL, idx, &n, NULL, &e) == -1);
    CHECK_MSG(strstr(e.msg, "this node has one GPU, GPU 0"), "%s", e.msg);
    /* A CPU node given GPUs by a confused environment. */
    if (load("cpu-only.xml"))
        return;
    CHECK(step("0", NULL, NULL, idx, &n, NULL, &e) == -1);
    CHECK_MSG(strstr(e.msg, "this node has no NVIDIA GPU"), "%s", e.msg);
    CHECK(step(NULL, NULL, NULL, idx, &n, NULL, &e) == 0 && n == 0);
}

static void test_fill_step(void)
{
    if (load("mixed-h100-l40s.xml"))
        return;
    moe_step s;
    moe_err e = {{0}};
    char *env[] = {"PATH=/usr/bin", "SLURM_STEP_GPUS=6,3", "SLURM_JOB_GPUS=0-7",
                   "SLURM_STEP_NUM_TASKS=2", "SLURM_NTASKS=8", "SLURM_NNODES=1",
                   "CUDA_VISIBLE_DEVICES=0,1", NULL};
    s.num_experts = 99; /* overwritten: the caller sets it afterwards */
    CHECK_MSG(topo_fill_step(t, env, &s, &e) == 0, "%s", e.msg);
    CHECK(s.n_gpus == 2 && s.ntasks == 2 && s.nnodes == 1 && s.num_experts == 0);
    CHECK(strcmp(s.gpus[0].model, "NVIDIA H100 NVL") == 0 && s.gpus[0].cc_major == 9);
    CHECK(strcmp(s.gpus[0].pci_bus_id, "0000:51:00.0") == 0 && s.gpus[0].numa_node == 1);
    CHECK(strcmp(s.gpus[1].model, "NVIDIA L40S") == 0 && s.gpus[1].numa_node == 0);
    CHECK(s.gpus[1].cc_major == 8 && s.gpus[1].cc_minor == 9);

    char *fallbacks[] = {"SLURM_JOB_GPUS=4", "SLURM_NTASKS=1", "SLURM_STEP_NUM_NODES=1", NULL};
    CHECK_MSG(topo_fill_step(t, fallbacks, &s, &e) == 0, "%s", e.msg);
    CHECK(s.n_gpus == 1 && s.ntasks == 1 && s.nnodes == 1);
    char *none[] = {NULL};
    CHECK(topo_fill_step(t, none, &s, &e) == 0 && s.n_gpus == 8 && s.ntasks == 0 &&
          s.nnodes == 0);

    char *bad_tasks[] = {"SLURM_NTASKS=two", NULL};
    CHECK(topo_fill_step(t, bad_tasks, &s, &e) == -1);
    CHECK_MSG(strstr(e.msg, "SLURM_NTASKS=\"two\" is not a positive count"), "%s", e.msg);
    char *bad_nodes[] = {"SLURM_STEP_NUM_NODES=0", NULL};
    CHECK(topo_fill_step(t, bad_nodes, &s, &e) == -1);
    CHECK_MSG(strstr(e.msg, "SLURM_STEP_NUM_NODES"), "%s", e.msg);
    char *bad_gpus[] = {"SLURM_STEP_GPUS=12", NULL};
    CHECK(topo_fill_step(t, bad_gpus, &s, &e) == -1);
    CHECK_MSG(strstr(e.msg, "SLURM_STEP_GPUS=\"12\""), "%s", e.msg);

    /* An unknown part still has a name in the step, for the paragraph. */
    if (load("unknown-gpu.xml"))
        return;
    CHECK(topo_fill_step(t, none, &s, &e) == 0 && s.n_gpus == 1);
    CHECK_MSG(strcmp(s.gpus[0].model, "unknown NVIDIA GPU [10de:2bff]") == 0, "%s",
              s.gpus[0].model);
    CHECK(s.gpus[0].cc_major == -1);

    /* NULL means this process's environment. */
    setenv("SLURM_STEP_GPUS", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    CHECK(topo_fill_step(t, NULL, &s, &e) == 0 && s.n_gpus == 1 && s.ntasks == 1);
    CHECK(strcmp(topo_env_get(NULL, "SLURM_STEP_GPUS"), "0") == 0);
    unsetenv("SLURM_STEP_GPUS");
    unsetenv("SLURM_STEP_NUM_TASKS");
    CHECK(topo_env_get(env, "SLURM_STEP") == NULL); /* whole names only */
    CHECK(strcmp(topo_env_get(env, "SLURM_STEP_GPUS"), "6,3") == 0);
}

/* ---- real-style exports: what hwloc's NVML and CUDA components write ---- */

typedef struct {
    const char *device_id;  /* "2330" */
    const char *model;      /* GPUModel on nvmlN and cudaN; NULL: no OS devices */
    const char *uuid;       /* NVIDIAUUID */
    const char *kib;        /* CUDAGlobalMemorySize; NULL: no cudaN */
} real_gpu;

/* An `lstopo --of xml` of a 4-PU node with the GPUs on one host bridge and,
 * when nvlink is given, an NVLinkBandwidth matrix (MB/s) over nvml0..N-1 and
 * the `switches` Misc NVSwitch objects hwloc adds after them. */
static const char *write_real_xml(const char *name, const real_gpu *g, int n, int switches,
                                  const unsigned *nvlink)
{
    static char path[512];
    snprintf(path, sizeof path, "/tmp/moekit-test-topo-%d-%s", (int)getpid(), name);
    FILE *f = fopen(path, "w");
    if (!f)
        return NULL;
    const char *sets = "cpuset=\"0x0000000f\" complete_cpuset=\"0x0000000f\" "
                       "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"";
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM "
               "\"hwloc2.dtd\">\n<topology version=\"2.0\">\n<object type=\"Machine\" "
               "os_index=\"0\" %s allowed_cpuset=\"0x0000000f\" allowed_nodeset=\"0x00000001\" "
               "gp_index=\"1\"><info name=\"Backend\" value=\"Linux\"/>\n<object "
               "type=\"Package\" os_index=\"0\" %s gp_index=\"2\">\n<object type=\"NUMANode\" "
               "os_index=\"0\" %s gp_index=\"3\" local_memory=\"1000000000\"/>\n<object "
               "type=\"Core\" os_index=\"0\" %s gp_index=\"4\">\n",
            sets, sets, sets, sets);
    for (int p = 0; p < 4; p++)
        fprintf(f, "<object type=\"PU\" os_index=\"%d\" cpuset=\"0x%08x\" complete_cpuset="
                   "\"0x%08x\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" "
                   "gp_index=\"%d\"/>\n", p, 1u << p, 1u << p, 5 + p);
    fprintf(f, "</object>\n<object type=\"Bridge\" gp_index=\"10\" bridge_type=\"0-1\" "
               "depth=\"0\" bridge_pci=\"0000:[01-%02x]\">\n", n);
    for (int i = 0; i < n; i++) {
        int gp = 100 + 10 * i;
        fprintf(f, "<object type=\"PCIDev\" gp_index=\"%d\" pci_busid=\"0000:%02x:00.0\" "
                   "pci_type=\"0302 [10de:%s] [10de:16c1] a1\" pci_link_speed=\"31.5\">\n",
                gp, i + 1, g[i].device_id);
        if (g[i].model)
            fprintf(f, "<object type=\"OSDev\" gp_index=\"%d\" name=\"nvml%d\" subtype=\"NVML\" "
                       "osdev_type=\"1\"><info name=\"Backend\" value=\"NVML\"/><info "
                       "name=\"GPUVendor\" value=\"NVIDIA Corporation\"/><info name=\"GPUModel\" "
                       "value=\"%s\"/><info name=\"NVIDIAUUID\" value=\"%s\"/></object>\n",
                    gp + 1, i, g[i].model, g[i].uuid);
        if (g[i].model && g[i].kib)
            fprintf(f, "<object type=\"OSDev\" gp_index=\"%d\" name=\"cuda%d\" subtype=\"CUDA\" "
                       "osdev_type=\"5\"><info name=\"Backend\" value=\"CUDA\"/><info "
                       "name=\"GPUModel\" value=\"%s\"/><info name=\"CUDAGlobalMemorySize\" "
                       "value=\"%s\"/><info name=\"CUDAMultiProcessors\" value=\"132\"/>"
                       "</object>\n", gp + 2, i, g[i].model, g[i].kib);
        fprintf(f, "</object>\n");
    }
    fprintf(f, "</object>\n</object>\n");
    for (int k = 0; k < switches; k++)
        fprintf(f, "<object type=\"Misc\" gp_index=\"%d\" subtype=\"NVSwitch\" "
                   "name=\"NVSwitch\"/>\n", 50 + k);
    fprintf(f, "</object>\n");
    if (nvlink) {
        int m = n + switches;
        char idx[1024] = "", val[8192] = "";
        for (int k = 0; k < m; k++) {
            size_t u = strlen(idx);
            if (switches)
                snprintf(idx + u, sizeof idx - u, "%s%s:%d", k ? " " : "",
                         k < n ? "OSDev" : "Misc", k < n ? 101 + 10 * k : 50 + k - n);
            else
                snprintf(idx + u, sizeof idx - u, "%s%d", k ? " " : "", 101 + 10 * k);
        }
        for (int k = 0; k < m * m; k++) {
            size_t u = strlen(val);
            snprintf(val + u, sizeof val - u, "%s%u", k ? " " : "", nvlink[k]);
        }
        fprintf(f, "<%s nbobjs=\"%d\" kind=\"9\" name=\"NVLinkBandwidth\" indexing=\"gp\"%s>\n"
                   "<indexes length=\"%zu\">%s</indexes>\n<u64values length=\"%zu\">%s"
                   "</u64values>\n</%s>\n",
                switches ? "distances2hetero" : "distances2", m,
                switches ? "" : " type=\"OSDev\"", strlen(idx), idx, strlen(val), val,
                switches ? "distances2hetero" : "distances2");
    }
    fprintf(f, "</topology>\n");
    fclose(f);
    return path;
}

static int load_real(const char *path)
{
    moe_err e = {{0}};
    int rc = path ? topo_load(t, path, TOPO_NO_NVML, &e) : -1;
    CHECK_MSG(rc == 0, "%s: %s", path ? path : "(not written)", e.msg);
    return rc;
}

static int peers_are(int i, const int *want, int n)
{
    const moe_topo_gpu *g = &t->gpus[i];
    if (g->nvlink_src != TOPO_SRC_HWLOC || g->n_peers != n)
        return 0;
    for (int k = 0; k < n; k++) {
        int found = 0;
        for (int j = 0; j < g->n_peers; j++)
            found |= g->peers[j] == want[k];
        if (!found)
            return 0;
    }
    return 1;
}

static void test_real_hwloc_exports(void)
{
    /* 4x H100 NVL in NVLink-bridged pairs, as hwloc's NVML/CUDA components write them. */
    const real_gpu h100[] = {
        {"2321", "NVIDIA H100 NVL", "GPU-0a0a0a0a-1111-2222-3333-444444444444", "98304000"},
        {"2321", "NVIDIA H100 NVL", "GPU-1b1b1b1b-1111-2222-3333-444444444444", "98304000"},
        {"2321", "NVIDIA H100 NVL", "GPU-2c2c2c2c-1111-2222-3333-444444444444", "98304000"},
        {"2321", "NVIDIA H100 NVL", "GPU-3d3d3d3d-1111-2222-3333-444444444444", "98304000"},
    };
    const unsigned pairs[16] = {0, 600000, 0, 0, 600000, 0, 0, 0,
                                0, 0, 0, 600000, 0, 0, 600000, 0};
    const char *path = write_real_xml("pairs.xml", h100, 4, 0, pairs);
    if (load_real(path) == 0) {
        CHECK(t->n_gpus == 4);
        for (int i = 0; i < t->n_gpus; i++) {
            const moe_topo_gpu *g = &t->gpus[i];
            CHECK_MSG(strcmp(g->model, "NVIDIA H100 NVL") == 0 && g->model_src == TOPO_SRC_HWLOC,
                      "GPU %d: %s", i, g->model);
            CHECK(g->memory_bytes == 98304000ull << 10 && g->memory_src == TOPO_SRC_HWLOC);
            CHECK(g->uuid_src == TOPO_SRC_HWLOC && strncmp(g->uuid, "GPU-", 4) == 0);
            CHECK(g->cc_major == 9 && g->cc_minor == 0);
        }
        int p1[] = {1}, p0[] = {0}, p3[] = {3}, p2[] = {2};
        CHECK(peers_are(0, p1, 1) && peers_are(1, p0, 1) && peers_are(2, p3, 1) &&
              peers_are(3, p2, 1));
        /* CUDA_VISIBLE_DEVICES by UUID without NVML: the export's NVIDIAUUID answers. */
        char cv[256];
        int idx[TOPO_MAX_GPUS], n = 0;
        moe_err e = {{0}};
        snprintf(cv, sizeof cv, "%s,%s", h100[3].uuid, h100[1].uuid);
        CHECK_MSG(topo_step_gpus(t, NULL, NULL, cv, idx, &n, NULL, &e) == 0 && n == 2 &&
                      idx[0] == 3 && idx[1] == 1,
                  "%s", e.msg);
        unlink(path);
    }

    /* 4 GPUs on two NVSwitches (hwloc's Misc objects): every GPU reaches every other. */
    unsigned sw[36] = {0};
    for (int gi = 0; gi < 4; gi++)
        for (int s = 4; s < 6; s++)
            sw[gi * 6 + s] = sw[s * 6 + gi] = 450000;
    path = write_real_xml("nvswitch.xml", h100, 4, 2, sw);
    if (load_real(path) == 0) {
        int all0[] = {1, 2, 3}, all3[] = {0, 1, 2};
        CHECK(peers_are(0, all0, 3) && peers_are(3, all3, 3));
        unlink(path);
    }

    /* The PCI ids pci.ids lists as H100 (10de:2336, 10de:2339), no OS devices: the table. */
    const real_gpu bare[] = {{"2336", NULL, NULL, NULL}, {"2339", NULL, NULL, NULL}};
    path = write_real_xml("h100-ids.xml", bare, 2, 0, NULL);
    if (load_real(path) == 0) {
        for (int i = 0; i < 2; i++)
            CHECK_MSG(t->gpus[i].cc_major == 9 && t->gpus[i].cc_minor == 0 &&
                          strstr(t->gpus[i].model, "H100") &&
                          t->gpus[i].cc_src == TOPO_SRC_PCI_TABLE,
                      "GPU %d: %s %d.%d", i, t->gpus[i].model, t->gpus[i].cc_major,
                      t->gpus[i].cc_minor);
        unlink(path);
    }
}

int main(void)
{
    /* The tests pick their environment; the caller's Slurm or CUDA variables must not leak in. */
    const char *vars[] = {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES",
                          "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_STEP_NUM_NODES",
                          "SLURM_NNODES", "HWLOC_XMLFILE", "HWLOC_THISSYSTEM"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    t = malloc(sizeof *t);
    if (!t)
        return 1;
    RUN(test_b200_node);
    RUN(test_h200_node_uses_the_pci_table);
    RUN(test_mixed_node);
    RUN(test_consumer_node);
    RUN(test_unknown_gpu);
    RUN(test_cpu_nodes);
    RUN(test_source_names);
    RUN(test_live_node);
    RUN(test_hwloc_xmlfile_env);
    RUN(test_load_errors);
    RUN(test_busid);
    RUN(test_index_lists);
    RUN(test_step_gpus);
    RUN(test_fill_step);
    RUN(test_real_hwloc_exports);
    free(t);
    return check_summary("topo");
}

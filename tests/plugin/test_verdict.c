/* Unit tests: the launch verdict (launch/verdict.c) on every fixture node,
 * for precision requests, policies and EP/DP layouts. */
#include <stdlib.h>
#include <string.h>

#include "../../launch/policy.h"
#include "../../launch/verdict.h"
#include "../../topo/step.h"
#include "../../topo/topo.h"
#include "../check.h"

#ifndef TOPO_FIXTURES
#error "TOPO_FIXTURES must name tests/fixtures/topo"
#endif

static moe_topo *topo; /* large: one, reused */

/* The step of a fixture node: `gpus` as SLURM_STEP_GPUS would say, or NULL
 * for all of them. */
static moe_step step_of(const char *fixture, const char *gpus)
{
    moe_step s;
    memset(&s, 0, sizeof s);
    moe_err e = {{0}};
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TOPO_FIXTURES, fixture);
    if (topo_load(topo, path, TOPO_NO_NVML, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        return s;
    }
    int idx[TOPO_MAX_GPUS], n;
    if (topo_step_gpus(topo, gpus, NULL, NULL, idx, &n, NULL, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        return s;
    }
    topo_step_from_indices(topo, idx, n, &s);
    return s;
}

static moe_policy policy(const char *words)
{
    moe_policy p;
    moe_err e = {{0}};
    CHECK_MSG(policy_parse_string(&p, words, &e) == 0, "%s", e.msg);
    return p;
}

static moe_request request(int ep, int dp, moe_precision prec)
{
    moe_request r;
    memset(&r, 0, sizeof r);
    r.active = 1;
    r.ep = ep;
    r.dp = dp;
    r.precision = prec;
    return r;
}

/* One paragraph: "moekit: " first, one line, no stray format debris. */
static void check_paragraph(const moe_verdict *v)
{
    CHECK_MSG(strncmp(v->paragraph, "moekit: ", 8) == 0, "%s", v->paragraph);
    CHECK(strchr(v->paragraph, '\n') == NULL);
    CHECK(strlen(v->paragraph) < sizeof v->paragraph - 1);
    CHECK_MSG(!strstr(v->paragraph, "  ") && !strstr(v->paragraph, "..") &&
                  !strstr(v->paragraph, ",."),
              "%s", v->paragraph);
    if (v->kind == MOE_VERDICT_REFUSE)
        CHECK_MSG(strncmp(v->paragraph, "moekit: refusing this job: ", 27) == 0, "%s",
                  v->paragraph);
}

#define HAS(v, s) CHECK_MSG(strstr((v).paragraph, (s)) != NULL, "no \"%s\" in: %s", (s), \
                            (v).paragraph)
#define LACKS(v, s) CHECK_MSG(strstr((v).paragraph, (s)) == NULL, "\"%s\" in: %s", (s), \
                              (v).paragraph)

static moe_verdict decide(const char *pol_words, moe_request r, moe_step s)
{
    moe_policy p = policy(pol_words);
    moe_verdict v;
    verdict_decide(&p, &r, &s, &v);
    check_paragraph(&v);
    return v;
}

static void expect_run(const moe_verdict *v, const char *prec, int ep, int dp)
{
    CHECK_MSG(v->kind == MOE_VERDICT_RUN, "%s", v->paragraph);
    CHECK_MSG(strcmp(precision_name(v->precision), prec) == 0, "precision %s, want %s: %s",
              precision_name(v->precision), prec, v->paragraph);
    CHECK_MSG(v->ep == ep && v->dp == dp, "EP=%d DP=%d, want %d x %d: %s", v->ep, v->dp, ep, dp,
              v->paragraph);
}

static void expect_refuse(const moe_verdict *v)
{
    CHECK_MSG(v->kind == MOE_VERDICT_REFUSE, "%s", v->paragraph);
    CHECK(v->precision == MOE_PREC_AUTO);
}

static void test_b200_mxfp8(void)
{
    moe_step s = step_of("b200x8.xml", NULL);
    CHECK(s.n_gpus == 8);
    moe_verdict v = decide("", request(8, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "mxfp8", 8, 1);
    HAS(v, "moekit: this step has 8x NVIDIA B200 (sm_100, Blackwell).");
    HAS(v, "MXFP8");
    HAS(v, "Running EP=8 x DP=1 on 8 GPUs.");
    CHECK(!v.cpu_only);

    v = decide("", request(4, 0, MOE_PREC_MXFP8), s);
    expect_run(&v, "mxfp8", 4, 2);
    v = decide("", request(0, 0, MOE_PREC_AUTO), s); /* EP defaults to 1 */
    expect_run(&v, "mxfp8", 1, 8);
    v = decide("", request(2, 4, MOE_PREC_AUTO), s);
    expect_run(&v, "mxfp8", 2, 4);
    /* The reject policy is about non-Blackwell GPUs only. */
    v = decide("on_non_blackwell=reject", request(8, 1, MOE_PREC_AUTO), s);
    expect_run(&v, "mxfp8", 8, 1);
    /* Asking bf16 on Blackwell gets bf16. */
    v = decide("", request(8, 0, MOE_PREC_BF16), s);
    expect_run(&v, "bf16", 8, 1);
    HAS(v, "as requested");
    /* fp8_block is the Hopper recipe: Blackwell runs MXFP8. */
    v = decide("allow_fp8_block=yes", request(8, 0, MOE_PREC_FP8_BLOCK), s);
    expect_run(&v, "mxfp8", 8, 1);
    HAS(v, "fp8_block is moekit's Hopper recipe");
    /* Two of the GPUs, as SLURM_STEP_GPUS would give them. */
    s = step_of("b200x8.xml", "4,5");
    CHECK(s.n_gpus == 2 && s.gpus[0].numa_node == 1);
    v = decide("", request(2, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "mxfp8", 2, 1);
    HAS(v, "2x NVIDIA B200");
}

static void test_layout_errors(void)
{
    moe_step s = step_of("b200x8.xml", NULL);
    moe_verdict v = decide("", request(3, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "do not divide by EP=3");
    v = decide("", request(16, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "EP=16 needs at least 16 GPUs and the step has 8");
    v = decide("", request(8, 2, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "DP x EP = 2 x 8 = 16 ranks does not match its 8 GPUs");
    HAS(v, "--moe-dp=1");
    v = decide("", request(-1, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "must be positive");

    /* Experts must split over EP; the paragraph lists EPs that work. */
    s.num_experts = 6;
    v = decide("", request(4, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "6 experts do not split evenly over EP=4");
    HAS(v, "divides both 6 and 8: 1, 2.");
    s.num_experts = 8;
    v = decide("", request(8, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "mxfp8", 8, 1);

    /* One task per GPU. */
    s.ntasks = 4;
    v = decide("", request(8, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "runs 4 tasks on its 8 GPUs");
    HAS(v, "--ntasks-per-node=8");
    s.ntasks = 8;
    v = decide("", request(8, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "mxfp8", 8, 1);

    /* EP >= 2 needs >= 2 GPUs. */
    s = step_of("b200x8.xml", "3");
    v = decide("", request(2, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "EP=2 needs at least 2 GPUs and the step has 1");
    v = decide("", request(1, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "mxfp8", 1, 1);
    HAS(v, "on 1 GPU.");
}

static void test_multi_node(void)
{
    moe_step s = step_of("b200x8.xml", NULL);
    s.nnodes = 2;
    s.ntasks = 16;
    moe_verdict v = decide("", request(8, 2, MOE_PREC_AUTO), s);
    expect_run(&v, "mxfp8", 8, 2);
    HAS(v, "on each of its 2 nodes");
    HAS(v, "on 16 GPUs (2 nodes x 8).");
    v = decide("", request(8, 0, MOE_PREC_AUTO), s); /* DP = 16 / 8 */
    expect_run(&v, "mxfp8", 8, 2);
    v = decide("", request(16, 1, MOE_PREC_AUTO), s); /* EP may span nodes */
    expect_run(&v, "mxfp8", 16, 1);
    s.ntasks = 8; /* tasks count the whole step */
    v = decide("", request(8, 2, MOE_PREC_AUTO), s);
    expect_refuse(&v);
}

static void test_h200_fallbacks(void)
{
    moe_step s = step_of("h200x8.xml", "0,1");
    CHECK(s.n_gpus == 2);
    moe_verdict v = decide("", request(2, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "bf16", 2, 1);
    HAS(v, "moekit: this step has 2x NVIDIA H200 (sm_90, Hopper).");
    HAS(v, "MXFP8 needs every GPU to be data-centre Blackwell (sm_100)");
    HAS(v, "falls back to BF16 (policy on_non_blackwell=bf16)");
    HAS(v, "Running EP=2 x DP=1 on 2 GPUs.");
    LACKS(v, "Warning");

    /* Explicit mxfp8: a clear warning, then BF16. */
    v = decide("", request(2, 0, MOE_PREC_MXFP8), s);
    expect_run(&v, "bf16", 2, 1);
    HAS(v, "Warning: --moe-precision=mxfp8 was requested");
    LACKS(v, "fp8_block");
    v = decide("allow_fp8_block=yes", request(2, 0, MOE_PREC_MXFP8), s);
    expect_run(&v, "bf16", 2, 1);
    HAS(v, "--moe-precision=fp8_block is also allowed");

    /* Explicit bf16: no warning. */
    v = decide("", request(2, 0, MOE_PREC_BF16), s);
    expect_run(&v, "bf16", 2, 1);
    LACKS(v, "Warning");

    /* fp8_block on Hopper only when the policy allows it. */
    v = decide("allow_fp8_block=yes", request(2, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "fp8_block", 2, 1);
    HAS(v, "allow_fp8_block=yes");
    v = decide("allow_fp8_block=yes", request(2, 0, MOE_PREC_FP8_BLOCK), s);
    expect_run(&v, "fp8_block", 2, 1);
    v = decide("", request(2, 0, MOE_PREC_FP8_BLOCK), s);
    expect_run(&v, "bf16", 2, 1);
    HAS(v, "does not allow it (allow_fp8_block=no)");
    v = decide("allow_fp8_block=yes", request(2, 0, MOE_PREC_BF16), s);
    expect_run(&v, "bf16", 2, 1);
}

/* precision.strict (the config or --moe-set): what would fall back is refused,
 * naming the key; what runs as asked is unchanged; auto is never refused. */
static void test_strict_requests(void)
{
    moe_step h200 = step_of("h200x8.xml", "0,1"), b200 = step_of("b200x8.xml", "0,1");
    moe_request r = request(2, 0, MOE_PREC_MXFP8);
    r.precision_strict = 1;
    moe_verdict v = decide("", r, h200);
    expect_refuse(&v);
    HAS(v, "moekit: refusing this job: this step has 2x NVIDIA H200 (sm_90, Hopper)");
    HAS(v, "--moe-precision=mxfp8 was requested with precision.strict = true");
    HAS(v, "mxfp8 needs data-centre Blackwell (compute capability 10.x)");
    HAS(v, "instead of training in BF16");
    v = decide("", r, b200);
    expect_run(&v, "mxfp8", 2, 1);
    r.precision = MOE_PREC_FP8_BLOCK;
    v = decide("", r, h200); /* the site does not allow fp8_block */
    expect_refuse(&v);
    HAS(v, "allow_fp8_block");
    v = decide("allow_fp8_block=yes", r, h200);
    expect_run(&v, "fp8_block", 2, 1);
    v = decide("", r, b200); /* no MXFP8 in fp8_block's place */
    expect_refuse(&v);
    HAS(v, "instead of training in MXFP8");
    r.precision = MOE_PREC_AUTO;
    v = decide("", r, h200);
    expect_run(&v, "bf16", 2, 1);
    r.precision = MOE_PREC_BF16;
    v = decide("", r, h200);
    expect_run(&v, "bf16", 2, 1);
}

static void test_reject_policy(void)
{
    moe_step s = step_of("h200x8.xml", NULL);
    const moe_precision all[] = {MOE_PREC_AUTO, MOE_PREC_MXFP8, MOE_PREC_BF16,
                                     MOE_PREC_FP8_BLOCK};
    for (int i = 0; i < 4; i++) { /* reject means every request, bf16 included */
        moe_verdict v = decide("on_non_blackwell=reject allow_fp8_block=yes",
                               request(8, 0, all[i]), s);
        expect_refuse(&v);
        HAS(v, "moekit: refusing this job: this step has 8x NVIDIA H200 (sm_90, Hopper)");
        HAS(v, "on_non_blackwell=reject");
        HAS(v, "Submit to nodes with data-centre Blackwell GPUs");
    }
    s = step_of("rtx4090x4.xml", NULL);
    moe_verdict v = decide("on_non_blackwell=reject", request(4, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "4x NVIDIA GeForce RTX 4090 (sm_89, Ada Lovelace)");
    /* The hardware refusal comes first, even when the layout is wrong too. */
    v = decide("on_non_blackwell=reject", request(3, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "on_non_blackwell=reject");
}

static void test_mixed_node(void)
{
    moe_step s = step_of("mixed-h100-l40s.xml", NULL);
    CHECK(s.n_gpus == 8);
    moe_verdict v = decide("allow_fp8_block=yes", request(2, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "bf16", 2, 4);
    HAS(v, "4x NVIDIA H100 NVL (sm_90, Hopper) and 4x NVIDIA L40S (sm_89, Ada Lovelace)");
    HAS(v, "the weakest GPU decides the precision");
    v = decide("allow_fp8_block=yes", request(2, 0, MOE_PREC_FP8_BLOCK), s);
    expect_run(&v, "bf16", 2, 4);
    HAS(v, "needs every GPU to be Hopper (sm_90)");
    /* The H100 half alone may use fp8_block; the L40S half may not. */
    v = decide("allow_fp8_block=yes", request(2, 0, MOE_PREC_AUTO),
               step_of("mixed-h100-l40s.xml", "0-3"));
    expect_run(&v, "fp8_block", 2, 2);
    LACKS(v, "weakest");
    v = decide("allow_fp8_block=yes", request(2, 0, MOE_PREC_FP8_BLOCK),
               step_of("mixed-h100-l40s.xml", "4-7"));
    expect_run(&v, "bf16", 2, 2);
    HAS(v, "4x NVIDIA L40S");
    v = decide("on_non_blackwell=reject", request(2, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "NVIDIA H100 NVL");
    HAS(v, "NVIDIA L40S");
}

static void test_consumer_pcie_node(void)
{
    moe_step s = step_of("rtx4090x4.xml", NULL);
    moe_verdict v = decide("", request(4, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "bf16", 4, 1);
    HAS(v, "4x NVIDIA GeForce RTX 4090 (sm_89, Ada Lovelace)");
    v = decide("allow_fp8_block=yes", request(2, 2, MOE_PREC_FP8_BLOCK), s);
    expect_run(&v, "bf16", 2, 2);
    HAS(v, "needs every GPU to be Hopper");
}

static void test_unknown_gpu(void)
{
    moe_step s = step_of("unknown-gpu.xml", NULL);
    CHECK(s.n_gpus == 1 && s.gpus[0].cc_major == -1);
    moe_verdict v = decide("", request(0, 0, MOE_PREC_MXFP8), s);
    expect_run(&v, "bf16", 1, 1);
    HAS(v, "unknown NVIDIA GPU [10de:2bff] (compute capability unknown)");
    HAS(v, "counts as not Blackwell");
    v = decide("on_non_blackwell=reject", request(0, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "counts as not Blackwell");
}

static void test_cpu_only(void)
{
    moe_step s = step_of("cpu-only.xml", NULL);
    CHECK(s.n_gpus == 0);
    moe_verdict v = decide("", request(2, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    CHECK(v.cpu_only);
    HAS(v, "no NVIDIA GPU");
    HAS(v, "allow_cpu=no");
    HAS(v, "--gres=gpu:");

    s.ntasks = 4;
    v = decide("allow_cpu=yes", request(2, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "fp32", 2, 2);
    CHECK(v.cpu_only);
    HAS(v, "FP32 CPU backend");
    HAS(v, "Running EP=2 x DP=2 on 4 tasks.");
    LACKS(v, "Warning");
    /* on_non_blackwell is about GPU steps; allow_cpu decides CPU ones. */
    v = decide("allow_cpu=yes on_non_blackwell=reject", request(4, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "fp32", 4, 1);
    v = decide("allow_cpu=yes", request(2, 0, MOE_PREC_BF16), s);
    expect_run(&v, "fp32", 2, 2);
    HAS(v, "Warning: --moe-precision=bf16 was requested, but the CPU backend computes in FP32");
    v = decide("allow_cpu=yes", request(3, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "4 tasks do not divide by EP=3");
    v = decide("allow_cpu=yes", request(2, 4, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "DP x EP = 4 x 2 = 8 ranks does not match its 4 tasks");
    s.num_experts = 6;
    v = decide("allow_cpu=yes", request(4, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
    HAS(v, "6 experts do not split evenly over EP=4");

    /* Tasks not known yet: the request sets the rank count. */
    s.ntasks = 0;
    s.num_experts = 0;
    v = decide("allow_cpu=yes", request(2, 3, MOE_PREC_AUTO), s);
    expect_run(&v, "fp32", 2, 3);
    HAS(v, "on 6 tasks");
    v = decide("allow_cpu=yes", request(0, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "fp32", 1, 1);
    HAS(v, "on 1 task.");
}

static moe_step synthetic(int n, const char *model, int major, int minor)
{
    moe_step s;
    memset(&s, 0, sizeof s);
    s.n_gpus = n;
    for (int i = 0; i < n; i++) {
        snprintf(s.gpus[i].model, sizeof s.gpus[i].model, "%s", model);
        snprintf(s.gpus[i].pci_bus_id, sizeof s.gpus[i].pci_bus_id, "0000:%02x:00.0", i + 1);
        s.gpus[i].cc_major = major, s.gpus[i].cc_minor = minor;
        s.gpus[i].numa_node = 0;
    }
    return s;
}

/* GPUs no fixture has: consumer Blackwell, B300, Volta, Blackwell beside Hopper. */
static void test_other_architectures(void)
{
    moe_verdict v = decide("", request(2, 0, MOE_PREC_MXFP8),
                           synthetic(2, "NVIDIA GeForce RTX 5090", 12, 0));
    expect_run(&v, "bf16", 2, 1);
    HAS(v, "2x NVIDIA GeForce RTX 5090 (sm_120, consumer Blackwell)");
    HAS(v, "consumer Blackwell (sm_120) lacks the sm_100 tensor-core path");

    /* A B300 (sm_103) from an sm_100a-only build: no MXFP8 kernels for it, BF16 with the
     * reason. */
    v = decide("", request(4, 0, MOE_PREC_AUTO), synthetic(4, "NVIDIA B300", 10, 3));
    expect_run(&v, "bf16", 4, 1);
    HAS(v, "(sm_103, Blackwell)");
    HAS(v, "NVIDIA B300: this build of moekit carries its tensor-core kernels for sm_90a, "
           "sm_100a only");
    HAS(v, "the build needs sm_103a");
    HAS(v, "falls back to BF16");

    v = decide("", request(2, 0, MOE_PREC_AUTO), synthetic(2, "Tesla V100-SXM2-32GB", 7, 0));
    expect_refuse(&v);
    HAS(v, "sm_70");
    HAS(v, "compute capability 8.0 (Ampere) or newer");

    moe_step s = synthetic(4, "NVIDIA B200", 10, 0);
    snprintf(s.gpus[3].model, sizeof s.gpus[3].model, "NVIDIA H100 80GB HBM3");
    s.gpus[3].cc_major = 9;
    v = decide("", request(4, 0, MOE_PREC_MXFP8), s);
    expect_run(&v, "bf16", 4, 1);
    HAS(v, "3x NVIDIA B200 (sm_100, Blackwell) and 1x NVIDIA H100 80GB HBM3 (sm_90, Hopper)");
    HAS(v, "weakest GPU decides");
    v = decide("allow_fp8_block=yes", request(4, 0, MOE_PREC_AUTO), s);
    expect_run(&v, "bf16", 4, 1); /* fp8_block needs every GPU to be Hopper */

    /* Equal GPUs form one group wherever they sit; groups keep first-seen order. */
    s = synthetic(3, "NVIDIA A100-SXM4-80GB", 8, 0);
    snprintf(s.gpus[1].model, sizeof s.gpus[1].model, "NVIDIA L4");
    s.gpus[1].cc_minor = 9;
    v = decide("", request(1, 0, MOE_PREC_AUTO), s);
    HAS(v, "this step has 2x NVIDIA A100-SXM4-80GB (sm_80, Ampere) and 1x NVIDIA L4 (sm_89, "
           "Ada Lovelace);");
    snprintf(s.gpus[2].model, sizeof s.gpus[2].model, "NVIDIA H100 PCIe");
    s.gpus[2].cc_major = 9;
    v = decide("", request(1, 0, MOE_PREC_AUTO), s); /* three groups: a comma, then "and" */
    HAS(v, "1x NVIDIA A100-SXM4-80GB (sm_80, Ampere), 1x NVIDIA L4 (sm_89, Ada Lovelace) and "
           "1x NVIDIA H100 PCIe (sm_90, Hopper);");

    s.n_gpus = MOE_VERDICT_MAX_GPUS + 1;
    v = decide("", request(1, 0, MOE_PREC_AUTO), s);
    expect_refuse(&v);
}

static void test_long_paragraph_stays_bounded(void)
{
    /* 64 GPUs of all different names: the paragraph truncates, never overflows. */
    moe_step s = synthetic(MOE_VERDICT_MAX_GPUS, "", 9, 0);
    for (int i = 0; i < s.n_gpus; i++)
        snprintf(s.gpus[i].model, sizeof s.gpus[i].model, "NVIDIA Imaginary Accelerator %02d "
                 "With A Long Marketing Name", i);
    moe_policy p = policy("");
    moe_request r = request(8, 0, MOE_PREC_AUTO);
    moe_verdict v;
    verdict_decide(&p, &r, &s, &v);
    CHECK(v.kind == MOE_VERDICT_RUN);
    CHECK(strlen(v.paragraph) == sizeof v.paragraph - 1);
}

static void test_precheck(void)
{
    moe_policy p = policy("");
    moe_err e = {{0}};
    moe_request r = request(0, 0, MOE_PREC_AUTO);
    CHECK(verdict_precheck(&p, &r, 0, 0, &e) == 0); /* nothing known: nothing to say */
    CHECK(verdict_precheck(&p, &r, -1, -1, &e) == 0);
    r = request(4, 2, MOE_PREC_AUTO);
    CHECK(verdict_precheck(&p, &r, 8, 8, &e) == 0);
    CHECK(verdict_precheck(&p, &r, 8, 0, &e) == 0);
    CHECK(verdict_precheck(&p, &r, 0, 8, &e) == 0);

    CHECK(verdict_precheck(&p, &r, 4, 0, &e) == -1);
    CHECK_MSG(strstr(e.msg, "--moe-dp=2 x --moe-ep=4 = 8 ranks, but the job requests 4 GPUs"),
              "%s", e.msg);
    CHECK(verdict_precheck(&p, &r, 0, 16, &e) == -1);
    CHECK_MSG(strstr(e.msg, "requests 16 tasks"), "%s", e.msg);

    r = request(4, 0, MOE_PREC_AUTO);
    CHECK(verdict_precheck(&p, &r, 2, 0, &e) == -1);
    CHECK_MSG(strstr(e.msg, "--moe-ep=4 needs at least 4 GPUs, but the job requests 2"), "%s",
              e.msg);
    CHECK(verdict_precheck(&p, &r, 6, 0, &e) == -1);
    CHECK_MSG(strstr(e.msg, "6 GPUs, which do not divide by --moe-ep=4"), "%s", e.msg);
    CHECK(verdict_precheck(&p, &r, 0, 6, &e) == -1);
    CHECK_MSG(strstr(e.msg, "6 tasks, which do not divide"), "%s", e.msg);
    CHECK(verdict_precheck(&p, &r, 8, 4, &e) == -1);
    CHECK_MSG(strstr(e.msg, "8 GPUs but 4 tasks; moekit runs one task per GPU"), "%s", e.msg);
    CHECK(verdict_precheck(&p, &r, 8, 8, &e) == 0);

    r = request(-2, 0, MOE_PREC_AUTO);
    CHECK(verdict_precheck(&p, &r, 0, 0, &e) == -1);
    CHECK_MSG(strstr(e.msg, "--moe-ep=-2"), "%s", e.msg);
    r = request(2, -1, MOE_PREC_AUTO);
    CHECK(verdict_precheck(&p, &r, 0, 0, &e) == -1);
    CHECK_MSG(strstr(e.msg, "--moe-dp=-1"), "%s", e.msg);
}

static void test_names(void)
{
    char sm[16];
    verdict_sm_name(sm, sizeof sm, 10, 0);
    CHECK(strcmp(sm, "sm_100") == 0);
    verdict_sm_name(sm, sizeof sm, 9, 0);
    CHECK(strcmp(sm, "sm_90") == 0);
    verdict_sm_name(sm, sizeof sm, -1, -1);
    CHECK(strcmp(sm, "sm_??") == 0);
    CHECK(strcmp(verdict_arch_name(9, 0), "Hopper") == 0);
    CHECK(strcmp(verdict_arch_name(8, 9), "Ada Lovelace") == 0);
    CHECK(strcmp(verdict_arch_name(8, 6), "Ampere") == 0);
    CHECK(strcmp(verdict_arch_name(7, 5), "Turing") == 0);
    CHECK(strcmp(verdict_arch_name(12, 0), "consumer Blackwell") == 0);
    CHECK(strcmp(verdict_arch_name(-1, -1), "compute capability unknown") == 0);
    moe_precision p;
    CHECK(verdict_parse_precision("fp8_block", &p) == 0 && p == MOE_PREC_FP8_BLOCK);
    CHECK(verdict_parse_precision("auto", &p) == 0 && p == MOE_PREC_AUTO);
    CHECK(verdict_parse_precision("MXFP8", &p) == -1);
    CHECK(verdict_parse_precision("fp16", &p) == -1);
    CHECK(verdict_parse_precision(NULL, &p) == -1);
    CHECK(strcmp(precision_name(MOE_PREC_BF16), "bf16") == 0);
}

int main(void)
{
    topo = malloc(sizeof *topo);
    if (!topo)
        return 1;
    RUN(test_b200_mxfp8);
    RUN(test_layout_errors);
    RUN(test_multi_node);
    RUN(test_h200_fallbacks);
    RUN(test_strict_requests);
    RUN(test_reject_policy);
    RUN(test_mixed_node);
    RUN(test_consumer_pcie_node);
    RUN(test_unknown_gpu);
    RUN(test_cpu_only);
    RUN(test_other_architectures);
    RUN(test_long_paragraph_stays_bounded);
    RUN(test_precheck);
    RUN(test_names);
    free(topo);
    return check_summary("verdict");
}

/* moekit: moe-train's start-up recipe without a plugin
 * (trainer/train/precision_start.h) on given compute capabilities, from the
 * shipped configs as the command line overrides them; and the MFU's peak
 * for the recipe a run computes in (trainer_peak_tflops). */
#include <math.h>
#include <string.h>

#include "../../common/device_peak.h"
#include "../../trainer/train/precision_start.h"
#include "../../trainer/train/trainer.h"
#include "../check.h"

/* config NAME with the overrides, decided for one GPU: the return value */
static int decide(const char *name, int n, char **items, int major, int minor,
                  trainer_precision *tp, moe_err *e)
{
    static moe_config c;
    moe_err le = {{0}};
    if (config_load(&c, name, NULL, n, items, &le)) {
        CHECK_MSG(0, "%s", le.msg);
        return -2;
    }
    memset(tp, 0, sizeof *tp);
    return trainer_precision_for_gpu(&c.precision, major, minor, tp, e);
}

/* L1_8x7B_ep asks for mxfp8: on Hopper it trains in BF16 and says why in one
 * line; strictly asked it stops, naming precision.strict; on Blackwell it is
 * MXFP8 with nothing said. */
static void test_l1_on_hopper_falls_back(void)
{
    trainer_precision tp;
    moe_err e = {{0}};
    CHECK(decide("L1_8x7B_ep", 0, NULL, 9, 0, &tp, &e) == 0);
    CHECK(tp.precision == MOE_PREC_BF16);
    CHECK_MSG(strstr(tp.note, "precision.compute=mxfp8 cannot run on this GPU (compute "
                              "capability 9.0)") && strstr(tp.note, "training in bf16") &&
                  strstr(tp.note, "mxfp8 needs data-centre Blackwell") && !strchr(tp.note, '\n'),
              "%s", tp.note);

    char *strict[] = {"precision.strict=true"};
    CHECK(decide("L1_8x7B_ep", 1, strict, 9, 0, &tp, &e) == -1);
    CHECK_MSG(strstr(e.msg, "precision.compute=mxfp8 with precision.strict = true") &&
                  strstr(e.msg, "mxfp8 needs data-centre Blackwell"), "%s", e.msg);

    CHECK(decide("L1_8x7B_ep", 0, NULL, 10, 0, &tp, &e) == 0);
    CHECK(tp.precision == MOE_PREC_MXFP8 && tp.note[0] == 0);
    CHECK(decide("L1_8x7B_ep", 1, strict, 10, 0, &tp, &e) == 0);
    CHECK(tp.precision == MOE_PREC_MXFP8 && tp.note[0] == 0);
    /* an A100 and a GPU whose capability is unknown: bf16 too */
    CHECK(decide("L1_8x7B_ep", 0, NULL, 8, 0, &tp, &e) == 0 && tp.precision == MOE_PREC_BF16);
    CHECK(decide("L1_8x7B_ep", 0, NULL, -1, -1, &tp, &e) == 0 && tp.precision == MOE_PREC_BF16);
}

/* auto is resolved by the same rule (the trainer has no order of its own):
 * mxfp8 on Blackwell, fp8_block on Hopper while allowed, else bf16. */
static void test_auto(void)
{
    trainer_precision tp;
    moe_err e = {{0}};
    char *a[] = {"precision.compute=auto"};
    char *no_fp8[] = {"precision.compute=auto", "precision.allow_fp8_block=false"};
    CHECK(decide("L0_sanity", 1, a, 10, 0, &tp, &e) == 0 && tp.precision == MOE_PREC_MXFP8);
    CHECK(decide("L0_sanity", 1, a, 9, 0, &tp, &e) == 0 && tp.precision == MOE_PREC_FP8_BLOCK);
    CHECK(decide("L0_sanity", 2, no_fp8, 9, 0, &tp, &e) == 0 && tp.precision == MOE_PREC_BF16);
    CHECK(tp.note[0] == 0); /* auto asked for no recipe: nothing fell back */
    CHECK(decide("L0_sanity", 1, a, 8, 9, &tp, &e) == 0 && tp.precision == MOE_PREC_BF16);
    CHECK(decide("L0_sanity", 1, a, 7, 0, &tp, &e) == -1);
    CHECK_MSG(strstr(e.msg, "compute capability 7.0") && strstr(e.msg, "8.0 (Ampere)"), "%s",
              e.msg);
}

/* What the plugin passes (its verdict's recipe, strict) runs as it is. */
static void test_plugin_decided(void)
{
    trainer_precision tp;
    moe_err e = {{0}};
    char *bf16[] = {"precision.compute=bf16", "precision.strict=true"};
    CHECK(decide("L1_8x7B_ep", 2, bf16, 9, 0, &tp, &e) == 0);
    CHECK(tp.precision == MOE_PREC_BF16 && tp.note[0] == 0);
    char *fp8[] = {"precision.compute=fp8_block", "precision.allow_fp8_block=false",
                   "precision.allow_fp8_block=true", "precision.strict=true"};
    CHECK(decide("L1_8x7B_ep", 4, fp8, 9, 0, &tp, &e) == 0);
    CHECK(tp.precision == MOE_PREC_FP8_BLOCK && tp.note[0] == 0);
    /* a node unlike the verdict's: stop, never choose again */
    char *mx[] = {"precision.compute=mxfp8", "precision.strict=true"};
    CHECK(decide("L1_8x7B_ep", 2, mx, 9, 0, &tp, &e) == -1);
    char *fp32[] = {"precision.compute=fp32"};
    CHECK(decide("L0_sanity", 1, fp32, 9, 0, &tp, &e) == -1);
    CHECK_MSG(strstr(e.msg, "precision.compute=fp32 runs on the cpu backend only"), "%s", e.msg);
}

/* A recipe the backend still refuses (shapes, a probe): bf16 with its
 * reason, unless strictly asked. */
static void test_backend_refusal(void)
{
    moe_precision_cfg pc = {.compute = MOE_PREC_MXFP8};
    trainer_precision tp = {MOE_PREC_MXFP8, ""};
    moe_err e = {{0}};
    CHECK(trainer_precision_backend_refused(&pc, MOE_PREC_MXFP8, "hidden 20 is no multiple of 32",
                                            &tp, &e) == 0);
    CHECK(tp.precision == MOE_PREC_BF16 && strstr(tp.note, "hidden 20 is no multiple of 32"));
    pc.strict = 1;
    CHECK(trainer_precision_backend_refused(&pc, MOE_PREC_MXFP8, "hidden 20", &tp, &e) == -1);
    CHECK(strstr(e.msg, "precision.strict") != NULL);
    pc.compute = MOE_PREC_AUTO; /* auto picked it: bf16 whatever strict says */
    CHECK(trainer_precision_backend_refused(&pc, MOE_PREC_MXFP8, "hidden 20", &tp, &e) == 0);
}

/* The MFU's peak: a run in an FP8 recipe is measured against the GPU's FP8
 * peak, whatever the summary's label says ("fp8_block (experts) + bf16"). */
static double h100_peak(moe_backend *be, moe_precision p)
{
    (void)be;
    return device_peak_tflops(9, 0, p);
}

static void test_mfu_peak_follows_the_recipe(void)
{
    moe_backend be;
    memset(&be, 0, sizeof be);
    be.peak_tflops = h100_peak;
    static moe_trainer t;
    memset(&t, 0, sizeof t);
    t.be = &be;
    const struct {
        moe_precision p;
        const char *label;
        double peak;
    } runs[] = {{MOE_PREC_FP8_BLOCK, "fp8_block (experts) + bf16", 1978},
                {MOE_PREC_FP8_BLOCK, "fp8_block (experts, attention projections) + bf16", 1978},
                {MOE_PREC_MXFP8, "mxfp8 (experts) + bf16", 1978},
                {MOE_PREC_BF16, "bf16", 989},
                {MOE_PREC_MXFP8_EMULATED, "mxfp8_emulated (experts) + bf16", 989}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        t.compute = runs[i].p;
        t.precision = runs[i].label;
        CHECK_MSG(trainer_peak_tflops(&t) == runs[i].peak, "%s: peak %g, want %g",
                  runs[i].label, trainer_peak_tflops(&t), runs[i].peak);
    }
    CHECK(device_peak_tflops(10, 0, MOE_PREC_MXFP8) == 4500 &&
          device_peak_tflops(10, 0, MOE_PREC_BF16) == 2250);
    CHECK(device_peak_tflops(8, 0, MOE_PREC_BF16) == 312 && device_peak_tflops(8, 9, MOE_PREC_BF16) == 0);
}

int main(void)
{
    RUN(test_l1_on_hopper_falls_back);
    RUN(test_auto);
    RUN(test_plugin_decided);
    RUN(test_backend_refusal);
    RUN(test_mfu_peak_follows_the_recipe);
    return check_summary("precision_start");
}

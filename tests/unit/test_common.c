/* Unit tests: the rules every part shares (common/): which GPU runs which
 * precision recipe, and the EP x DP x experts layout rule. */
#include <string.h>

#include "../../common/device_peak.h"
#include "../../common/layout.h"
#include "../../common/precision.h"
#include "../check.h"

static void test_names_round_trip(void)
{
    for (int i = 0; i < MOE_PREC_COUNT; i++) {
        moe_precision p = MOE_PREC_COUNT;
        CHECK(precision_parse(precision_names[i], &p) == 0 && p == (moe_precision)i);
        CHECK(strcmp(precision_name((moe_precision)i), precision_names[i]) == 0);
    }
    CHECK(precision_names[MOE_PREC_COUNT] == NULL);
    moe_precision p = MOE_PREC_BF16;
    CHECK(precision_parse("MXFP8", &p) == -1 && precision_parse(NULL, &p) == -1);
    CHECK(p == MOE_PREC_BF16);
}

/* The recipes by compute capability: the table the verdict and the CUDA
 * backend both follow. */
static void test_gpu_rule(void)
{
    static const struct {
        int major, minor;
        int bf16, fp8_block, mxfp8, emulated;
    } gpus[] = {
        /* with this build's tensor-core kernels: sm_90a, sm_100a */
        {7, 0, 0, 0, 0, 0},  /* V100: no BF16 tensor cores */
        {8, 0, 1, 0, 0, 1},  /* A100 */
        {8, 9, 1, 0, 0, 1},  /* L40S */
        {9, 0, 1, 1, 0, 1},  /* H100, H200 */
        {10, 0, 1, 0, 1, 1}, /* B200 */
        {10, 3, 1, 0, 0, 1}, /* B300: no sm_103a MXFP8 kernels in this build */
        {12, 0, 1, 0, 0, 1}, /* RTX PRO 6000: no sm_100 tensor-core path */
        {-1, -1, 1, 0, 0, 1}, /* unknown: bf16 only */
    };
    CHECK_MSG(strcmp(precision_build_sass, "90a 100a") == 0 &&
                  strcmp(precision_build_ptx, "90") == 0,
              "the table below assumes common/rules.mk's lists; got \"%s\" / \"%s\"",
              precision_build_sass, precision_build_ptx);
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
        int M = gpus[i].major, m = gpus[i].minor;
        CHECK_MSG(precision_gpu_can_run(MOE_PREC_BF16, M, m, NULL, 0) == gpus[i].bf16, "%d.%d",
                  M, m);
        CHECK_MSG(precision_gpu_can_run(MOE_PREC_FP8_BLOCK, M, m, NULL, 0) == gpus[i].fp8_block,
                  "%d.%d", M, m);
        CHECK_MSG(precision_gpu_can_run(MOE_PREC_MXFP8, M, m, NULL, 0) == gpus[i].mxfp8, "%d.%d",
                  M, m);
        CHECK_MSG(precision_gpu_can_run(MOE_PREC_MXFP8_EMULATED, M, m, NULL, 0) ==
                      gpus[i].emulated, "%d.%d", M, m);
        CHECK(!precision_gpu_can_run(MOE_PREC_AUTO, M, m, NULL, 0));
        CHECK(!precision_gpu_can_run(MOE_PREC_FP32, M, m, NULL, 0));
    }
}

static void test_gpu_rule_says_why(void)
{
    char why[256] = "";
    CHECK(!precision_gpu_can_run(MOE_PREC_MXFP8, 9, 0, why, sizeof why));
    CHECK_MSG(strstr(why, "Blackwell") && strstr(why, "fp8_block is the Hopper recipe"), "%s",
              why);
    CHECK(!precision_gpu_can_run(MOE_PREC_MXFP8, 12, 0, why, sizeof why));
    CHECK_MSG(strstr(why, "consumer Blackwell"), "%s", why);
    CHECK(!precision_gpu_can_run(MOE_PREC_FP8_BLOCK, 10, 0, why, sizeof why));
    CHECK_MSG(strstr(why, "Hopper") && strstr(why, "mxfp8 is the Blackwell recipe"), "%s", why);
    CHECK(!precision_gpu_can_run(MOE_PREC_BF16, 7, 5, why, sizeof why));
    CHECK_MSG(strstr(why, "8.0"), "%s", why);
    /* A B300 from an sm_100a-only build: no MXFP8 kernels for it, said so. */
    CHECK(!precision_gpu_can_run(MOE_PREC_MXFP8, 10, 3, why, sizeof why));
    CHECK_MSG(strstr(why, "sm_90a, sm_100a") && strstr(why, "10.3") && strstr(why, "sm_103a"),
              "%s", why);
    CHECK(precision_gpu_can_run(MOE_PREC_FP8_BLOCK, 9, 0, NULL, 0));
    char small[8];
    CHECK(!precision_gpu_can_run(MOE_PREC_MXFP8, 9, 0, small, sizeof small));
    CHECK(strlen(small) == sizeof small - 1);
}

/* The recipe table: one row a recipe, found by its precision, saying what
 * the kernels and the planner read (block, alignment, scale layouts, what
 * the backward keeps, the peak), the GPU rule and the usage texts. */
static void test_recipe_rows(void)
{
    CHECK(precision_recipe(MOE_PREC_AUTO) == NULL && precision_recipe(MOE_PREC_COUNT) == NULL &&
          precision_recipe((moe_precision)-1) == NULL);
    for (int i = MOE_PREC_AUTO + 1; i < MOE_PREC_COUNT; i++) {
        const moe_recipe *r = precision_recipe((moe_precision)i);
        CHECK_MSG(r && r->precision == (moe_precision)i && r->help && r->help[0] && r->align >= 1,
                  "row %d", i);
    }
    const moe_recipe *blk = precision_recipe(MOE_PREC_FP8_BLOCK);
    CHECK(blk->gemms == MOE_GEMMS_E4M3 && blk->block == 128 && blk->align == 16 &&
          blk->act_scales == MOE_SCALES_FP32_1X128 &&
          blk->weight_scales == MOE_SCALES_FP32_128X128 && blk->cc_major == 9 &&
          blk->saves_e4m3_swiglu_in && !blk->fused_swiglu_quant && blk->peak_vs_bf16 == 2);
    const moe_recipe *mx = precision_recipe(MOE_PREC_MXFP8);
    CHECK(mx->gemms == MOE_GEMMS_E4M3 && mx->block == 32 && mx->align == 32 &&
          mx->act_scales == MOE_SCALES_E8M0_1X32 && mx->weight_scales == MOE_SCALES_E8M0_1X32 &&
          mx->cc_major == 10 && !mx->saves_e4m3_swiglu_in && mx->fused_swiglu_quant &&
          mx->peak_vs_bf16 == 2);
    const moe_recipe *emu = precision_recipe(MOE_PREC_MXFP8_EMULATED);
    CHECK(emu->gemms == MOE_GEMMS_E4M3_EMULATED && emu->block == 32 && emu->cc_major == -1 &&
          emu->peak_vs_bf16 == 1 && !emu->job_choice);
    CHECK(precision_recipe(MOE_PREC_BF16)->gemms == MOE_GEMMS_BF16 &&
          precision_recipe(MOE_PREC_BF16)->job_choice);
    CHECK(precision_recipe(MOE_PREC_FP32)->gemms == MOE_GEMMS_FP32 &&
          precision_recipe(MOE_PREC_FP32)->cc_major == 0);
    /* the MFU's peak is the row's: bf16's times peak_vs_bf16 where FP8 tensor cores are */
    for (int i = MOE_PREC_AUTO + 1; i < MOE_PREC_COUNT; i++) {
        const moe_recipe *r = precision_recipe((moe_precision)i);
        CHECK_MSG(device_peak_tflops(9, 0, r->precision) == 989.0 * r->peak_vs_bf16, "row %d", i);
        CHECK_MSG(device_peak_tflops(8, 0, r->precision) == 312.0, "row %d", i);
    }
    /* usage texts from the table; the literal jobs' list agrees with it */
    char names[128];
    CHECK_MSG(strcmp(precision_name_list(names, sizeof names, "|", "|", 1),
                     MOE_PRECISION_JOB_NAMES) == 0, "%s", names);
    CHECK_MSG(strcmp(precision_name_list(names, sizeof names, ", ", " or ", 1),
                     "auto, bf16, fp8_block or mxfp8") == 0, "%s", names);
    CHECK_MSG(strcmp(precision_name_list(names, sizeof names, ", ", " or ", 0),
                     "auto, fp32, bf16, fp8_block, mxfp8 or mxfp8_emulated") == 0, "%s", names);
    char tiny[6];
    CHECK(strcmp(precision_name_list(tiny, sizeof tiny, ", ", " or ", 1), "auto,") == 0);
}

static void test_layout_rule(void)
{
    int dp = -7;
    CHECK(layout_rule(8, 2, 0, 8, &dp) == MOE_LAYOUT_OK && dp == 4);
    CHECK(layout_rule(8, 2, 4, 8, &dp) == MOE_LAYOUT_OK && dp == 4);
    CHECK(layout_rule(16, 16, 1, 16, &dp) == MOE_LAYOUT_OK && dp == 1); /* EP may span nodes */
    CHECK(layout_rule(0, 4, 0, 8, &dp) == MOE_LAYOUT_OK && dp == 0);    /* ranks unknown */
    CHECK(layout_rule(6, 4, 0, 0, &dp) == MOE_LAYOUT_EP_SPLITS_RANKS);
    CHECK(layout_rule(2, 4, 0, 8, &dp) == MOE_LAYOUT_EP_OVER_RANKS);
    CHECK(layout_rule(4, 2, 1, 8, &dp) == MOE_LAYOUT_DP_X_EP);
    CHECK(layout_rule(8, 4, 0, 6, &dp) == MOE_LAYOUT_EP_SPLITS_EXPERTS);
    CHECK(layout_rule(0, 3, 0, 8, &dp) == MOE_LAYOUT_EP_SPLITS_EXPERTS);
    CHECK(layout_rule(8, 0, 0, 8, &dp) == MOE_LAYOUT_NOT_POSITIVE);
    CHECK(layout_rule(8, 2, -1, 8, &dp) == MOE_LAYOUT_NOT_POSITIVE);
    /* the rank checks come first: their message is the one to act on */
    CHECK(layout_rule(6, 4, 0, 6, &dp) == MOE_LAYOUT_EP_SPLITS_RANKS);
    CHECK(dp == 0); /* unchanged by the failures since the last success */
}

int main(void)
{
    RUN(test_names_round_trip);
    RUN(test_gpu_rule);
    RUN(test_gpu_rule_says_why);
    RUN(test_recipe_rows);
    RUN(test_layout_rule);
    return check_summary("common");
}

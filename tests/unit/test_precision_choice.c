/* moekit: precision_choose's table (common/precision_choice.h), the one rule
 * behind the plugin's verdict and moe-train's own start-up choice: every GPU
 * mix x every request x every combination of the rules. */
#include <string.h>

#include "../../common/precision_choice.h"
#include "../check.h"

typedef enum { TOO_OLD, ALL_BLACKWELL, ALL_HOPPER, OTHER } mix_class;

typedef struct {
    const char *name;
    int n;
    precision_gpu g[3];
    mix_class cls;
    int deciding;      /* the GPU a refusal or fallback names: the first that lacks it */
    int deciding_fp8;  /* the same for fp8_block (the first not Hopper) */
} mix;

static const mix mixes[] = {
    {"H100", 1, {{9, 0}}, ALL_HOPPER, 0, -1},
    {"2x H200", 2, {{9, 0}, {9, 0}}, ALL_HOPPER, 0, -1},
    {"B200", 1, {{10, 0}}, ALL_BLACKWELL, -1, 0},
    {"2x B200", 2, {{10, 0}, {10, 0}}, ALL_BLACKWELL, -1, 0},
    {"RTX 5090 (12.0)", 1, {{12, 0}}, OTHER, 0, 0},
    {"L40S (8.9)", 1, {{8, 9}}, OTHER, 0, 0},
    {"A100", 1, {{8, 0}}, OTHER, 0, 0},
    {"unknown GPU", 1, {{-1, -1}}, OTHER, 0, 0},
    {"B200 + H100", 2, {{10, 0}, {9, 0}}, OTHER, 1, 0},
    {"H100 + L40S", 2, {{9, 0}, {8, 9}}, OTHER, 0, 1},
    {"B200 + B200 + A100", 3, {{10, 0}, {10, 0}, {8, 0}}, OTHER, 2, 0},
    {"V100 (7.0)", 1, {{7, 0}}, TOO_OLD, 0, 0},
    {"B200 + T4 (7.5)", 2, {{10, 0}, {7, 5}}, TOO_OLD, 1, 1},
};

static const moe_precision wants[] = {MOE_PREC_AUTO,  MOE_PREC_BF16,  MOE_PREC_FP8_BLOCK,
                                      MOE_PREC_MXFP8, MOE_PREC_MXFP8_EMULATED, MOE_PREC_FP32};

/* The rule as precision_choice.h states it, case by case. */
static precision_choice expected(const mix *m, moe_precision want, const precision_rules *r)
{
    precision_choice c = {PRECISION_AS_ASKED, want, PRECISION_WHY_NONE, -1};
    if (want == MOE_PREC_FP32)
        return (precision_choice){PRECISION_REFUSED, MOE_PREC_AUTO, PRECISION_WHY_NOT_GPU_RECIPE, -1};
    if (m->cls == TOO_OLD)
        return (precision_choice){PRECISION_REFUSED, MOE_PREC_AUTO, PRECISION_WHY_TOO_OLD,
                                  m->deciding};
    if (m->cls == ALL_BLACKWELL) {
        if (want == MOE_PREC_AUTO || want == MOE_PREC_MXFP8)
            c.precision = MOE_PREC_MXFP8;
        if (want == MOE_PREC_FP8_BLOCK)
            c = r->strict ? (precision_choice){PRECISION_REFUSED, MOE_PREC_AUTO,
                                               PRECISION_WHY_STRICT, 0}
                          : (precision_choice){PRECISION_UPGRADED, MOE_PREC_MXFP8,
                                               PRECISION_WHY_NONE, -1};
        return c;
    }
    if (r->reject_non_blackwell)
        return (precision_choice){PRECISION_REFUSED, MOE_PREC_AUTO, PRECISION_WHY_BLACKWELL_ONLY,
                                  m->deciding};
    const int fp8_ok = m->cls == ALL_HOPPER && r->allow_fp8_block;
    precision_why why = PRECISION_WHY_NONE;
    int gpu = -1;
    switch (want) {
    case MOE_PREC_AUTO:
        c.precision = fp8_ok ? MOE_PREC_FP8_BLOCK : MOE_PREC_BF16;
        return c;
    case MOE_PREC_FP8_BLOCK:
        if (fp8_ok)
            return c;
        why = m->cls == ALL_HOPPER ? PRECISION_WHY_FP8_NOT_ALLOWED : PRECISION_WHY_FP8_NOT_HOPPER;
        gpu = m->cls == ALL_HOPPER ? 0 : m->deciding_fp8;
        break;
    case MOE_PREC_MXFP8:
        why = PRECISION_WHY_NOT_BLACKWELL;
        gpu = m->deciding;
        break;
    default: /* bf16, mxfp8_emulated: any GPU of 8.0 or newer */
        return c;
    }
    return r->strict ? (precision_choice){PRECISION_REFUSED, MOE_PREC_AUTO, why, gpu}
                     : (precision_choice){PRECISION_FELL_BACK, MOE_PREC_BF16, why, gpu};
}

static void test_every_mix_request_and_rule(void)
{
    int cases = 0;
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        for (size_t w = 0; w < sizeof wants / sizeof wants[0]; w++)
            for (int bits = 0; bits < 8; bits++) {
                const mix *m = &mixes[i];
                const precision_rules r = {bits & 1, (bits >> 1) & 1, (bits >> 2) & 1};
                const precision_choice got = precision_choose(wants[w], m->g, m->n, &r);
                const precision_choice want = expected(m, wants[w], &r);
                CHECK_MSG(got.outcome == want.outcome && got.precision == want.precision &&
                              got.why == want.why && got.gpu == want.gpu,
                          "%s, %s, reject=%d allow_fp8_block=%d strict=%d: got outcome %d %s "
                          "why %d gpu %d, want outcome %d %s why %d gpu %d",
                          m->name, precision_name(wants[w]), r.reject_non_blackwell,
                          r.allow_fp8_block, r.strict, got.outcome, precision_name(got.precision),
                          got.why, got.gpu, want.outcome, precision_name(want.precision),
                          want.why, want.gpu);
                char why[320];
                precision_choice_reason(&got, wants[w], m->g, why, sizeof why);
                CHECK_MSG((got.why == PRECISION_WHY_NONE) == (why[0] == 0),
                          "%s, %s: reason '%s' for outcome %d", m->name,
                          precision_name(wants[w]), why, got.outcome);
                cases++;
            }
    CHECK(cases == 13 * 6 * 8);
}

/* The mission's rule in words: MXFP8 on Blackwell, BF16 elsewhere, refused
 * only when asked strictly or by the policy; the reason names the recipe. */
static void test_mxfp8_on_hopper_says_why(void)
{
    const precision_gpu h100 = {9, 0};
    precision_rules loose = {0, 0, 0}, strict = {0, 0, 1}, reject = {1, 0, 0};
    precision_choice c = precision_choose(MOE_PREC_MXFP8, &h100, 1, &loose);
    CHECK(c.outcome == PRECISION_FELL_BACK && c.precision == MOE_PREC_BF16);
    char why[320];
    precision_choice_reason(&c, MOE_PREC_MXFP8, &h100, why, sizeof why);
    CHECK_MSG(strstr(why, "mxfp8 needs data-centre Blackwell") && strstr(why, "10.x"), "%s", why);
    CHECK(precision_choose(MOE_PREC_MXFP8, &h100, 1, &strict).outcome == PRECISION_REFUSED);
    c = precision_choose(MOE_PREC_BF16, &h100, 1, &reject);
    CHECK(c.outcome == PRECISION_REFUSED && c.why == PRECISION_WHY_BLACKWELL_ONLY);
    precision_choice_reason(&c, MOE_PREC_BF16, &h100, why, sizeof why);
    CHECK_MSG(strstr(why, "on_non_blackwell=reject") != NULL, "%s", why);
}

int main(void)
{
    /* the table assumes this build's kernels for Hopper and data-centre Blackwell */
    if (!strstr(precision_build_sass, "90a") || !strstr(precision_build_sass, "100a")) {
        printf("precision_choice: this build carries GPU code for '%s', not sm_90a and sm_100a: "
               "the table needs both\n", precision_build_sass);
        return 1;
    }
    RUN(test_every_mix_request_and_rule);
    RUN(test_mxfp8_on_hopper_says_why);
    return check_summary("precision_choice");
}

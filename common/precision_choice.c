/* moekit: the recipe a job trains in (precision_choice.h). */
#include "precision_choice.h"

#include <stdio.h>

static int all_run(moe_precision p, const precision_gpu *g, int n, int *first_not)
{
    for (int i = 0; i < n; i++)
        if (!precision_gpu_can_run(p, g[i].cc_major, g[i].cc_minor, NULL, 0)) {
            if (first_not)
                *first_not = i;
            return 0;
        }
    return 1;
}

static precision_choice made(precision_outcome o, moe_precision p, precision_why why, int gpu)
{
    precision_choice c = {o, p, why, gpu};
    return c;
}

/* an asked recipe that cannot run: BF16, or refused when strict */
static precision_choice fall_back(const precision_rules *r, precision_why why, int gpu)
{
    return r->strict ? made(PRECISION_REFUSED, MOE_PREC_AUTO, why, gpu)
                     : made(PRECISION_FELL_BACK, MOE_PREC_BF16, why, gpu);
}

precision_choice precision_choose(moe_precision want, const precision_gpu *gpus, int n_gpus,
                                  const precision_rules *rules)
{
    int old = -1, not_bw = -1, not_hopper = -1;
    if (want != MOE_PREC_AUTO && want != MOE_PREC_BF16 && want != MOE_PREC_FP8_BLOCK &&
        want != MOE_PREC_MXFP8 && want != MOE_PREC_MXFP8_EMULATED)
        return made(PRECISION_REFUSED, MOE_PREC_AUTO, PRECISION_WHY_NOT_GPU_RECIPE, -1);
    if (!all_run(MOE_PREC_BF16, gpus, n_gpus, &old))
        return made(PRECISION_REFUSED, MOE_PREC_AUTO, PRECISION_WHY_TOO_OLD, old);
    const int all_bw = all_run(MOE_PREC_MXFP8, gpus, n_gpus, &not_bw);
    const int all_hopper = all_run(MOE_PREC_FP8_BLOCK, gpus, n_gpus, &not_hopper);
    if (all_bw) {
        if (want == MOE_PREC_BF16 || want == MOE_PREC_MXFP8_EMULATED)
            return made(PRECISION_AS_ASKED, want, PRECISION_WHY_NONE, -1);
        if (want == MOE_PREC_FP8_BLOCK)
            return rules->strict ? made(PRECISION_REFUSED, MOE_PREC_AUTO, PRECISION_WHY_STRICT, 0)
                                 : made(PRECISION_UPGRADED, MOE_PREC_MXFP8, PRECISION_WHY_NONE, -1);
        return made(PRECISION_AS_ASKED, MOE_PREC_MXFP8, PRECISION_WHY_NONE, -1);
    }
    if (rules->reject_non_blackwell)
        return made(PRECISION_REFUSED, MOE_PREC_AUTO, PRECISION_WHY_BLACKWELL_ONLY, not_bw);
    const int fp8_block_ok = all_hopper && rules->allow_fp8_block;
    switch (want) {
    case MOE_PREC_BF16:
    case MOE_PREC_MXFP8_EMULATED:
        return made(PRECISION_AS_ASKED, want, PRECISION_WHY_NONE, -1);
    case MOE_PREC_FP8_BLOCK:
        if (fp8_block_ok)
            return made(PRECISION_AS_ASKED, MOE_PREC_FP8_BLOCK, PRECISION_WHY_NONE, -1);
        return all_hopper ? fall_back(rules, PRECISION_WHY_FP8_NOT_ALLOWED, 0)
                          : fall_back(rules, PRECISION_WHY_FP8_NOT_HOPPER, not_hopper);
    case MOE_PREC_MXFP8:
        return fall_back(rules, PRECISION_WHY_NOT_BLACKWELL, not_bw);
    default: /* auto (the others are refused above) */
        return made(PRECISION_AS_ASKED, fp8_block_ok ? MOE_PREC_FP8_BLOCK : MOE_PREC_BF16,
                    PRECISION_WHY_NONE, -1);
    }
}

void precision_choice_reason(const precision_choice *c, moe_precision want,
                             const precision_gpu *gpus, char *out, size_t n)
{
    if (!n)
        return;
    out[0] = 0;
    const precision_gpu *g = c->gpu >= 0 ? &gpus[c->gpu] : NULL;
    switch (c->why) {
    case PRECISION_WHY_TOO_OLD:
        precision_gpu_can_run(MOE_PREC_BF16, g->cc_major, g->cc_minor, out, n);
        break;
    case PRECISION_WHY_BLACKWELL_ONLY:
        snprintf(out, n, "the administrator's policy admits only data-centre Blackwell GPUs "
                         "(on_non_blackwell=reject)");
        break;
    case PRECISION_WHY_NOT_BLACKWELL:
    case PRECISION_WHY_FP8_NOT_HOPPER:
        precision_gpu_can_run(want, g->cc_major, g->cc_minor, out, n);
        break;
    case PRECISION_WHY_FP8_NOT_ALLOWED:
        snprintf(out, n, "fp8_block is not allowed here (precision.allow_fp8_block = false, or "
                         "the administrator's allow_fp8_block=no)");
        break;
    case PRECISION_WHY_STRICT:
        snprintf(out, n, "fp8_block is the Hopper recipe; on Blackwell moekit runs mxfp8 "
                         "instead, which strict rules do not allow");
        break;
    case PRECISION_WHY_NOT_GPU_RECIPE:
        precision_gpu_can_run(want, 9, 0, out, n); /* fp32, unknown: whatever the GPU */
        break;
    default:
        break;
    }
}

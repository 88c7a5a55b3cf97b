/* moekit: moe-train's start-up recipe (precision_start.h). */
#include "precision_start.h"

#include <stdio.h>

#include "../../common/precision_choice.h"

int trainer_precision_for_gpu(const moe_precision_cfg *pc, int cc_major, int cc_minor,
                              trainer_precision *out, moe_err *e)
{
    const moe_precision want = pc->compute;
    out->note[0] = 0;
    if (want == MOE_PREC_FP32)
        return moe_errf(e, "precision.compute=fp32 runs on the cpu backend only; on a GPU use "
                           "bf16 (or auto)");
    const precision_gpu gpu = {cc_major, cc_minor};
    const precision_rules rules = {0, pc->allow_fp8_block, pc->strict};
    const precision_choice c = precision_choose(want, &gpu, 1, &rules);
    char why[320];
    precision_choice_reason(&c, want, &gpu, why, sizeof why);
    switch (c.outcome) {
    case PRECISION_REFUSED:
        if (c.why == PRECISION_WHY_TOO_OLD)
            return moe_errf(e, "this GPU (compute capability %d.%d) cannot train: %s", cc_major,
                            cc_minor, why);
        return moe_errf(e, "precision.compute=%s with precision.strict = true: %s; set "
                           "precision.compute=auto (or bf16), or leave precision.strict out to "
                           "train in bf16 here",
                        precision_name(want), why);
    case PRECISION_FELL_BACK:
        snprintf(out->note, sizeof out->note,
                 "moe-train: precision: precision.compute=%s cannot run on this GPU (compute "
                 "capability %d.%d): %s; training in bf16 (precision.strict = true stops "
                 "instead)",
                 precision_name(want), cc_major, cc_minor, why);
        break;
    case PRECISION_UPGRADED:
        snprintf(out->note, sizeof out->note,
                 "moe-train: precision: precision.compute=%s is the Hopper recipe; on this "
                 "Blackwell GPU (compute capability %d.%d) the run trains in %s",
                 precision_name(want), cc_major, cc_minor, precision_name(c.precision));
        break;
    case PRECISION_AS_ASKED:
        break;
    }
    out->precision = c.precision;
    return 0;
}

int trainer_precision_backend_refused(const moe_precision_cfg *pc, moe_precision p,
                                      const char *why, trainer_precision *out, moe_err *e)
{
    if (pc->strict && pc->compute != MOE_PREC_AUTO) /* auto asked for no recipe */
        return moe_errf(e, "precision.compute=%s with precision.strict = true: %s",
                        precision_name(p), why);
    snprintf(out->note, sizeof out->note,
             "moe-train: precision: %s cannot run here: %s; training in bf16 "
             "(precision.strict = true stops instead)",
             precision_name(p), why);
    out->precision = MOE_PREC_BF16;
    return 0;
}

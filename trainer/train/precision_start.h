/* moekit: the recipe a GPU run of moe-train trains in, decided at start-up
 * by precision_choose (common/precision_choice.h), the rule of the plugin's
 * verdict: on the run's GPU under the config's precision.* keys. A run the
 * plugin launched gets the verdict's recipe with precision.strict = true,
 * which this only checks (it trains in exactly that or stops). */
#ifndef MOE_PRECISION_START_H
#define MOE_PRECISION_START_H

#include <stddef.h>

#include "../../common/err.h"
#include "../config/config.h"

typedef struct {
    moe_precision precision; /* what the run trains in */
    char note[512];          /* one line when that is not what was asked, else "" */
} trainer_precision;

/* For a GPU of compute capability cc_major.cc_minor (-1: unknown): 0 with
 * the recipe, or -1 with the refusal (naming precision.compute and, where
 * it decided, precision.strict) in e. */
int trainer_precision_for_gpu(const moe_precision_cfg *pc, int cc_major, int cc_minor,
                              trainer_precision *out, moe_err *e);

/* The line said when the backend refuses a recipe precision_choose gave
 * (its shapes, its kernels): bf16, unless precision.strict with a recipe
 * named (then -1 with the refusal in e). why: the backend's reason. */
int trainer_precision_backend_refused(const moe_precision_cfg *pc, moe_precision p,
                                      const char *why, trainer_precision *out, moe_err *e);

#endif

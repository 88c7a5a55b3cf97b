/* moekit low precision: every format's reference quantisers, for code that
 * uses several (the CUDA backend, the planner, the tests). A format's own
 * header is FORMAT/FORMAT.h; what they share is lowp_ref.h. */
#ifndef MOE_LOWP_FP8_H
#define MOE_LOWP_FP8_H

#include "lowp_ref.h"
#include "fp8_block/fp8_block.h"
#include "mxfp8/mxfp8.h"

#endif

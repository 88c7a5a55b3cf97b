/* moekit: parameter-table helpers used inside the model. */
#ifndef MOE_PARAMS_H
#define MOE_PARAMS_H

#include "model.h"

int params_layout(moe_model *m, moe_err *e);
const moe_param *params_find(const moe_model *m, moe_param_kind kind, int layer);
/* elements of one matrix (one expert's for expert tensors) */
size_t params_matrix_elems(const moe_param *p);

#endif

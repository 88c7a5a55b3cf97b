/* moekit: the model's dimensions from its config section. */
#ifndef MOE_DIMS_CONFIG_H
#define MOE_DIMS_CONFIG_H

#include "../config/config.h"
#include "model.h"

moe_dims model_dims_from_config(const moe_model_cfg *mc);

#endif

/* moekit: the model's dimensions from its config section (dims_config.h). */
#include "dims_config.h"

moe_dims model_dims_from_config(const moe_model_cfg *mc)
{
    moe_dims d = {.C = mc->hidden_size, .L = mc->num_layers, .NH = mc->num_heads,
                  .NKV = mc->num_kv_heads,
                  .HD = mc->head_dim ? mc->head_dim : mc->hidden_size / mc->num_heads,
                  .E = mc->num_experts, .K = mc->top_k, .I = mc->intermediate_size,
                  .V = mc->vocab_size, .eps = mc->rms_norm_eps, .theta = mc->rope_theta,
                  .aux_coef = mc->router_aux_loss_coef};
    return d;
}

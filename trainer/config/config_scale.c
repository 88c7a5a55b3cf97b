/* moekit: the largest run a configuration may describe (config_scale.h). */
#include "config_scale.h"

#include <math.h>

int config_scale_check(const moe_config *c, int ep, int dp, moe_err *e)
{
    const moe_model_cfg *m = &c->model;
    double N = (double)c->train.micro_batch_size * c->train.seq_length;
    if (N > MOE_MAX_TOKENS)
        return moe_errf(e, "train.micro_batch_size x train.seq_length = %d x %d = %.0f tokens a "
                           "micro-batch; at most %d",
                        c->train.micro_batch_size, c->train.seq_length, N, MOE_MAX_TOKENS);
    double rows = N * m->top_k * (ep > 1 ? fmax(1.0, c->parallel.expert_capacity_factor) : 1.0);
    if (rows > 2147483647.0)
        return moe_errf(e, "a micro-batch of %.0f tokens x model.top_k = %d%s makes %.0f expert "
                           "rows a rank; at most 2147483647",
                        N, m->top_k, ep > 1 ? " x parallel.expert_capacity_factor" : "", rows);
    /* every row the EP group could send one rank is numbered in an int32 */
    if ((double)ep * N * m->top_k > 2147483647.0)
        return moe_errf(e, "parallel.ep = %d x %.0f tokens a micro-batch x model.top_k = %d is "
                           "%.0f expert rows one rank may receive; at most 2147483647",
                        ep, N, m->top_k, (double)ep * N * m->top_k);
    if (ep < 1 || dp < 0 || (double)ep * (dp ? dp : 1) > MOE_MAX_WORLD)
        return moe_errf(e, "EP=%d x DP=%d is %.0f ranks; a run has at most %d", ep, dp,
                        (double)ep * dp, MOE_MAX_WORLD);
    double C = m->hidden_size, HD = m->head_dim ? m->head_dim : (double)m->hidden_size / m->num_heads;
    double attn = 2 * C * m->num_heads * HD + 2 * C * m->num_kv_heads * HD;
    double expert = 3.0 * m->intermediate_size * C;
    double dense_layer = 2 * C + attn + (double)m->num_experts * C;
    double total = 2.0 * m->vocab_size * C + C + (double)m->num_layers * (dense_layer + m->num_experts * expert);
    if (total > MOE_MAX_PARAMS)
        return moe_errf(e, "model.num_layers = %d, num_experts = %d, hidden_size = %d, "
                           "intermediate_size = %d, vocab_size = %d make %.3g parameters; at "
                           "most %.3g",
                        m->num_layers, m->num_experts, m->hidden_size, m->intermediate_size,
                        m->vocab_size, total, MOE_MAX_PARAMS);
    /* one rank's gradients: the dense parameters and its share of the experts */
    double local = 2.0 * m->vocab_size * C + C +
                   (double)m->num_layers * (dense_layer + (double)m->num_experts / ep * expert);
    double bucket = (double)c->parallel.grad_bucket_mb * 1048576.0;
    double buckets = ceil(4.0 * local / bucket);
    if (buckets > MOE_MAX_BUCKETS)
        return moe_errf(e, "parallel.grad_bucket_mb = %d cuts one rank's %.1f GiB of gradients "
                           "into %.0f buckets, one reduce-scatter each a step; at most %d: make "
                           "it at least %.0f",
                        c->parallel.grad_bucket_mb, 4.0 * local / 1073741824.0, buckets,
                        MOE_MAX_BUCKETS, ceil(4.0 * local / 1048576.0 / MOE_MAX_BUCKETS));
    return 0;
}

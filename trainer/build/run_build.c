/* moekit: the one builder of dispatcher, model and optimizer (run_build.h). */
#include "run_build.h"

#include <string.h>

#include "../model/dims_config.h"
#include "../dispatch/dispatch_ep.h"

moe_build_spec build_spec_from_config(const moe_config *c, moe_par *par)
{
    return (moe_build_spec){
        .dims = model_dims_from_config(&c->model),
        .B = c->train.micro_batch_size,
        .T = c->train.seq_length,
        .par = par,
        .capacity_factor = c->parallel.expert_capacity_factor,
        .overlap_exchange = c->parallel.overlap_expert_exchange,
        .recompute = model_recompute_mode(c->train.activation_recompute,
                                          c->train.recompute_experts),
        .moments = c->optimizer.moments_dtype,
        .bucket_bytes = (size_t)c->parallel.grad_bucket_mb << 20,
        .init_on_host = c->runtime.init_on == MOE_RT_INIT_HOST,
    };
}

static int open_dispatcher(moe_build *b, const moe_build_spec *s, moe_err *e)
{
    if (s->par && s->par->ep_size > 1) {
        if (dispatcher_ep_create(&b->disp, s->par->ep, s->dims.E, e))
            return -1;
        dispatcher_ep_set_capacity(b->disp, s->capacity_factor);
        dispatcher_ep_set_overlap(b->disp, s->overlap_exchange);
        return 0;
    }
    return dispatcher_local_create(&b->disp, e);
}

/* One rank keeps its moments in the model, made in their dtype; several
 * leave them to the distributed optimizer, which shards them. */
static int open_model(moe_build *b, const moe_build_spec *s, moe_backend *be, moe_err *e)
{
    int world = s->par ? s->par->size : 1;
    int ep_rank = s->par ? s->par->ep_rank : 0, ep_size = s->par ? s->par->ep_size : 1;
    if (model_create_parallel(&b->model, &s->dims, be, b->disp, s->B, s->T, ep_rank, ep_size,
                              model_moments_mode(world == 1, s->moments), s->recompute, e))
        return -1;
    b->model->init_on_host = s->init_on_host;
    if (world == 1)
        return 0;
    moe_zero_opts zo = {.bucket_bytes = s->bucket_bytes,
                        .moments_bf16 = s->moments == MOE_MOMENTS_DTYPE_BF16};
    be->mem_kind = MOE_MEM_OPTIMIZER;
    int rc = zero_create(&b->zero, b->model, s->par, &zo, e);
    be->mem_kind = MOE_MEM_WORKSPACE;
    return rc;
}

int build_run(moe_build *b, const moe_build_spec *s, moe_backend *be, moe_err *e)
{
    memset(b, 0, sizeof *b);
    if (open_dispatcher(b, s, e) || open_model(b, s, be, e)) {
        build_close(b);
        return -1;
    }
    return 0;
}

void build_close(moe_build *b)
{
    zero_destroy(b->zero);
    if (b->model)
        model_destroy(b->model);
    if (b->disp)
        b->disp->destroy(b->disp);
    memset(b, 0, sizeof *b);
}

/* moekit: the memory plan (see plan.h). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include "../build/run_build.h"
#include "../config/config_scale.h"
#include "../model/dims_config.h"
#include "../model/model.h"
#include "../dispatch/dispatch_ep.h"
#include "../parallel/zero.h"
#include "count_backend.h"
#include "plan_comm.h"

static const double GIB = 1073741824.0;

const char *plan_kind_name(moe_mem_kind k)
{
    static const char *const names[MOE_MEM_KINDS] = {
        [MOE_MEM_WORKSPACE] = "workspace (backward scratch, tokens)",
        [MOE_MEM_WEIGHTS] = "compute weights",
        [MOE_MEM_MASTER] = "master remainder",
        [MOE_MEM_GRADS] = "gradients",
        [MOE_MEM_OPTIMIZER] = "optimizer state",
        [MOE_MEM_ACTIVATIONS] = "activations",
        [MOE_MEM_CAPACITY] = "capacity buffers (expert rows)",
        [MOE_MEM_COMM] = "communication buffers",
    };
    return k >= 0 && k < MOE_MEM_KINDS ? names[k] : "?";
}

/* The groups a rank of EP x DP belongs to, as rank 0 of each. */
typedef struct {
    moe_par par;
    moe_comm *world, *ep, *dp;
} plan_groups;

static void groups_close(plan_groups *g)
{
    comm_destroy(g->world);
    comm_destroy(g->ep);
    comm_destroy(g->dp);
}

static int groups_open(plan_groups *g, int ep, int dp, moe_err *e)
{
    memset(g, 0, sizeof *g);
    if (plan_comm_create(&g->world, "world", ep * dp, e) || plan_comm_create(&g->ep, "ep", ep, e) ||
        plan_comm_create(&g->dp, "dp", dp, e)) {
        groups_close(g);
        return -1;
    }
    g->par = (moe_par){.world = g->world, .ep = g->ep, .dp = g->dp, .size = ep * dp,
                       .ep_size = ep, .dp_size = dp};
    return 0;
}

/* The optimizer's state as the build made it: the model's own moments on
 * one rank, the distributed optimizer's shards on several (its create
 * allocates through the backend alone, so the counting backend sees every
 * byte of it). */
static void count_optimizer(moe_plan *p, const moe_config *c, const moe_build *b)
{
    int bf16 = c->optimizer.moments_dtype == MOE_MOMENTS_DTYPE_BF16;
    p->moments = b->zero ? zero_moment_bytes(b->zero)
                         : 2 * (bf16 ? sizeof(uint16_t) : sizeof(real)) * b->model->n_elems;
    p->optimizer_counted = 1;
}

/* One counting pass: the dispatcher, the model and the optimizer, built as
 * a run builds them (run_build.h) on the counting backend, with the
 * recompute mode asked for. */
static int count_once(moe_plan *p, const moe_config *c, int recompute, moe_backend *shape,
                      size_t bytes[MOE_MEM_KINDS], moe_err *e)
{
    const moe_recipe *r = precision_recipe(c->precision.compute); /* NULL: auto */
    int fp8_saved = r && r->saves_e4m3_swiglu_in && c->precision.fp8_saved_activations;
    moe_backend *be = NULL;
    plan_groups g;
    if (count_backend_create(&be, shape, fp8_saved, e))
        return -1;
    int rc = -1;
    if (groups_open(&g, p->ep, p->dp, e))
        goto out;
    moe_build_spec spec = build_spec_from_config(c, &g.par);
    spec.recompute = recompute;
    moe_build b;
    if (build_run(&b, &spec, be, e))
        goto out_groups;
    const moe_model *m = b.model;
    p->cap_rows = (size_t)b.disp->max_rows(b.disp, spec.B * spec.T, spec.dims.K);
    p->params_local = (int64_t)m->n_elems;
    p->params_local_expert = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].n_experts > 0)
            p->params_local_expert += (int64_t)m->params[i].n;
    count_optimizer(p, c, &b);
    memcpy(bytes, be->mem_bytes, sizeof be->mem_bytes);
    build_close(&b);
    rc = 0;
out_groups:
    groups_close(&g);
out:
    be->destroy(be);
    return rc;
}

/* Bytes each rank sends in a step, balanced routing: the EP all-to-alls
 * (tokens to experts with their router weights, outputs back, and the same
 * two in the backward; once more per layer but the last with recompute;
 * with the exchange overlapped, every layer runs in two passes or more and
 * the backward sends again the rows the forward no longer holds: every
 * layer's without recompute, the last layer's with it),
 * and the optimizer's reduce-scatter of the gradients and all-gather of the
 * weights (ring algorithms: (n-1)/n of the buffer each): fp32 gradients, the
 * weights in the compute type, as the distributed optimizer moves them. */
static void step_traffic(moe_plan *p, const moe_config *c, moe_backend *shape)
{
    moe_dims d = model_dims_from_config(&c->model);
    double N = (double)c->train.micro_batch_size * c->train.seq_length, A = c->train.grad_accum_steps;
    double row = shape ? (double)shape->act_bytes(shape, (size_t)d.C) : 2.0 * d.C;
    double away = N * d.K * (p->ep - 1) / p->ep, counts = 8.0 * d.E * (p->ep - 1);
    double per_layer = away * (4 * row + 2 * sizeof(real)) + 3 * counts;
    double recompute = p->recompute ? (d.L - 1) * (away * (row + sizeof(real)) + counts) : 0;
    p->ep_overlap = p->ep > 1 && c->parallel.overlap_expert_exchange;
    double again = p->ep_overlap ? (p->recompute ? 1 : d.L) * away * (row + sizeof(real)) : 0;
    p->ep_bytes = p->ep > 1 ? A * (d.L * per_layer + recompute + again) : 0;
    double dense = (double)(p->params_local - p->params_local_expert);
    double expert = (double)p->params_local_expert;
    double w = p->world, dp = p->dp;
    double wbytes = shape ? (double)shape->act_bytes(shape, 1) : 2.0;
    p->dp_bytes = (sizeof(real) + wbytes) * (dense * (w - 1) / w + expert * (dp - 1) / dp);
}

/* What one counting pass measures: the bytes by kind and the counts beside them. */
typedef struct {
    size_t bytes[MOE_MEM_KINDS];
    size_t moments;
    int64_t params_local, params_local_expert;
} plan_tally;

static int tally_once(plan_tally *t, moe_plan *p, const moe_config *c, int layers, int recompute,
                      moe_backend *shape, moe_err *e)
{
    moe_config *cl = malloc(sizeof *cl);
    if (!cl)
        return moe_errf(e, "out of memory");
    *cl = *c;
    cl->model.num_layers = layers;
    int rc = count_once(p, cl, recompute, shape, t->bytes, e);
    free(cl);
    t->moments = p->moments;
    t->params_local = p->params_local;
    t->params_local_expert = p->params_local_expert;
    return rc;
}

/* n1 + (L - 1) (n2 - n1): exact where layers 1.. are alike (unsigned wrap-around cancels) */
static size_t extend(size_t n1, size_t n2, int L) { return n1 + (size_t)(L - 1) * (n2 - n1); }

/* The counting pass for all L layers. Every layer but the first allocates
 * the same buffers (layer 0 owns what the layers share), the dispatcher
 * reserves the same per layer, and the optimizer's buckets are cut from runs
 * of one group's tensors, which start afresh at each layer's dense and
 * expert tensors (the embedding joins layer 0's dense run, the final norm
 * and head make their own): so each kind's bytes are exactly linear in L
 * from one layer on. With `every_layer` 0 the model is counted with one
 * and two layers and extended; the host memory and time are then those of
 * a two-layer model, whatever L. */
static int tally_layers(moe_plan *p, const moe_config *c, int recompute, moe_backend *shape,
                        int every_layer, size_t bytes[MOE_MEM_KINDS], moe_err *e)
{
    int L = c->model.num_layers;
    plan_tally t1, t2;
    if (every_layer || L <= 2) {
        if (tally_once(&t1, p, c, L, recompute, shape, e))
            return -1;
        memcpy(bytes, t1.bytes, sizeof t1.bytes);
        return 0;
    }
    if (tally_once(&t1, p, c, 1, recompute, shape, e) ||
        tally_once(&t2, p, c, 2, recompute, shape, e))
        return -1;
    for (int k = 0; k < MOE_MEM_KINDS; k++)
        bytes[k] = extend(t1.bytes[k], t2.bytes[k], L);
    p->moments = extend(t1.moments, t2.moments, L);
    p->params_local = (int64_t)extend((size_t)t1.params_local, (size_t)t2.params_local, L);
    p->params_local_expert =
        (int64_t)extend((size_t)t1.params_local_expert, (size_t)t2.params_local_expert, L);
    return 0;
}

int plan_make(moe_plan *p, const moe_config *c, int ep, int dp, moe_backend *shape, moe_err *e)
{
    return plan_make_counted(p, c, ep, dp, shape, 0, e);
}

int plan_make_counted(moe_plan *p, const moe_config *c, int ep, int dp, moe_backend *shape,
                      int every_layer, moe_err *e)
{
    memset(p, 0, sizeof *p);
    if (ep < 1 || dp < 1)
        return moe_errf(e, "a plan needs EP >= 1 and DP >= 1 (got EP=%d, DP=%d)", ep, dp);
    if (config_scale_check(c, ep, dp, e))
        return moe_err_prefix(e, "memory plan of %s", c->name);
    if (c->model.num_experts % ep)
        return moe_errf(e, "parallel.ep=%d does not divide model.num_experts=%d", ep,
                        c->model.num_experts);
    p->ep = ep;
    p->dp = dp;
    p->world = ep * dp;
    p->recompute = c->train.activation_recompute;
    p->sized_for = shape ? shape->kind : MOE_BACKEND_CUDA;
    moe_dims d = model_dims_from_config(&c->model);
    int64_t active;
    model_count_params(&d, &p->params_total, &active);
    /* the run's own mode, and beside it whole layers recomputed (or, for a run that
     * recomputes them, nothing) */
    int mode = model_recompute_mode(c->train.activation_recompute, c->train.recompute_experts);
    int flip = mode == MOE_RECOMPUTE_LAYERS ? MOE_RECOMPUTE_NONE : MOE_RECOMPUTE_LAYERS;
    if (tally_layers(p, c, flip, shape, every_layer, p->bytes_flip, e) ||
        tally_layers(p, c, mode, shape, every_layer, p->bytes, e))
        return moe_err_prefix(e, "memory plan of %s at EP=%d x DP=%d", c->name, ep, dp);
    for (int k = 0; k < MOE_MEM_KINDS; k++) {
        p->total += p->bytes[k];
        p->total_flip += p->bytes_flip[k];
    }
    if (!shape || shape->device_memory)
        plan_device_rows(c, ep, dp, p->cap_rows, (size_t)p->params_local, p->dev);
    for (int r = 0; r < PLAN_DEV_ROWS; r++)
        p->dev_total += p->dev[r];
    p->need = p->total + p->dev_total;
    p->need_flip = p->total_flip + p->dev_total;
    step_traffic(p, c, shape);
    return 0;
}

static void print_count(FILE *f, double v)
{
    if (v >= 1e9)
        fprintf(f, "%.2fB", v / 1e9);
    else
        fprintf(f, "%.2fM", v / 1e6);
}

void plan_print(FILE *f, const moe_plan *p, const moe_config *c, double gpu_bytes)
{
    static const moe_mem_kind order[] = {MOE_MEM_WEIGHTS, MOE_MEM_MASTER, MOE_MEM_GRADS,
                                         MOE_MEM_OPTIMIZER, MOE_MEM_ACTIVATIONS,
                                         MOE_MEM_CAPACITY, MOE_MEM_COMM, MOE_MEM_WORKSPACE};
    /* the run's recompute mode, then whole layers (or, for a run that recomputes them, none) */
    static const char *const mode_name[] = {"none", "layers", "experts"};
    int mode = model_recompute_mode(c->train.activation_recompute, c->train.recompute_experts);
    const char *on = mode_name[mode], *off = mode_name[mode == MOE_RECOMPUTE_LAYERS ? 0 : 1];
    /* GiB at scale, MiB for the small configs */
    const int gib = p->total >= GIB || p->total_flip >= GIB;
    const double u = gib ? GIB : 1048576.0;
    fprintf(f, "moekit memory plan: %s at EP=%d x DP=%d (%d %s%s), micro-batch %d x %d tokens, "
               "%zu expert rows per pass",
            c->name, p->ep, p->dp, p->world, p->sized_for == MOE_BACKEND_CPU ? "CPU rank" : "GPU",
            p->world > 1 ? "s" : "", c->train.micro_batch_size, c->train.seq_length, p->cap_rows);
    if (p->ep > 1)
        fprintf(f, " (parallel.expert_capacity_factor %.2f)", c->parallel.expert_capacity_factor);
    fprintf(f, "\n");
    fprintf(f, "  parameters  ");
    print_count(f, (double)p->params_total);
    fprintf(f, " total; ");
    print_count(f, (double)p->params_local);
    fprintf(f, " on each rank (");
    print_count(f, (double)(p->params_local - p->params_local_expert));
    fprintf(f, " dense, ");
    print_count(f, (double)p->params_local_expert);
    fprintf(f, " expert)\n");
    fprintf(f, "  per rank, %s                    recompute %-7s recompute %s\n",
            gib ? "GiB" : "MiB", on, off);
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        fprintf(f, "    %-36s %10.2f   %12.2f\n", plan_kind_name(order[i]), p->bytes[order[i]] / u,
                p->bytes_flip[order[i]] / u);
    fprintf(f, "    %-36s %10.2f   %12.2f   counted: what be->alloc allocates\n",
            "allocated", p->total / u, p->total_flip / u);
    if (p->dev_total) {
        for (int r = 0; r < PLAN_DEV_ROWS; r++)
            if (p->dev[r])
                fprintf(f, "    %-36s %10.2f   %12.2f   %s\n", plan_device_row_name(r),
                        p->dev[r] / u, p->dev[r] / u, plan_device_row_source(r));
        fprintf(f, "    %-36s %10.2f   %12.2f\n", "total on the GPU", p->need / u,
                p->need_flip / u);
    }
    fprintf(f, "  optimizer   %.2f %s of AdamW moments%s\n", p->moments / u, gib ? "GiB" : "MiB",
            p->optimizer_counted ? ""
                                 : "; today's sharded optimizer counted by its layout (it also "
                                   "stages 12 B per parameter in host memory, which a plan does "
                                   "not take)");
    fprintf(f, "  per step    %.2f %s sent per rank over the EP group (all-to-all, balanced "
               "routing%s), %.2f %s in the gradient reduce-scatter and weight all-gather\n",
            p->ep_bytes / u, gib ? "GiB" : "MiB",
            p->ep_overlap ? "; about half of it in flight beside the experts' GEMMs" : "",
            p->dp_bytes / u, gib ? "GiB" : "MiB");
    if (gpu_bytes > 0) {
        double left = gpu_bytes - (double)p->need;
        fprintf(f, "  fits        %s on a GPU of %.0f GiB (%.2f GiB %s)\n",
                left >= 0 ? "yes" : "NO", gpu_bytes / GIB, (left >= 0 ? left : -left) / GIB,
                left >= 0 ? "to spare" : "short");
    }
}

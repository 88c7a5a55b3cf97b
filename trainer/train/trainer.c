/* moekit: the training loop. */
#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../backend/select.h"
#include "../ckpt/ckpt_dir.h"
#include "ckpt_io.h"
#include "../parallel/comm_nccl.h"
#include "../parallel/dispatch_ep.h"
#include "../parallel/watchdog.h"
#include "schedule.h"

volatile sig_atomic_t moe_stop_requested = 0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_duration(char *out, size_t n, double s)
{
    if (!isfinite(s) || s < 0)
        s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, n, "%ld:%02ld", t / 60, t % 60);
}

static void fmt_count(char *out, size_t n, double v)
{
    if (v >= 1e9)
        snprintf(out, n, "%.2fB", v / 1e9);
    else if (v >= 1e6)
        snprintf(out, n, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(out, n, "%.1fK", v / 1e3);
    else
        snprintf(out, n, "%.0f", v);
}

moe_dims trainer_model_dims(const moe_model_cfg *mc)
{
    moe_dims d = {.C = mc->hidden_size, .L = mc->num_layers, .NH = mc->num_heads,
                  .NKV = mc->num_kv_heads,
                  .HD = mc->head_dim ? mc->head_dim : mc->hidden_size / mc->num_heads,
                  .E = mc->num_experts, .K = mc->top_k, .I = mc->intermediate_size,
                  .V = mc->vocab_size, .eps = mc->rms_norm_eps, .theta = mc->rope_theta,
                  .aux_coef = mc->router_aux_loss_coef};
    return d;
}

/* precision.layers: the attention projections in the experts' recipe too
 * (all) or in bf16; t->precision names what runs where. On refusal the
 * projections are in bf16 and t->precision says so. */
static int set_layers(moe_trainer *t, const char *name, int all, moe_err *e)
{
    static const char *const labels[][2] = {
        {"fp8_block (experts) + bf16", "fp8_block (experts, attention projections) + bf16"},
        {"mxfp8 (experts) + bf16", "mxfp8 (experts, attention projections) + bf16"},
        {"mxfp8_emulated (experts) + bf16",
         "mxfp8_emulated (experts, attention projections) + bf16"}};
    const int k = !strcmp(name, "fp8_block") ? 0 : !strcmp(name, "mxfp8") ? 1 : 2;
    const moe_model_cfg *mc = &t->cfg.model;
    const moe_dims d = trainer_model_dims(mc);
    const int widths[3] = {d.C, d.NH * d.HD, d.NKV * d.HD};
    t->precision = labels[k][0];
    if (t->be->set_linear_lowp && t->be->set_linear_lowp(t->be, 0, NULL, 0, e))
        return -1;
    if (!all)
        return 0;
    if (!t->be->set_linear_lowp)
        return moe_errf(e,
                        "precision.compute=%s with precision.layers=all: the %s backend has no "
                        "low-precision attention projections; set precision.layers=experts",
                        name, t->be->name);
    if (t->be->set_linear_lowp(t->be, 1, widths, 3, e))
        return -1;
    t->precision = labels[k][1];
    return 0;
}

static int resolve_precision(moe_trainer *t, moe_err *e)
{
    moe_precision p = t->cfg.precision.compute;
    if (!strcmp(t->be->name, "cpu")) {
        if (p != MOE_PREC_AUTO && p != MOE_PREC_FP32)
            return moe_errf(e,
                            "precision.compute=%s needs the cuda backend; the cpu backend "
                            "computes in fp32 (set precision.compute=auto or fp32)",
                            precision_name(p));
        t->precision = sizeof(real) == 8 ? "fp64" : "fp32";
        return 0;
    }
    /* cuda: bf16 runs everywhere; the expert FFN's GEMMs in E4M3 with
     * fp8_block (1x128 / 128x128 block scales) on Hopper, mxfp8 on Blackwell;
     * a precision the GPU cannot run is refused with the reason */
    const moe_model_cfg *mc = &t->cfg.model;
    if (t->be->set_fp8_saved_activations)
        t->be->set_fp8_saved_activations(t->be, t->cfg.precision.fp8_saved_activations);
    const int all = strcmp(t->cfg.precision.layers, "all") == 0;
    switch (p) {
    case MOE_PREC_AUTO:
        /* mxfp8 on Blackwell, fp8_block on Hopper when allowed, else bf16;
         * the backend refuses what this GPU cannot run, and auto moves on */
        t->precision = "bf16";
        if (t->be->set_expert_precision) {
            moe_err why = {{0}};
            const char *name = NULL;
            if (t->be->set_expert_precision(t->be, "mxfp8", mc->hidden_size,
                                            mc->intermediate_size, &why) == 0)
                name = "mxfp8";
            else if (t->cfg.precision.allow_fp8_block &&
                     t->be->set_expert_precision(t->be, "fp8_block", mc->hidden_size,
                                                 mc->intermediate_size, &why) == 0)
                name = "fp8_block";
            /* projections auto cannot block stay in bf16, with the reason */
            if (name && set_layers(t, name, all, &why) && !t->quiet && t->rank == 0)
                printf("moe-train: precision auto: the attention projections stay in bf16: %s\n",
                       why.msg);
        }
        return 0;
    case MOE_PREC_BF16:
        t->precision = "bf16";
        return 0;
    case MOE_PREC_FP8_BLOCK:
    case MOE_PREC_MXFP8:
    case MOE_PREC_MXFP8_EMULATED: {
        /* mxfp8_emulated: the MXFP8 values through bf16 GEMMs, on any GPU, to
         * measure what MXFP8 training costs in accuracy */
        const char *name = precision_name(p);
        if (!t->be->set_expert_precision)
            return moe_errf(e, "precision.compute=%s: the %s backend has no low-precision experts",
                            name, t->be->name);
        if (t->be->set_expert_precision(t->be, name, mc->hidden_size, mc->intermediate_size, e))
            return -1;
        return set_layers(t, name, all, e);
    }
    case MOE_PREC_FP32:
        return moe_errf(e, "precision.compute=fp32 runs on the cpu backend only; on a GPU use "
                           "bf16 (or auto)");
    default:
        return moe_errf(e,
                        "precision.compute=%s is not available in this moe-train (it trains "
                        "in bf16 or mxfp8_emulated on any GPU, fp8_block on Hopper, mxfp8 on "
                        "Blackwell): set precision.compute=auto, bf16, fp8_block, mxfp8 or "
                        "mxfp8_emulated",
                        precision_name(p));
    }
}

static void print_summary(moe_trainer *t, const char *backend_why)
{
    if (t->quiet || t->rank != 0)
        return;
    const moe_config *c = &t->cfg;
    moe_dims d = trainer_model_dims(&c->model);
    int64_t total, active;
    model_count_params(&d, &total, &active);
    char tot[32], act_s[32], btok[32];
    fmt_count(tot, sizeof tot, (double)total);
    fmt_count(act_s, sizeof act_s, (double)active);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    moe_data_stats st;
    dataset_stats(t->data, &st);
    fmt_count(btok, sizeof btok, (double)st.bases);
    long tokens_per_step = (long)c->train.micro_batch_size * c->train.seq_length *
                           c->train.grad_accum_steps * t->world;
    printf("moekit moe-train: config %s (%s)\n", c->name, c->path);
    printf("  model     Mixtral MoE: %d layers, hidden %d, %d heads / %d kv heads (dim %d), "
           "%d experts top-%d, intermediate %d, vocab %d\n",
           d.L, d.C, d.NH, d.NKV, d.HD, d.E, d.K, d.I, d.V);
    printf("  params    %s total, %s active per token (%lld / %lld)\n", tot, act_s,
           (long long)total, (long long)active);
    printf("  data      %d file(s), %d record(s), %s bases; %llu train / %llu held-out windows "
           "of %d tokens\n",
           st.n_files, st.n_records, btok, (unsigned long long)st.train_windows,
           (unsigned long long)st.val_windows, c->train.seq_length);
    char ranks[48] = "";
    if (t->world > 1)
        snprintf(ranks, sizeof ranks, " x %d ranks", t->world);
    printf("  batch     %d x %d tokens x %d accumulation%s = %ld tokens per step, %d steps\n",
           c->train.micro_batch_size, c->train.seq_length, c->train.grad_accum_steps, ranks,
           tokens_per_step, c->train.steps);
    printf("  optimizer AdamW lr %.3g (warmup %d, cosine to %.3g), betas %.3g/%.3g, wd %.3g, "
           "clip %.3g\n",
           c->optimizer.lr, c->scheduler.warmup_steps, c->optimizer.lr * c->scheduler.min_lr_ratio,
           c->optimizer.beta1, c->optimizer.beta2, c->optimizer.weight_decay, c->train.grad_clip);
    printf("  backend   %s, %d thread(s); precision %s compute, fp32 master weights%s\n",
           backend_why, threads, t->precision,
           t->model->split_master ? " (split: the bf16 compute copy + the low 16 bits)" : "");
    printf("  parallel  %s\n", t->par.layout);
    {
        double mib = 1024.0 * 1024.0, P = (double)t->model->n_elems * sizeof(real);
        double mom = t->zero ? (double)zero_moment_bytes(t->zero) : 2 * P;
        double mst = t->model->split_master ? P / 2 : P; /* the high halves are the compute copy */
        printf("  memory    per rank: %.2f MiB fp32 masters + %.2f MiB grads, %.2f MiB AdamW "
               "moments%s\n",
               mst / mib, P / mib, mom / mib,
               t->zero ? " (sharded over the ranks that replicate each parameter)" : "");
        if (t->model->recompute)
            printf("            activations: each layer's input kept, the layer recomputed in the "
                   "backward (train.activation_recompute)\n");
    }
    printf("  start-up  %.2f s ranks and backend, %.2f s model buffers, %.2f s data, %.2f s "
           "weights\n", t->startup_s[0], t->startup_s[1], t->startup_s[2], t->startup_s[3]);
    if (c->checkpoint.ckpt_dir[0])
        printf("  ckpt      %s (every %d steps, keep %d)\n", c->checkpoint.ckpt_dir,
               c->checkpoint.save_every_n_steps, c->checkpoint.max_checkpoints);
    if (c->logger.run_dir[0])
        printf("  run dir   %s\n", c->logger.run_dir);
    fflush(stdout);
}

/* The model's router statistics summed over every rank's tokens. */
static int world_sum(void *ctx, double *v, int n, moe_err *e)
{
    moe_par *p = ctx;
    return comm_allreduce_sum(p->world, v, (size_t)n, MOE_DT_DOUBLE, e);
}

/* NCCL for the EP all-to-all: on the cuda backend when this build has NCCL,
 * unless MOE_EP_COMM=mpi asks for host staging over MPI */
static int use_nccl_for_ep(const moe_trainer *t)
{
    const char *v = getenv("MOE_EP_COMM");
    if (v && !strcmp(v, "mpi"))
        return 0;
    return !strcmp(t->be->name, "cuda") && comm_nccl_built();
}

int trainer_create(moe_trainer *t, const moe_config *cfg, const char *backend, int quiet, moe_err *e)
{
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->quiet = quiet;
    moe_config *c = &t->cfg;
    double t0 = now_s();
    int env_rank, env_size, env_local;
    int from_env = par_launch_from_env(&env_rank, &env_size, &env_local, e);
    if (from_env < 0)
        return -1;
    if (from_env) {
        /* ranks started without MPI meet over NCCL alone (NCCL_COMM_ID) */
        moe_comm *world = NULL;
        if (comm_nccl_world_on_device(&world, env_rank, env_size, env_local, e))
            return moe_err_prefix(e, "joining %d ranks over NCCL at NCCL_COMM_ID=%s", env_size,
                                  getenv("NCCL_COMM_ID"));
        if (par_open_world(&t->par, world, env_local, c->parallel.ep, c->parallel.dp,
                           c->parallel.timeout_s, e))
            return -1;
    } else if (par_open(&t->par, c->parallel.ep, c->parallel.dp, c->parallel.timeout_s, e)) {
        return -1;
    }
    t->have_par = 1;
    t->world = t->par.size;
    t->rank = t->par.rank;
    int dp = c->parallel.dp ? c->parallel.dp : 1;
    if (t->world == 1 && c->parallel.ep * dp != 1) {
        /* one process computes the same thing as EP x DP ranks would on the
         * same global batch, so a laptop or CI run of a multi-GPU config is
         * meaningful; say so rather than refuse */
        fprintf(stderr,
                "moe-train: note: config asks parallel.ep=%d x dp=%d but this is a "
                "single-rank run: all %d experts run on this rank (same math)\n",
                c->parallel.ep, dp, c->model.num_experts);
    }
    c->parallel.ep = t->par.ep_size;
    c->parallel.dp = t->par.dp_size;
    if (ckpt_io_open(t, e)) /* the directories, before anything large is allocated */
        goto fail;
    const char *bname = backend && *backend ? backend : c->runtime.backend;
    char why[128];
    if (backend_open(bname, c->runtime.threads, t->par.local_rank, &t->be, why, sizeof why, e))
        return -1;
    if (resolve_precision(t, e))
        goto fail;
    if (t->par.ep_size > 1 && !t->par.ep->device_memory && use_nccl_for_ep(t)) {
        /* the experts' tokens go GPU to GPU (NVLink) instead of through host
         * memory and MPI; the id is passed over the EP group's MPI ranks */
        if (comm_nccl_create(&t->ep_gpu, t->par.ep_rank, t->par.ep_size, t->par.ep, e)) {
            moe_err_prefix(e, "the expert-parallel group over NCCL (MOE_EP_COMM=mpi stages "
                              "through host memory instead)");
            goto fail;
        }
    }
    if (t->par.ep_size > 1 ? dispatcher_ep_create(&t->disp, t->ep_gpu ? t->ep_gpu : t->par.ep,
                                                  c->model.num_experts, e)
                           : dispatcher_local_create(&t->disp, e))
        goto fail;
    t->startup_s[0] = now_s() - t0;
    t0 = now_s();
    moe_dims d = trainer_model_dims(&c->model);
    if (model_create_parallel(&t->model, &d, t->be, t->disp, c->train.micro_batch_size,
                              c->train.seq_length, t->par.ep_rank, t->par.ep_size,
                              t->world == 1, c->train.activation_recompute, e))
        goto fail;
    if (t->world > 1) {
        t->model->stats_sum = world_sum;
        t->model->stats_ctx = &t->par;
        if (zero_create(&t->zero, t->model, &t->par, e))
            goto fail;
    } else {
        /* one rank: only model_grad_sum_squares and model_adamw read the
         * gradients, so an expert no token reached costs no gradient bytes */
        model_set_lazy_expert_grads(t->model, 1);
    }
    t->startup_s[1] = now_s() - t0;
    t0 = now_s();
    /* every rank reads its own windows: shard = world rank, shards = world */
    if (dataset_open(&t->data, &c->data, c->train.seq_length, c->train.seed, t->rank, t->world,
                     NULL, e))
        goto fail;
    size_t staged = (size_t)c->train.grad_accum_steps * c->train.micro_batch_size *
                    c->train.seq_length;
    t->inputs = malloc(sizeof(int32_t) * staged);
    t->targets = malloc(sizeof(int32_t) * staged);
    if (!t->inputs || !t->targets) {
        moe_errf(e, "out of memory staging a batch of %zu tokens", staged);
        goto fail;
    }

    t->startup_s[2] = now_s() - t0;
    t0 = now_s();
    /* where the weights come from: the latest checkpoint, a Hub model, or the seed */
    long resume_step = -1;
    if (c->checkpoint.resume_from_checkpoint && c->checkpoint.ckpt_dir[0]) {
        /* rank 0 looks (it writes the checkpoints); every rank learns the answer */
        struct { int32_t found, failed; int64_t step; char dir[4096]; char warn[MOE_ERR_LEN]; } r;
        memset(&r, 0, sizeof r);
        if (t->rank == 0) {
            e->msg[0] = 0;
            r.found = ckpt_latest(c->checkpoint.ckpt_dir, r.dir, sizeof r.dir, &r.step, e);
            if (r.found < 0) {
                r.failed = 1;
            } else if (r.found == 1 && e->msg[0]) {
                /* checkpoints exist but none verifies: starting over silently
                 * would throw the run away, so stop and say why */
                moe_err_prefix(e, "checkpoint.resume_from_checkpoint: no checkpoint in %s can be "
                                  "resumed", c->checkpoint.ckpt_dir);
                r.failed = 1;
            } else if (r.found == 0 && e->msg[0]) {
                snprintf(r.warn, sizeof r.warn, "%s", e->msg);
            }
        }
        watchdog_allow(INFINITY);
        if (comm_agree(t->par.world, r.failed, "looking for a checkpoint", e) ||
            comm_broadcast(t->par.world, &r, sizeof r, 0, e))
            goto fail;
        if (r.found == 0 && r.warn[0] && t->rank == 0)
            fprintf(stderr, "moe-train: warning: %s\n", r.warn);
        if (r.found == 0) {
            if (trainer_load_checkpoint(t, r.dir, 0, e))
                goto fail;
            resume_step = t->step;
            if (t->rank == 0)
                printf("moe-train: resuming from %s (step %d)\n", r.dir, t->step);
        }
    }
    if (resume_step < 0) {
        if (c->checkpoint.init_from[0]) {
            if (trainer_load_checkpoint(t, c->checkpoint.init_from, 1, e))
                goto fail;
        } else if (model_init_random(t->model, c->train.seed, c->model.init_std, e)) {
            goto fail;
        }
    }
    t->startup_s[3] = now_s() - t0;
    /* rank 0 speaks for the job: one metrics file, one config copy */
    if (metrics_open(&t->metrics, t->rank == 0 ? c->logger.run_dir : "", resume_step, e))
        goto fail;
    if (c->logger.run_dir[0] && t->rank == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/config.cfg", c->logger.run_dir);
        if (config_save(c, path, e))
            goto fail;
    }
    print_summary(t, why);
    return 0;
fail:
    trainer_destroy(t);
    return -1;
}

void trainer_destroy(moe_trainer *t)
{
    metrics_close(&t->metrics);
    ckpt_io_close(t); /* its staging may be the backend's pinned memory */
    zero_destroy(t->zero); /* its shards are backend memory: before the backend goes */
    t->zero = NULL;
    if (t->model)
        model_destroy(t->model);
    if (t->data)
        dataset_close(t->data);
    if (t->disp)
        t->disp->destroy(t->disp);
    comm_destroy(t->ep_gpu); /* NCCL's resources are on the backend's GPU: before it goes */
    t->ep_gpu = NULL;
    if (t->be)
        t->be->destroy(t->be);
    if (t->have_par)
        par_close(&t->par);
    t->have_par = 0;
    free(t->inputs);
    free(t->targets);
    t->model = NULL;
    t->data = NULL;
    t->disp = NULL;
    t->be = NULL;
    t->inputs = t->targets = NULL;
}

int trainer_evaluate(moe_trainer *t, double *val_loss, moe_err *e)
{
    /* Rank r of W takes micro-batch it W + r in round `it`, so one round is
     * the validation batch of W B windows a single rank would take; ranks
     * past the end still run the forward (expert parallelism needs every
     * rank in every layer) but do not count it. */
    int B = t->cfg.train.micro_batch_size, W = t->world, n = dataset_val_batches(t->data, B);
    if (n <= 0)
        return moe_errf(e, "no held-out data: raise data.val_fraction or add sequence");
    int rounds = (n + W - 1) / W;
    if (t->cfg.train.eval_batches > 0 && t->cfg.train.eval_batches < rounds)
        rounds = t->cfg.train.eval_batches;
    double acc[2] = {0, 0}; /* loss sum, counted targets */
    for (int it = 0; it < rounds; it++) {
        int i = it * W + t->rank;
        if (dataset_val_batch(t->data, i < n ? i : 0, B, t->inputs, t->targets, e))
            return -1;
        double ls;
        int64_t nv;
        if (model_forward(t->model, t->inputs, t->targets, &ls, &nv, NULL, e))
            return -1;
        if (i < n) {
            acc[0] += ls;
            acc[1] += (double)nv;
        }
    }
    if (comm_allreduce_sum(t->par.world, acc, 2, MOE_DT_DOUBLE, e))
        return moe_err_prefix(e, "evaluation");
    *val_loss = acc[1] > 0 ? acc[0] / acc[1] : NAN;
    return 0;
}

/* One optimizer step over grad_accum micro-batches. */
static int train_step(moe_trainer *t, double lr, double *loss, double *aux, double *gnorm,
                      moe_err *e)
{
    const moe_config *c = &t->cfg;
    int A = c->train.grad_accum_steps, B = c->train.micro_batch_size, T = c->train.seq_length;
    size_t mb = (size_t)B * T;
    /* the whole global batch first: the loss is the mean over all its
     * counted targets, so each token's gradient weight is known up front */
    int64_t valid = 0;
    for (int a = 0; a < A; a++) {
        if (dataset_next_train(t->data, B, t->inputs + a * mb, t->targets + a * mb, e))
            return -1;
        for (size_t i = 0; i < mb; i++)
            valid += t->targets[a * mb + i] >= 0;
    }
    if (comm_allreduce_sum(t->par.world, &valid, 1, MOE_DT_INT64, e))
        return moe_err_prefix(e, "step %d: counting targets", t->step + 1);
    if (valid == 0)
        return moe_errf(e, "step %d: the batch has no target to learn (all masked)", t->step + 1);
    model_zero_grad(t->model);
    double loss_sum = 0, aux_sum = 0;
    for (int a = 0; a < A; a++) {
        double ls;
        int64_t nv;
        if (model_forward_backward(t->model, t->inputs + a * mb, t->targets + a * mb,
                                   1.0 / valid, c->model.router_aux_loss_coef / A, &ls, &nv, e))
            return moe_err_prefix(e, "step %d", t->step + 1);
        loss_sum += ls;
        aux_sum += t->model->aux_loss;
    }
    if (comm_allreduce_sum(t->par.world, &loss_sum, 1, MOE_DT_DOUBLE, e))
        return moe_err_prefix(e, "step %d: the loss", t->step + 1);
    moe_model *m = t->model;
    int tt = t->step + 1;
    moe_adamw_hyper h = {.lr = (real)lr, .beta1 = (real)c->optimizer.beta1,
                         .beta2 = (real)c->optimizer.beta2, .eps = (real)c->optimizer.eps,
                         .weight_decay = (real)c->optimizer.weight_decay,
                         .bias_corr1 = (real)(1 - pow(c->optimizer.beta1, tt)),
                         .bias_corr2 = (real)(1 - pow(c->optimizer.beta2, tt)),
                         .grad_scale = 1};
    double norm;
    if (t->zero) {
        if (zero_step(t->zero, h, c->train.grad_clip, &norm, e))
            return moe_err_prefix(e, "step %d", tt);
    } else {
        norm = sqrt(model_grad_sum_squares(m));
    }
    if (!isfinite(norm))
        return moe_errf(e, "step %d: the gradient norm is %g (loss %g): training diverged; lower "
                           "optimizer.lr or raise scheduler.warmup_steps",
                        t->step + 1, norm, loss_sum / valid);
    if (!t->zero) {
        if (c->train.grad_clip > 0 && norm > c->train.grad_clip)
            h.grad_scale = (real)(c->train.grad_clip / (norm + 1e-6));
        model_adamw(m, &h);
    }
    t->tokens_seen += (uint64_t)valid;
    *loss = loss_sum / valid;
    *aux = aux_sum / A;
    *gnorm = norm;
    return 0;
}

static void log_eval(moe_trainer *t, double val)
{
    char buf[256];
    snprintf(buf, sizeof buf, "\"step\":%d,\"val_loss\":%.6f,\"tokens\":%llu", t->step, val,
             (unsigned long long)t->tokens_seen);
    metrics_write(&t->metrics, buf);
    if (!t->quiet && t->rank == 0) {
        printf("eval  %5d | held-out loss %.4f (%.4f bits/token)\n", t->step, val, val / log(2));
        fflush(stdout);
    }
}

int trainer_run(moe_trainer *t, moe_err *e)
{
    const moe_config *c = &t->cfg;
    int steps = c->train.steps, start = t->step;
    double t0 = now_s(), t_last = t0;
    int step_last = start;
    int save_every = c->checkpoint.ckpt_dir[0] ? c->checkpoint.save_every_n_steps : 0;
    while (t->step < steps) {
        double lr = schedule_lr(c->optimizer.lr, c->scheduler.warmup_steps,
                                c->scheduler.min_lr_ratio, t->step, steps);
        double loss = 0, aux = 0, gnorm = 0;
        if (train_step(t, lr, &loss, &aux, &gnorm, e))
            return -1;
        t->step++;
        t->last_loss = loss;
        t->last_grad_norm = gnorm;
        char buf[512];
        snprintf(buf, sizeof buf,
                 "\"step\":%d,\"loss\":%.6f,\"aux_loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,"
                 "\"tokens\":%llu",
                 t->step, loss, aux, lr, gnorm, (unsigned long long)t->tokens_seen);
        metrics_write(&t->metrics, buf);
        int freq = c->logger.frequency > 0 ? c->logger.frequency : 1;
        if (!t->quiet && t->rank == 0 && (t->step % freq == 0 || t->step == steps || t->step == 1)) {
            double now = now_s();
            double tok = (double)(t->step - step_last) * c->train.micro_batch_size *
                         c->train.seq_length * c->train.grad_accum_steps * t->world;
            double rate = now > t_last ? tok / (now - t_last) : 0;
            double per_step = (now - t0) / (t->step - start);
            char el[32], eta[32];
            fmt_duration(el, sizeof el, now - t0);
            fmt_duration(eta, sizeof eta, per_step * (steps - t->step));
            printf("step %5d/%d | loss %.4f | aux %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | "
                   "elapsed %s | ETA %s\n",
                   t->step, steps, loss, aux, lr, gnorm, rate, el, eta);
            fflush(stdout);
            t_last = now;
            step_last = t->step;
        }
        int eval_every = c->train.eval_every_n_steps;
        if ((eval_every > 0 && t->step % eval_every == 0) || t->step == steps) {
            double val;
            if (trainer_evaluate(t, &val, e))
                return -1;
            t->last_val_loss = val;
            log_eval(t, val);
        }
        /* a signal may reach some ranks only: all stop together or none */
        int64_t signalled = moe_stop_requested != 0;
        if (t->world > 1 && comm_allreduce_sum(t->par.world, &signalled, 1, MOE_DT_INT64, e))
            return -1;
        int stop = signalled != 0 ||
                   (t->stop_after_steps > 0 && t->step - start >= t->stop_after_steps &&
                    t->step < steps);
        if ((save_every > 0 && t->step % save_every == 0) ||
            (c->checkpoint.ckpt_dir[0] && (t->step == steps || stop))) {
            if (trainer_save_checkpoint(t, e))
                return -1;
        }
        if (stop) {
            if (t->rank == 0)
                fprintf(stderr, "moe-train: stopping at step %d of %d (%s)%s\n", t->step, steps,
                        signalled ? "stop signal" : "--stop-after-steps",
                        c->checkpoint.ckpt_dir[0] ? ", checkpoint saved" : ", no ckpt_dir set");
            return 1;
        }
    }
    if (c->checkpoint.save_final_model && c->checkpoint.ckpt_dir[0] &&
        trainer_save_final_model(t, e))
        return -1;
    if (t->metrics.f) {
        moe_err pe;
        char title[512];
        snprintf(title, sizeof title, "moekit %s", c->name);
        if (t->rank == 0 && metrics_plot(&t->metrics, title, &pe))
            fprintf(stderr, "moe-train: warning: no loss.png: %s\n", pe.msg);
        else if (!t->quiet && t->rank == 0)
            printf("moe-train: loss curve written to %s/loss.png\n", t->metrics.dir);
    }
    return 0;
}

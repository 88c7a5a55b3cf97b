/* moekit: the training loop. */
#include "trainer.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../common/host_wait.h"
#include "../backend/select.h"
#include "../build/run_build.h"
#include "../ckpt/ckpt_dir.h"
#include "ckpt_io.h"
#include "../model/dims_config.h"
#include "../plan/plan.h"
#include "../comm/comm_nccl.h"
#include "../parallel/dev_groups.h"
#include "../dispatch/dispatch_ep.h"
#include "ckpt_allowance.h"
#include "../plan/memory_check.h"
#include "precision_start.h"
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

/* precision.layers: the attention projections in the experts' recipe too
 * (all) or in bf16; t->precision names what runs where. On refusal the
 * projections are in bf16 and t->precision says so. */
static int set_layers(moe_trainer *t, moe_precision p, int all, moe_err *e)
{
    const char *name = precision_name(p);
    const moe_model_cfg *mc = &t->cfg.model;
    const moe_dims d = model_dims_from_config(mc);
    const int widths[3] = {d.C, d.NH * d.HD, d.NKV * d.HD};
    snprintf(t->precision_label, sizeof t->precision_label, "%s (experts) + bf16", name);
    t->precision = t->precision_label;
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
    snprintf(t->precision_label, sizeof t->precision_label,
             "%s (experts, attention projections) + bf16", name);
    return 0;
}

/* One recipe for the experts: bf16 needs nothing; a low precision is set if
 * the backend can run it here (else -1 with its reason in e). */
static int try_precision(moe_trainer *t, moe_precision p, moe_err *e)
{
    const moe_model_cfg *mc = &t->cfg.model;
    t->compute = p;
    if (p == MOE_PREC_BF16) {
        t->precision = precision_name(MOE_PREC_BF16);
        return 0;
    }
    if (!t->be->set_expert_precision)
        return moe_errf(e, "precision.compute=%s: the %s backend has no low-precision experts",
                        precision_name(p), t->be->name);
    return t->be->set_expert_precision(t->be, p, mc->hidden_size, mc->intermediate_size, e);
}

/* The recipe: precision_start.h decides it for this GPU, as the plugin's
 * verdict does (a plugin-launched run names it, strict); the backend may
 * still refuse it (shapes, kernels), which falls back to bf16 unless strict.
 * A fallback says so in one line at start-up. */
static int resolve_precision(moe_trainer *t, moe_err *e)
{
    const moe_precision_cfg *pc = &t->cfg.precision;
    if (t->be->kind == MOE_BACKEND_CPU) {
        if (pc->compute != MOE_PREC_AUTO && pc->compute != MOE_PREC_FP32)
            return moe_errf(e,
                            "precision.compute=%s needs the cuda backend; the cpu backend "
                            "computes in fp32 (set precision.compute=auto or fp32)",
                            precision_name(pc->compute));
        t->precision = sizeof(real) == 8 ? "fp64" : precision_name(MOE_PREC_FP32);
        t->compute = MOE_PREC_FP32;
        return 0;
    }
    trainer_precision tp;
    if (trainer_precision_for_gpu(pc, t->be->cc_major, t->be->cc_minor, &tp, e))
        return -1;
    if (t->be->set_fp8_saved_activations)
        t->be->set_fp8_saved_activations(t->be, pc->fp8_saved_activations);
    moe_err why = {{0}};
    if (try_precision(t, tp.precision, &why)) {
        if (trainer_precision_backend_refused(pc, tp.precision, why.msg, &tp, e) ||
            try_precision(t, tp.precision, e))
            return -1;
    }
    if (tp.note[0] && t->rank == 0)
        fprintf(stderr, "%s\n", tp.note);
    if (precision_recipe(tp.precision)->gemms == MOE_GEMMS_BF16)
        return 0; /* no low precision for the projections to share */
    const int all = pc->layers == MOE_LAYERS_ALL;
    if (pc->compute != MOE_PREC_AUTO)
        return set_layers(t, tp.precision, all, e);
    /* projections auto cannot block stay in bf16, with the reason */
    moe_err lw = {{0}};
    if (set_layers(t, tp.precision, all, &lw) && !t->quiet && t->rank == 0)
        printf("moe-train: precision auto: the attention projections stay in bf16: %s\n",
               lw.msg);
    return 0;
}

/* The memory plan of this run (plan.h) beside what the backend allocated. */
static void print_plan_vs_allocated(moe_trainer *t)
{
    moe_plan p;
    moe_err pe = {{0}};
    const double mib = 1024.0 * 1024.0;
    if (plan_make(&p, &t->cfg, t->par.ep_size, t->par.dp_size, t->be, &pe)) {
        printf("  plan      none: %s\n", pe.msg);
        return;
    }
    size_t got = 0;
    for (int k = 0; k < MOE_MEM_KINDS; k++)
        got += t->be->mem_bytes[k];
    printf("  plan      %.2f MiB per rank planned, %.2f MiB allocated (%+.1f%%):", p.total / mib,
           got / mib, p.total ? 100.0 * ((double)got - (double)p.total) / (double)p.total : 0);
    for (int k = 0; k < MOE_MEM_KINDS; k++)
        if (p.bytes[k] || t->be->mem_bytes[k])
            printf("%s %s %.2f/%.2f", k ? "," : "", plan_kind_name(k), p.bytes[k] / mib,
                   t->be->mem_bytes[k] / mib);
    printf(" MiB\n");
}

/* After the first step the backend has grown its scratch (cuDNN's workspace, the experts'
 * backward rows, the LM head's logits): what the GPU holds beside the plan of it, row by row
 * (plan_device.h), so a plan that is short shows where. */
static void print_first_step_memory(moe_trainer *t)
{
    if (t->quiet || t->rank != 0 || !t->be->device_memory || !t->be->mem_in_use)
        return;
    size_t up_front = 0;
    for (int k = 0; k < MOE_MEM_KINDS; k++)
        up_front += t->be->mem_bytes[k];
    const double gib = 1024.0 * 1024.0 * 1024.0;
    size_t used = t->be->mem_in_use(t->be);
    printf("  memory    after step 1: %.2f GiB of the GPU in use (cudaMemGetInfo), %.2f GiB of it "
           "allocated up front\n", used / gib, up_front / gib);
    moe_plan p;
    moe_err pe = {{0}};
    if (!plan_make(&p, &t->cfg, t->par.ep_size, t->par.dp_size, t->be, &pe) && p.dev_total) {
        /* the margin is room, not use: compare what the rows expect to be in use */
        size_t expect = p.need - p.dev[PLAN_DEV_MARGIN];
        printf("            planned: %.2f GiB allocated +", p.total / gib);
        for (int r = 0; r < PLAN_DEV_ROWS; r++)
            if (p.dev[r] && r != PLAN_DEV_MARGIN)
                printf(" %s %.2f,", plan_device_row_name(r), p.dev[r] / gib);
        printf(" = %.2f GiB expected in use (%+.2f GiB measured beside it; margin %.2f GiB)\n",
               expect / gib, ((double)used - (double)expect) / gib, p.dev[PLAN_DEV_MARGIN] / gib);
    }
    fflush(stdout);
}

static void print_summary(moe_trainer *t, const char *backend_why)
{
    if (t->quiet || t->rank != 0)
        return;
    const moe_config *c = &t->cfg;
    moe_dims d = model_dims_from_config(&c->model);
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
    printf("  data      %llu file(s), %llu record(s), %s bases; %llu train / %llu held-out windows "
           "of %d tokens\n",
           (unsigned long long)st.n_files, (unsigned long long)st.n_records, btok, (unsigned long long)st.train_windows,
           (unsigned long long)st.val_windows, c->train.seq_length);
    if (dataset_packed(t->data))
        printf("  windows   packed: records end to end, attention and positions within each\n");
    else if ((c->data.store[0] || c->data.n_blend) && c->data.pack == MOE_PACK_AUTO)
        printf("  windows   padded: one record a window (the %s backend packs on request only: "
               "data.pack = packed)\n", t->be->name);
    if (dataset_no_val_reason(t->data))
        printf("  held-out  none (%s): the run will not evaluate\n",
               dataset_no_val_reason(t->data));
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
    printf("  parallel  %s%s%s\n", t->par.layout, t->layout_note,
           t->par.ep_size > 1 && c->parallel.overlap_expert_exchange
               ? "; expert exchange overlapped with the experts (two or more passes a layer)"
               : "");
    {
        const moe_model *m = t->model;
        double mib = 1024.0 * 1024.0, n = (double)m->n_elems, P = n * sizeof(real);
        double wc = (double)t->be->act_bytes(t->be, m->n_elems);
        if (t->zero) {
            size_t rs[2], ag[2];
            zero_step_traffic(t->zero, rs, ag);
            printf("  memory    per rank: %.2f MiB compute weights + %.2f MiB fp32 grads + %.2f "
                   "MiB optimizer shard (%s moments%s, over the ranks that replicate each "
                   "parameter); a step sends %.2f MiB reduce-scatter + %.2f MiB all-gather in "
                   "%d buckets\n",
                   wc / mib, P / mib, (double)zero_state_bytes(t->zero) / mib,
                   config_moments_dtype_names[c->optimizer.moments_dtype], m->split_master ? " + master low halves" : "",
                   (double)(rs[0] + rs[1]) / mib, (double)(ag[0] + ag[1]) / mib,
                   zero_n_buckets(t->zero));
        } else {
            double mom = 2 * n * (m->moments_bf16 ? 2 : sizeof(real));
            double mst = m->split_master ? n * 2 : P; /* the high halves are the compute copy */
            printf("  memory    per rank: %.2f MiB fp32 masters + %.2f MiB grads, %.2f MiB AdamW "
                   "moments (%s)\n",
                   mst / mib, P / mib, mom / mib,
                   config_moments_dtype_names[c->optimizer.moments_dtype]);
        }
        if (t->model->recompute)
            printf("            activations: each layer's input kept, the layer recomputed in the "
                   "backward (train.activation_recompute)\n");
        else if (t->model->recompute_experts)
            printf("            activations: the experts' SwiGLU inputs recomputed in the backward "
                   "(train.recompute_experts)\n");
    }
    print_plan_vs_allocated(t);
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

/* The groups a step's collectives use: over NCCL on GPU ranks. */
static moe_par *step_par(moe_trainer *t) { return t->have_dev ? &t->dev : &t->par; }

/* What a run's start-up says beyond the summary: a multi-rank layout run on
 * one rank (in the summary's parallel line), a warmup clamped to the run, a
 * model that will not be saved. Before the layout is replaced by the ranks'. */
static void startup_notes(moe_trainer *t)
{
    moe_config *c = &t->cfg;
    int dp = c->parallel.dp ? c->parallel.dp : 1;
    /* one process computes the same thing as EP x DP ranks would on the same
     * global batch, so a laptop or CI run of a multi-GPU config (L0_sanity's
     * EP=2) is meaningful: the summary's parallel line says so, no warning */
    t->layout_note[0] = '\0';
    if (t->world == 1 && c->parallel.ep * dp != 1)
        snprintf(t->layout_note, sizeof t->layout_note,
                 " (the config's EP=%d x DP=%d layout on one rank: all %d experts here, same "
                 "math)", c->parallel.ep, dp, c->model.num_experts);
    if (c->scheduler.warmup_steps > c->train.steps) {
        if (t->rank == 0)
            fprintf(stderr, "moe-train: note: scheduler.warmup_steps = %d is longer than "
                            "train.steps = %d: warming up over all %d steps\n",
                    c->scheduler.warmup_steps, c->train.steps, c->train.steps);
        c->scheduler.warmup_steps = c->train.steps;
    }
    if (!c->checkpoint.ckpt_dir[0] && t->rank == 0)
        fprintf(stderr, "moe-train: note: no checkpoint.ckpt_dir: the trained model will not be "
                        "saved (set checkpoint.ckpt_dir=DIR to keep it)\n");
}

/* The ranks: launched by MPI, or by a launcher that set MOE_RANK and
 * NCCL_COMM_ID (NCCL alone); cfg's EP x DP becomes the layout they found. */
static int open_ranks(moe_trainer *t, moe_err *e)
{
    moe_config *c = &t->cfg;
    moe_launch launch;
    comm_nccl_set_timeout(c->parallel.timeout_s); /* NCCL's set-up is timed too */
    int from_env = par_launch_from_env(&launch, e);
    if (from_env < 0)
        return -1;
    if (from_env) {
        /* ranks started without MPI meet over NCCL, which only GPU ranks have */
        if (t->backend == MOE_BACKEND_CPU ||
            (t->backend == MOE_BACKEND_AUTO && !cuda_backend_available()))
            return moe_errf(e,
                            "%s starts %d ranks without MPI, but the cpu backend's ranks "
                            "exchange over MPI (NCCL is for GPU ranks): launch them with srun "
                            "--mpi=pmix or mpirun, with a moe-train built with MPI",
                            launch.source, launch.size);
        moe_comm *world = NULL;
        if (setenv("NCCL_COMM_ID", launch.meet, 1))
            return moe_errf(e, "cannot set NCCL_COMM_ID=%s", launch.meet);
        if (comm_nccl_world_on_device(&world, launch.rank, launch.size, launch.local_rank, e))
            return moe_err_prefix(e, "joining %d ranks from %s over NCCL at %s (%s)", launch.size,
                                  launch.source, launch.meet, launch.meet_from);
        if (par_open_world(&t->par, world, launch.local_rank, c->parallel.ep, c->parallel.dp,
                           c->parallel.timeout_s, e))
            return -1;
    } else {
        comm_mpi_set_max_count((size_t)c->parallel.mpi_max_count);
        if (comm_mpi_built() && c->parallel.mpi_max_count > 0 &&
            c->parallel.mpi_max_count < INT_MAX)
            fprintf(stderr, "moe-train: note: MPI messages go in pieces of at most %d elements "
                            "(parallel.mpi_max_count)\n", c->parallel.mpi_max_count);
        if (par_open(&t->par, c->parallel.ep, c->parallel.dp, c->parallel.timeout_s, e))
            return -1;
    }
    t->have_par = 1;
    t->world = t->par.size;
    t->rank = t->par.rank;
    startup_notes(t);
    c->parallel.ep = t->par.ep_size;
    c->parallel.dp = t->par.dp_size;
    return 0;
}

/* runtime.* as the backend takes them */
moe_backend_opts backend_opts_from_config(const moe_runtime_cfg *rt)
{
    moe_backend_opts o = backend_opts_default();
    int mask = 0;
    moe_err ignored;
    if (config_fp8_gemms_mask(rt->fp8_gemms, &mask, &ignored) == 0) /* validated on load */
        o.fp8_gemms = mask;
    o.fp8_chunk_rows = rt->fp8_chunk_rows;
    o.fp8_fused_save = rt->fp8_fused_save;
    o.fp8_weight_cache = rt->fp8_weight_cache;
    o.expert_chunk_rows = rt->expert_chunk_rows;
    o.cudnn_lib = rt->cudnn_lib;
    o.gemm = rt->gemm;
    o.attention = rt->attention;
    return o;
}

/* The backend t->backend asks for. */
static int open_backend(moe_trainer *t, char *why, size_t why_len, moe_err *e)
{
    const moe_config *c = &t->cfg;
    return backend_open(t->backend, c->runtime.threads, t->par.local_rank, &t->be, why, why_len,
                        e);
}

/* The backend's run options (runtime.*) and the precision it computes in. */
static int configure_backend(moe_trainer *t, moe_err *e)
{
    moe_backend_opts opts = backend_opts_from_config(&t->cfg.runtime);
    if (t->be->set_run_opts && t->be->set_run_opts(t->be, &opts, e))
        return -1;
    return resolve_precision(t, e);
}

/* The step's groups: GPU ranks that met over MPI first make the world, EP
 * and DP groups again over NCCL (the id passes over the MPI world), so
 * every collective of a step goes GPU to GPU. */
static int open_step_groups(moe_trainer *t, moe_err *e)
{
    if (t->world > 1 && !t->par.world->device_memory && t->be->kind != MOE_BACKEND_CPU) {
        if (par_device_groups(&t->dev, &t->par, e))
            return -1;
        t->have_dev = 1;
    }
    if (t->world > 1 && par_bind(step_par(t), t->be, e)) /* comm.h's stream order */
        return -1;
    return 0;
}

/* The dispatcher, the model's memory and who reads its gradients (the
 * distributed optimizer over several ranks), as run_build.h builds them. */
static int build_model(moe_trainer *t, moe_err *e)
{
    moe_build_spec spec = build_spec_from_config(&t->cfg, step_par(t));
    moe_build b;
    if (build_run(&b, &spec, t->be, e))
        return -1;
    t->disp = b.disp;
    t->model = b.model;
    t->zero = b.zero;
    if (t->world > 1) {
        t->model->stats_sum = world_sum;
        t->model->stats_ctx = step_par(t);
        return 0;
    }
    /* one rank: only model_grad_sum_squares and model_adamw read the
     * gradients, so an expert no token reached costs no gradient bytes */
    model_set_lazy_expert_grads(t->model, 1);
    return 0;
}

/* The data and the host staging of one step's tokens. */
static int open_data(moe_trainer *t, moe_err *e)
{
    const moe_config *c = &t->cfg;
    /* auto packs stores and blends only where the backend's attention
     * takes sequence boundaries at its full rate */
    moe_data_cfg dc = c->data;
    int collection = dc.store[0] || dc.n_blend;
    if (dc.pack == MOE_PACK_PACKED && t->be->segments == MOE_SEGMENTS_NONE)
        return moe_errf(e, "data.pack = packed: the %s backend's attention does not take sequence "
                        "boundaries; use data.pack = padded (or auto)", t->be->name);
    if (dc.pack == MOE_PACK_AUTO && collection && t->be->segments != MOE_SEGMENTS_FAST)
        dc.pack = MOE_PACK_PADDED;
    /* every rank reads its own windows: shard = world rank, shards = world */
    if (dataset_open(&t->data, &dc, c->train.seq_length, c->train.seed, t->rank, t->world,
                     NULL, e))
        return -1;
    /* no held-out data is said now, never found after training */
    const char *no_val = dataset_no_val_reason(t->data);
    if (no_val && c->train.eval_every_n_steps > 0)
        return moe_errf(e, "train.eval_every_n_steps = %d asks for evaluation, but the data has no "
                        "held-out windows (%s): set train.eval_every_n_steps = 0 to train "
                        "without evaluating, or give data.val_fraction > 0 and more records",
                        c->train.eval_every_n_steps, no_val);
    size_t staged = (size_t)c->train.grad_accum_steps * c->train.micro_batch_size *
                    c->train.seq_length;
    t->inputs = malloc(sizeof(int32_t) * staged);
    t->targets = malloc(sizeof(int32_t) * staged);
    size_t mb = (size_t)c->train.micro_batch_size * c->train.seq_length;
    t->seg_pos = malloc(sizeof(int32_t) * mb);
    t->seg_cu = malloc(sizeof(int32_t) * (mb + 1));
    if (!t->inputs || !t->targets || !t->seg_pos || !t->seg_cu)
        return moe_errf(e, "out of memory staging a batch of %zu tokens", staged);
    return 0;
}

/* checkpoint.resume_from_checkpoint: the latest checkpoint that verifies,
 * loaded; *resume_step stays -1 where there is none. */
static int resume_latest(moe_trainer *t, long *resume_step, moe_err *e)
{
    const moe_config *c = &t->cfg;
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
    /* rank 0 verifies the newest checkpoints: at most one whole checkpoint of
     * this model (a single-file one is hashed whole, a sharded one only its
     * small files), which every rank counts alike from the model's sizes:
     * fp32 masters and two fp32 moments a parameter */
    int64_t params, active;
    moe_dims d = model_dims_from_config(&c->model);
    model_count_params(&d, &params, &active);
    ckpt_allow(c, (uint64_t)params * 3 * sizeof(float));
    if (comm_agree(t->par.world, r.failed, "looking for a checkpoint", e) ||
        comm_broadcast(t->par.world, &r, sizeof r, 0, e))
        return -1;
    if (r.found == 0 && r.warn[0] && t->rank == 0)
        fprintf(stderr, "moe-train: warning: %s\n", r.warn);
    if (r.found != 0)
        return 0;
    if (trainer_load_checkpoint(t, r.dir, 0, e))
        return -1;
    *resume_step = t->step;
    /* the newest checkpoint is this step's: a final model is exported from it */
    snprintf(t->ckpt->last_saved, sizeof t->ckpt->last_saved, "%s", r.dir);
    t->ckpt->last_step = t->step;
    if (t->rank == 0)
        printf("moe-train: resuming from %s (step %d)\n", r.dir, t->step);
    return 0;
}

/* Where the weights come from: the latest checkpoint, a Hub model, or the seed. */
static int load_weights(moe_trainer *t, long *resume_step, moe_err *e)
{
    const moe_config *c = &t->cfg;
    *resume_step = -1;
    if (c->checkpoint.resume_from_checkpoint && c->checkpoint.ckpt_dir[0] &&
        resume_latest(t, resume_step, e))
        return -1;
    if (*resume_step >= 0)
        return 0;
    if (c->checkpoint.init_from[0])
        return trainer_load_checkpoint(t, c->checkpoint.init_from, 1, e);
    return model_init_random(t->model, c->train.seed, c->model.init_std, e);
}

/* rank 0 speaks for the job: one metrics file, one config copy */
static int open_outputs(moe_trainer *t, long resume_step, moe_err *e)
{
    const moe_config *c = &t->cfg;
    if (metrics_open(&t->metrics, t->rank == 0 ? c->logger.run_dir : "", resume_step,
                     c->logger.tensorboard, e))
        return -1;
    if (c->logger.run_dir[0] && t->rank == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/config.cfg", c->logger.run_dir);
        if (config_save(c, path, e))
            return -1;
    }
    return 0;
}

/* seconds since *t0, which moves to now */
static double lap(double *t0)
{
    double now = now_s(), s = now - *t0;
    *t0 = now;
    return s;
}

int trainer_create(moe_trainer *t, const moe_config *cfg, int backend, int quiet, moe_err *e)
{
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->quiet = quiet;
    t->backend = backend >= 0 ? (moe_backend_choice)backend : cfg->runtime.backend;
    double t0 = now_s();
    char why[128];
    long resume_step = -1;
    if (trainer_adopt_init_config(&t->cfg, e))
        return -1;
    if (open_ranks(t, e))
        return -1;
    /* the checkpoint directory, locked and checked before anything large is
     * allocated (a collective: every rank fails together) */
    if (ckpt_io_open(t, e))
        goto fail;
    if (open_backend(t, why, sizeof why, e))
        goto fail;
    if (configure_backend(t, e) || open_step_groups(t, e))
        goto fail;
    t->startup_s[0] = lap(&t0);
    /* before the model's buffers: a run that cannot fit stops with the plan */
    if (memory_check_before_alloc(&t->cfg, t->be, t->par.ep_size, t->par.dp_size, t->rank, e))
        goto fail;
    if (build_model(t, e))
        goto fail;
    t->startup_s[1] = lap(&t0);
    if (open_data(t, e))
        goto fail;
    t->startup_s[2] = lap(&t0);
    if (load_weights(t, &resume_step, e))
        goto fail;
    t->startup_s[3] = lap(&t0);
    if (open_outputs(t, resume_step, e))
        goto fail;
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
    if (t->have_dev) /* NCCL's resources are on the backend's GPU: before it goes */
        par_device_groups_close(&t->dev);
    t->have_dev = 0;
    if (t->be)
        t->be->destroy(t->be);
    if (t->have_par)
        par_close(&t->par);
    t->have_par = 0;
    free(t->inputs);
    free(t->targets);
    free(t->seg_pos);
    free(t->seg_cu);
    t->seg_pos = t->seg_cu = NULL;
    t->model = NULL;
    t->data = NULL;
    t->disp = NULL;
    t->be = NULL;
    t->inputs = t->targets = NULL;
}

/* The model's sequences for a micro-batch of packed windows (one per row
 * otherwise). */
static int set_segments(moe_trainer *t, const int32_t *inputs, moe_err *e)
{
    if (!dataset_packed(t->data))
        return model_set_segments(t->model, NULL, NULL, 0, 0, e);
    int max_len, n = tok_segments(inputs, t->cfg.train.micro_batch_size, t->cfg.train.seq_length,
                                  t->seg_pos, t->seg_cu, &max_len);
    return model_set_segments(t->model, t->seg_pos, t->seg_cu, n, max_len, e);
}

int trainer_evaluate(moe_trainer *t, double *val_loss, moe_err *e)
{
    /* Rank r of W takes micro-batch it W + r in round `it`, so one round is
     * the validation batch of W B windows a single rank would take; ranks
     * past the end still run the forward (expert parallelism needs every
     * rank in every layer) but do not count it. A rank whose batch cannot
     * be read goes on with rows the loss ignores, so every rank still meets
     * every collective, and all learn of the failure at the end. */
    int B = t->cfg.train.micro_batch_size, W = t->world, n = dataset_val_batches(t->data, B);
    if (n <= 0)
        return moe_errf(e, "no held-out data (%s)", dataset_no_val_reason(t->data));
    int rounds = (n + W - 1) / W;
    if (t->cfg.train.eval_batches > 0 && t->cfg.train.eval_batches < rounds)
        rounds = t->cfg.train.eval_batches;
    double acc[3] = {0, 0, 0}; /* loss sum, counted targets, ranks whose data failed */
    moe_err data_err = {{0}};
    size_t mb = (size_t)B * t->cfg.train.seq_length;
    for (int it = 0; it < rounds; it++) {
        int i = it * W + t->rank;
        if (!acc[2] && dataset_val_batch(t->data, i < n ? i : 0, B, t->inputs, t->targets,
                                         &data_err))
            acc[2] = 1;
        if (acc[2])
            for (size_t k = 0; k < mb; k++) {
                t->inputs[k] = MOE_TOK_PAD;
                t->targets[k] = -1;
            }
        double ls;
        int64_t nv;
        if (set_segments(t, t->inputs, e) ||
            model_forward(t->model, t->inputs, t->targets, &ls, &nv, NULL, e))
            return -1;
        if (i < n) {
            acc[0] += ls;
            acc[1] += (double)nv;
        }
    }
    if (comm_allreduce_sum(step_par(t)->world, acc, 3, MOE_DT_DOUBLE, e))
        return moe_err_prefix(e, "evaluation");
    if (acc[2] > 0) {
        if (data_err.msg[0])
            *e = data_err;
        else
            moe_errf(e, "the held-out data of %g other rank(s) could not be read", acc[2]);
        return moe_err_prefix(e, "evaluation");
    }
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
    if (comm_allreduce_sum(step_par(t)->world, &valid, 1, MOE_DT_INT64, e))
        return moe_err_prefix(e, "step %d: counting targets", t->step + 1);
    if (valid == 0)
        return moe_errf(e, "step %d: the batch has no target to learn (all masked)", t->step + 1);
    model_zero_grad(t->model);
    double loss_sum = 0, aux_sum = 0;
    for (int a = 0; a < A; a++) {
        double ls;
        int64_t nv;
        if (t->zero && a == A - 1) /* the last backward reduces its buckets as it goes */
            zero_arm(t->zero);
        if (set_segments(t, t->inputs + a * mb, e))
            return moe_err_prefix(e, "step %d", t->step + 1);
        if (model_forward_backward(t->model, t->inputs + a * mb, t->targets + a * mb,
                                   1.0 / valid, c->model.router_aux_loss_coef / A, &ls, &nv, e))
            return moe_err_prefix(e, "step %d", t->step + 1);
        loss_sum += ls;
        aux_sum += t->model->aux_loss;
    }
    if (comm_allreduce_sum(step_par(t)->world, &loss_sum, 1, MOE_DT_DOUBLE, e))
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
    /* a failure the backend noted (a scratch buffer it could not allocate, a
     * library call refused) is the cause, not the numbers it left behind */
    if (t->be->check && t->be->check(t->be, e))
        return moe_err_prefix(e, "step %d", tt);
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

static double wall_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* loss.png again (rank 0): at each evaluation, on a stop and at the end; a
 * failure is a warning, said once */
static void redraw_plot(moe_trainer *t)
{
    if (t->rank != 0 || !t->metrics.f)
        return;
    moe_err pe;
    char title[512];
    snprintf(title, sizeof title, "moekit %s", t->cfg.name);
    if (metrics_plot(&t->metrics, title, &pe) && !t->metrics.plot_warned) {
        fprintf(stderr, "moe-train: warning: no loss.png: %s\n", pe.msg);
        t->metrics.plot_warned = 1;
    }
}

/* Every byte this rank moved between host and device memory so far: the
 * backend's copies and what the GPU transport staged for host buffers. A
 * step should move its batch's tokens and a few scalars, never weights,
 * gradients or optimizer state. */
static uint64_t host_link_bytes(moe_trainer *t)
{
    uint64_t n = t->be->host_bytes[0] + t->be->host_bytes[1];
    const moe_par *p = step_par(t);
    const moe_comm *c[3] = {p->world, p->ep, p->dp};
    for (int i = 0; i < 3; i++) {
        int counted = !c[i]; /* a group may be the world itself */
        for (int j = 0; j < i && !counted; j++)
            counted = c[j] == c[i];
        if (!counted)
            n += c[i]->host_bytes[0] + c[i]->host_bytes[1];
    }
    return n;
}

/* A step's metrics line: the losses and rates, the model's FLOP/s and MFU
 * over this step's wall time (dt), rank 0's device memory. */
/* This step's host waits (common/host_wait.h) by name, as a JSON object
 * and as "route counts 64, loss 1" for the console; returns the total. */
static uint64_t step_host_waits(char *json, size_t jn, char *text, size_t tn)
{
    host_wait_count w[HOST_WAIT_NAMES];
    int n = host_wait_counts(w, HOST_WAIT_NAMES);
    size_t ju = (size_t)snprintf(json, jn, "{"), tu = 0;
    text[0] = 0;
    for (int i = 0; i < n; i++) {
        if (ju < jn)
            ju += (size_t)snprintf(json + ju, jn - ju, "%s\"%s\":%llu", i ? "," : "", w[i].what,
                                   (unsigned long long)w[i].n);
        if (tu < tn)
            tu += (size_t)snprintf(text + tu, tn - tu, "%s%s %llu", i ? ", " : "", w[i].what,
                                   (unsigned long long)w[i].n);
    }
    if (ju < jn)
        snprintf(json + ju, jn - ju, "}");
    if (ju + 1 >= jn)
        json[0] = 0; /* too many names to write whole */
    return host_wait_total();
}

double trainer_peak_tflops(const moe_trainer *t)
{
    return t->be->peak_tflops ? t->be->peak_tflops(t->be, t->compute) : 0;
}

static int log_step(moe_trainer *t, double loss, double aux, double lr, double gnorm, double dt,
                    double elapsed, moe_err *e)
{
    const moe_config *c = &t->cfg;
    double tokens = (double)c->train.micro_batch_size * c->train.seq_length *
                    c->train.grad_accum_steps * t->world;
    moe_dims d = model_dims_from_config(&c->model);
    double tflops = dt > 0 ? metrics_flops_per_token(&d, c->train.seq_length) * tokens / dt / 1e12
                           : NAN;
    double peak = trainer_peak_tflops(t);
    moe_step_metrics m = {
        .step = t->step, .loss = loss, .aux_loss = aux, .lr = lr, .grad_norm = gnorm,
        .tokens = t->tokens_seen, .wall_time = wall_clock(), .elapsed_s = elapsed,
        .tokens_per_s = dt > 0 ? tokens / dt : NAN, .tflops = tflops,
        .mfu = peak > 0 ? tflops / (peak * t->world) : NAN,
        .mem_bytes = t->be->mem_in_use ? (double)t->be->mem_in_use(t->be) : NAN,
        .host_link_bytes = t->be->device_memory ? (double)t->step_host_bytes : NAN,
        .host_waits = (double)t->step_host_waits,
        .host_wait_by = t->step_wait_json[0] ? t->step_wait_json : NULL,
    };
    return metrics_log_step(&t->metrics, &m, e);
}

static int log_eval(moe_trainer *t, double val, double elapsed, moe_err *e)
{
    if (metrics_log_eval(&t->metrics, t->step, val, t->tokens_seen, wall_clock(), elapsed, e))
        return -1;
    if (!t->quiet && t->rank == 0) {
        printf("eval  %5d | held-out loss %.4f (%.4f bits/token)\n", t->step, val, val / log(2));
        fflush(stdout);
    }
    redraw_plot(t);
    return 0;
}

int trainer_run(moe_trainer *t, moe_err *e)
{
    const moe_config *c = &t->cfg;
    int steps = c->train.steps, start = t->step;
    double t0 = now_s(), t_last = t0;
    int step_last = start;
    uint64_t link_sum = 0; /* host-link bytes of the steps since the last line */
    int save_every = c->checkpoint.ckpt_dir[0] ? c->checkpoint.save_every_n_steps : 0;
    if (start >= steps && steps > 0) {
        if (t->rank == 0)
            printf("moe-train: nothing to train: the run resumed at step %d and train.steps is "
                   "%d (raise train.steps to train further)\n", start, steps);
        /* a run whose final save failed left final_model older than this
         * checkpoint: write it now rather than pass the old one off as final */
        if (c->checkpoint.save_final_model && c->checkpoint.ckpt_dir[0] &&
            ckpt_io_final_model_current(t, e))
            return -1;
        return 2;
    }
    /* an evaluation that fails still lets this step's checkpoint and the
     * final model be written; the run then fails with its reason */
    int eval_failed = 0;
    moe_err eval_err = {{0}};
    int evaluates = dataset_no_val_reason(t->data) == NULL;
    while (t->step < steps) {
        double lr = schedule_lr(c->optimizer.lr, c->scheduler.warmup_steps,
                                c->scheduler.min_lr_ratio, t->step, steps);
        double loss = 0, aux = 0, gnorm = 0, step_t0 = now_s();
        uint64_t link0 = host_link_bytes(t);
        host_wait_reset();
        if (train_step(t, lr, &loss, &aux, &gnorm, e))
            return -1;
        t->step_host_bytes = host_link_bytes(t) - link0;
        char wait_text[512];
        t->step_host_waits = step_host_waits(t->step_wait_json, sizeof t->step_wait_json,
                                             wait_text, sizeof wait_text);
        if (t->step == start) {
            print_first_step_memory(t);
            if (!t->quiet && t->rank == 0)
                printf("moe-train: host waits in the first step: %llu (%s)\n",
                       (unsigned long long)t->step_host_waits, wait_text[0] ? wait_text : "none");
        }
        link_sum += t->step_host_bytes;
        t->step++;
        t->last_loss = loss;
        t->last_grad_norm = gnorm;
        double step_end = now_s();
        if (log_step(t, loss, aux, lr, gnorm, step_end - step_t0, step_end - t0, e))
            return -1;
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
            char link[48] = "";
            if (t->be->device_memory)
                snprintf(link, sizeof link, " | PCIe %.2f MiB/step",
                         (double)link_sum / (t->step - step_last) / 1048576.0);
            printf("step %5d/%d | loss %.4f | aux %.4f | lr %.2e | grad norm %.3f | %.0f tok/s%s | "
                   "host waits %llu | elapsed %s | ETA %s\n",
                   t->step, steps, loss, aux, lr, gnorm, rate, link,
                   (unsigned long long)t->step_host_waits, el, eta);
            fflush(stdout);
            t_last = now;
            step_last = t->step;
            link_sum = 0;
        }
        int eval_every = c->train.eval_every_n_steps;
        if (evaluates && ((eval_every > 0 && t->step % eval_every == 0) || t->step == steps)) {
            double val;
            if (trainer_evaluate(t, &val, &eval_err) == 0) {
                t->last_val_loss = val;
                if (log_eval(t, val, now_s() - t0, e))
                    return -1;
            } else {
                eval_failed = 1;
                moe_err_prefix(&eval_err, "step %d", t->step);
                if (t->rank == 0)
                    fprintf(stderr, "moe-train: %s\n", eval_err.msg);
            }
        }
        /* a signal may reach some ranks only: all stop together or none */
        int64_t signalled = moe_stop_requested != 0;
        if (t->world > 1 && comm_allreduce_sum(step_par(t)->world, &signalled, 1, MOE_DT_INT64, e))
            return -1;
        int stop = signalled != 0 || (eval_failed && t->step < steps) ||
                   (t->stop_after_steps > 0 && t->step - start >= t->stop_after_steps &&
                    t->step < steps);
        if ((save_every > 0 && t->step % save_every == 0) ||
            (c->checkpoint.ckpt_dir[0] && (t->step == steps || stop))) {
            if (trainer_save_checkpoint(t, e))
                return -1;
        }
        if (stop && eval_failed)
            break; /* the final model too, then the failure */
        if (stop) {
            redraw_plot(t);
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
    if (eval_failed) {
        redraw_plot(t);
        if (!c->checkpoint.ckpt_dir[0])
            *e = eval_err;
        else
            moe_errf(e, "%s (the checkpoint of step %d%s written)", eval_err.msg, t->step,
                     c->checkpoint.save_final_model ? " and the final model were" : " was");
        return -1;
    }
    if (t->metrics.f) {
        redraw_plot(t);
        if (!t->quiet && t->rank == 0 && !t->metrics.plot_warned)
            printf("moe-train: loss curve written to %s/loss.png\n", t->metrics.dir);
    }
    return 0;
}

/* The memory plan: the counting pass sees what the real creation path
 * allocates (L0_sanity on the CPU backend, to the byte), plans the headline
 * config without memory in well under a second, sizes the expert buffers by
 * capacity, and plan_fit refuses or warns with the numbers and what fits. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../../trainer/config/config_scale.h"
#include "../../trainer/model/dims_config.h"
#include "../../trainer/model/model.h"
#include "../../trainer/backend/cuda/cuda_scratch_sizes.h"
#include "../../trainer/plan/count_backend.h"
#include "../../trainer/plan/memory_check.h"
#include "../../trainer/plan/plan.h"
#include "../check.h"
#include "../model_rig.h"

static const double GIB = 1073741824.0;

static int load(moe_config *c, const char *name)
{
    moe_err e = {{0}};
    if (config_load(c, name, MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e)) {
        CHECK_MSG(0, "%s: %s", name, e.msg);
        return -1;
    }
    return 0;
}

/* L0_sanity on one CPU rank, made as the trainer makes it (moments in the
 * configured dtype from the start), against its plan */
static void test_plan_equals_allocation(void)
{
    moe_config c;
    if (load(&c, "L0_sanity"))
        return;
    for (int run = 0; run < 4; run++) {
        int recompute = run & 1, bf16 = run >> 1;
        c.train.activation_recompute = recompute;
        c.optimizer.moments_dtype = bf16 ? MOE_MOMENTS_DTYPE_BF16 : MOE_MOMENTS_DTYPE_FP32;
        moe_err e = {{0}};
        rig r = {0};
        moe_dims dims = model_dims_from_config(&c.model);
        CHECK(cpu_backend_create(&r.be, 1, &e) == 0 && dispatcher_local_create(&r.disp, &e) == 0);
        CHECK(model_create_parallel(&r.m, &dims, r.be, r.disp, c.train.micro_batch_size,
                                    c.train.seq_length, 0, 1,
                                    bf16 ? MOE_MOMENTS_BF16 : MOE_MOMENTS_FP32, recompute, &e) == 0);
        moe_backend *be = r.be;
        moe_model *m = r.m;
        size_t made = count_backend_total(be); /* the moments made in their dtype at once */
        CHECK_MSG(model_set_moments_bf16(m, bf16, &e) == 0, "%s", e.msg);
        CHECK(count_backend_total(be) == made);
        moe_plan p;
        CHECK_MSG(plan_make(&p, &c, 1, 1, be, &e) == 0, "%s", e.msg);
        size_t got = count_backend_total(be);
        CHECK_MSG(p.total == got, "moments %s: planned %zu, allocated %zu",
                  config_moments_dtype_names[c.optimizer.moments_dtype], p.total, got);
        for (int k = 0; k < MOE_MEM_KINDS; k++)
            CHECK_MSG(p.bytes[k] == be->mem_bytes[k], "%s: planned %zu, allocated %zu",
                      plan_kind_name(k), p.bytes[k], be->mem_bytes[k]);
        size_t moment = bf16 ? 2 * m->n_elems + 1 : sizeof(real) * m->n_elems;
        CHECK_MSG(p.bytes[MOE_MEM_OPTIMIZER] == 2 * moment, "moments %s: %zu bytes",
                  config_moments_dtype_names[c.optimizer.moments_dtype], p.bytes[MOE_MEM_OPTIMIZER]);
        CHECK(p.moments == 2 * (bf16 ? 2 : sizeof(real)) * m->n_elems);
        rig_close(&r);
    }
}

static void test_headline_plan(void)
{
    moe_config c;
    if (load(&c, "L1_8x7B_ep"))
        return;
    moe_err e = {{0}};
    moe_plan p, q;
    clock_t t0 = clock();
    CHECK_MSG(plan_make(&p, &c, 8, 1, NULL, &e) == 0, "%s", e.msg);
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK_MSG(s < 0.5, "the plan took %.3f s", s);
    CHECK(p.params_total > 46000000000LL && p.params_total < 47000000000LL);
    CHECK(p.params_local > 6900000000LL && p.params_local < 7100000000LL);
    /* the bf16 compute copy and the fp32 gradients of every local parameter; the
     * masters' low halves live in the optimizer's shard (with the moments: 10 B a
     * shard element), not beside the model */
    CHECK(p.bytes[MOE_MEM_WEIGHTS] == 2 * (size_t)p.params_local);
    CHECK(p.bytes[MOE_MEM_MASTER] == 0);
    CHECK(p.bytes[MOE_MEM_GRADS] == 4 * (size_t)p.params_local);
    /* the design's figure: at most 6 + 10/d bytes a parameter for the state,
     * so under 105 GiB per GPU at EP=8 x DP=1 with recompute */
    CHECK_MSG(p.total <= (size_t)105 << 30, "%.1f GiB", p.total / 1073741824.0);
    moe_plan d2, b16;
    CHECK(plan_make(&d2, &c, 8, 2, NULL, &e) == 0); /* an 80 GB H100 at DP=2 */
    CHECK_MSG(d2.total <= (size_t)76 << 30, "DP=2: %.1f GiB", d2.total / 1073741824.0);
    c.optimizer.moments_dtype = MOE_MOMENTS_DTYPE_BF16;
    CHECK(plan_make(&b16, &c, 8, 1, NULL, &e) == 0);
    CHECK_MSG(b16.total <= (size_t)82 << 30, "bf16 moments: %.1f GiB", b16.total / 1073741824.0);
    c.optimizer.moments_dtype = MOE_MOMENTS_DTYPE_FP32;
    /* capacity: 8192 tokens x top-2 x 1.5, not EP x N x K = 131,072 rows */
    CHECK_MSG(p.cap_rows == 24576, "%zu rows", p.cap_rows);
    c.parallel.expert_capacity_factor = 8;
    CHECK(plan_make(&q, &c, 8, 1, NULL, &e) == 0);
    CHECK_MSG(q.cap_rows == 131072, "%zu rows", q.cap_rows);
    CHECK(q.bytes[MOE_MEM_CAPACITY] > 4 * p.bytes[MOE_MEM_CAPACITY]);
    /* recompute keeps one layer's activations */
    CHECK(p.recompute && p.total < p.total_flip);
    /* DP shards the optimizer state */
    c.parallel.expert_capacity_factor = 1.5;
    CHECK(plan_make(&q, &c, 8, 2, NULL, &e) == 0);
    CHECK(q.bytes[MOE_MEM_OPTIMIZER] < 0.6 * p.bytes[MOE_MEM_OPTIMIZER]);
    CHECK(p.ep_bytes > 0 && q.dp_bytes > 0);
    /* the exchange overlapped: passes of half the capacity (the expert
     * buffers shrink), and the backward sends again the last layer's rows
     * (with recompute; every layer's without: 16,384 rows x 7/8 away, bf16
     * rows of 8 KiB and a router weight each) */
    c.parallel.overlap_expert_exchange = 1;
    moe_plan o, on_flip, off_flip;
    CHECK(plan_make(&o, &c, 8, 1, NULL, &e) == 0);
    CHECK_MSG(o.cap_rows == 12288 && o.ep_overlap, "%zu rows", o.cap_rows);
    CHECK(o.bytes[MOE_MEM_CAPACITY] < 0.7 * p.bytes[MOE_MEM_CAPACITY] && o.total < p.total);
    double row_again = 16384.0 * 7 / 8 * (8192 + 4);
    CHECK_NEAR(o.ep_bytes - p.ep_bytes, row_again, 1);
    c.train.activation_recompute = 0;
    CHECK(plan_make(&on_flip, &c, 8, 1, NULL, &e) == 0);
    c.parallel.overlap_expert_exchange = 0;
    CHECK(plan_make(&off_flip, &c, 8, 1, NULL, &e) == 0);
    CHECK_NEAR(on_flip.ep_bytes - off_flip.ep_bytes, 32 * row_again, 32);
    c.train.activation_recompute = 1;
}

/* Over several ranks the optimizer's own create is counted (today's ZeRO
 * where its host staging is small), and its layout agrees with it. */
static void test_sharded_optimizer_counted(void)
{
    moe_config c;
    if (load(&c, "L0_sanity"))
        return;
    moe_err e = {{0}};
    moe_plan p;
    CHECK_MSG(plan_make(&p, &c, 2, 2, NULL, &e) == 0, "%s", e.msg);
    CHECK(p.optimizer_counted == 1 && p.moments > 0);
    CHECK(p.bytes[MOE_MEM_OPTIMIZER] > p.moments);
    /* sharded: less than the unsharded moments of this rank's parameters */
    CHECK(p.moments < 2 * sizeof(real) * (size_t)p.params_local);
}

static void test_plan_fit(void)
{
    moe_config c;
    if (load(&c, "L1_8x7B_ep"))
        return;
    moe_err e = {{0}};
    char msg[2048];
    CHECK(plan_fit(&c, 8, 1, 80 * GIB, 1, msg, sizeof msg, &e) == PLAN_REFUSE);
    CHECK_MSG(strstr(msg, "L1_8x7B_ep at EP=8 x DP=1 needs") && strstr(msg, "80.0 GiB") &&
                  strstr(msg, "EP=8 x DP=2 (16 GPUs)") && strstr(msg, "optimizer.moments_dtype=bf16") &&
                  strstr(msg, "fp8_block"),
              "%s", msg);
    CHECK(plan_fit(&c, 8, 1, 80 * GIB, 0, msg, sizeof msg, &e) == PLAN_WARN);
    CHECK(plan_fit(&c, 8, 1, 4096 * GIB, 1, msg, sizeof msg, &e) == PLAN_FITS && !msg[0]);
    CHECK(plan_fit(&c, 3, 1, 80 * GIB, 1, msg, sizeof msg, &e) == PLAN_REFUSE);
    CHECK_MSG(strstr(e.msg, "parallel.ep=3 does not divide"), "%s", e.msg);
}


/* plan_make counts one and two layers and extends them: the same bytes, kind
 * by kind, as counting every layer, over EP, DP, recompute modes, moment
 * dtypes and the cpu backend's layout */
static void check_extended(const moe_config *c, int ep, int dp, moe_backend *shape)
{
    moe_err e = {{0}};
    moe_plan a, b;
    CHECK_MSG(plan_make(&a, c, ep, dp, shape, &e) == 0, "%s", e.msg);
    CHECK_MSG(plan_make_counted(&b, c, ep, dp, shape, 1, &e) == 0, "%s", e.msg);
    for (int k = 0; k < MOE_MEM_KINDS; k++) {
        CHECK_MSG(a.bytes[k] == b.bytes[k], "%s L=%d EP=%d DP=%d %s: extended %zu, counted %zu",
                  c->name, c->model.num_layers, ep, dp, plan_kind_name(k), a.bytes[k], b.bytes[k]);
        CHECK(a.bytes_flip[k] == b.bytes_flip[k]);
    }
    CHECK(a.total == b.total && a.total_flip == b.total_flip && a.moments == b.moments);
    CHECK(a.params_local == b.params_local && a.params_local_expert == b.params_local_expert);
    CHECK(a.ep_bytes == b.ep_bytes && a.dp_bytes == b.dp_bytes);
}

static void test_layers_extended_exactly(void)
{
    moe_config c;
    if (load(&c, "L0_sanity"))
        return;
    moe_err e = {{0}};
    moe_backend *cpu = NULL;
    CHECK(cpu_backend_create(&cpu, 1, &e) == 0);
    c.model.num_layers = 7;
    c.parallel.grad_bucket_mb = 1; /* several buckets a layer */
    static const int layouts[][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 3}};
    for (int run = 0; run < 12; run++) {
        c.train.activation_recompute = run % 3 == 1;
        c.train.recompute_experts = run % 3 == 2;
        c.optimizer.moments_dtype = run / 3 % 2 ? MOE_MOMENTS_DTYPE_BF16 : MOE_MOMENTS_DTYPE_FP32;
        c.precision.compute = run / 6 ? MOE_PREC_FP8_BLOCK : MOE_PREC_BF16;
        for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
            check_extended(&c, layouts[i][0], layouts[i][1], NULL);
        check_extended(&c, 1, 1, cpu);
    }
    cpu->destroy(cpu);
    if (load(&c, "L1_8x7B_ep"))
        return;
    c.model.num_layers = 4;
    check_extended(&c, 8, 1, NULL);
    check_extended(&c, 8, 2, NULL);
    c.optimizer.moments_dtype = MOE_MOMENTS_DTYPE_BF16;
    check_extended(&c, 8, 4, NULL);
}

#ifdef __SANITIZE_ADDRESS__
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double peak_rss_mib(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* Any config the schema takes plans in well under a second and 100 MB of
 * host memory: thousands of layers, thousands of experts, a 16M vocabulary,
 * a million tokens a sequence, each with the fit check a launcher makes */
static void test_huge_plans_bounded(void)
{
    static const char *const huge[][4] = {
        {"model.num_layers=16384", NULL},
        {"model.num_layers=65536", "model.hidden_size=1024", "model.intermediate_size=4096", NULL},
        {"model.num_experts=4096", "parallel.ep=1024", "model.intermediate_size=1024", NULL},
        {"model.vocab_size=16777216", NULL},
        {"train.seq_length=1048576", "model.max_position_embeddings=1048576", NULL},
    };
    for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
        int n = 0;
        while (n < 4 && huge[i][n])
            n++;
        moe_config c;
        moe_err e = {{0}};
        if (config_load(&c, "L1_8x7B_ep", MOE_CONFIG_DIR_DEFAULT, n, (char *const *)huge[i], &e)) {
            CHECK_MSG(0, "%s: %s", huge[i][0], e.msg);
            continue;
        }
        double t0 = seconds_now();
        moe_plan p;
        CHECK_MSG(plan_make(&p, &c, c.parallel.ep, 2, NULL, &e) == 0, "%s: %s", huge[i][0], e.msg);
        char msg[2048];
        plan_fit(&c, c.parallel.ep, 2, 80 * GIB, 1, msg, sizeof msg, &e);
        double s = seconds_now() - t0, rss = peak_rss_mib();
        /* AddressSanitizer's shadow and quarantine of freed blocks (256 MiB) make both
         * figures its own: the bounds are the release build's */
        CHECK_MSG(SANITIZED || s < 1.0, "%s: the plan and its fit check took %.2f s", huge[i][0], s);
        CHECK_MSG(SANITIZED || rss < 100, "%s: %.1f MiB of host memory at the peak", huge[i][0], rss);
        CHECK(p.params_total > 10000000000LL && p.total > p.bytes[MOE_MEM_GRADS]);
        fprintf(stderr, "  %-26s %9.1f GiB a rank, planned and fit-checked in %.3f s, peak %.1f MiB\n",
                huge[i][0], p.total / GIB, s, rss);
    }
}

/* Beyond the limits: the schema refuses with the key and the limit, and
 * plan_make refuses a layout beyond them before it counts anything */
static void test_absurd_refused(void)
{
    moe_config c;
    moe_err e = {{0}};
    char *layers[] = {"model.num_layers=65537"};
    CHECK(config_load(&c, "L1_8x7B_ep", MOE_CONFIG_DIR_DEFAULT, 1, layers, &e) != 0);
    CHECK_MSG(strstr(e.msg, "model.num_layers = 65537") && strstr(e.msg, "1..65536"), "%s", e.msg);
    char *tokens[] = {"train.micro_batch_size=64", "train.seq_length=1048576",
                      "model.max_position_embeddings=1048576"};
    CHECK(config_load(&c, "L1_8x7B_ep", MOE_CONFIG_DIR_DEFAULT, 3, tokens, &e) != 0);
    CHECK_MSG(strstr(e.msg, "train.micro_batch_size x train.seq_length") &&
                  strstr(e.msg, "at most 16777216"),
              "%s", e.msg);
    char *params[] = {"model.num_layers=65536", "model.num_experts=4096"};
    CHECK(config_load(&c, "L1_8x7B_ep", MOE_CONFIG_DIR_DEFAULT, 2, params, &e) != 0);
    CHECK_MSG(strstr(e.msg, "parameters; at most"), "%s", e.msg);
    char *buckets[] = {"parallel.grad_bucket_mb=1", "model.num_layers=2048"};
    CHECK(config_load(&c, "L1_8x7B_ep", MOE_CONFIG_DIR_DEFAULT, 2, buckets, &e) != 0);
    CHECK_MSG(strstr(e.msg, "parallel.grad_bucket_mb = 1 cuts") && strstr(e.msg, "at most 262144"),
              "%s", e.msg);
    if (load(&c, "L1_8x7B_ep"))
        return;
    moe_plan p;
    CHECK(plan_make(&p, &c, 8, MOE_MAX_WORLD, NULL, &e) != 0);
    CHECK_MSG(strstr(e.msg, "ranks; a run has at most 65536"), "%s", e.msg);
}

/* Every byte of a GPU rank in the plan: the rows beside be->alloc follow the
 * backend's own size functions, the total is their sum, a CPU rank has none */
static void test_device_rows(void)
{
    moe_config c;
    moe_err e = {{0}};
    char *fp8[] = {"precision.compute=fp8_block"};
    if (config_load(&c, "bench_8x7B_2L_genomic_64k", MOE_CONFIG_DIR_DEFAULT, 1, fp8, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    moe_plan p;
    CHECK_MSG(plan_make(&p, &c, 1, 1, NULL, &e) == 0, "%s", e.msg);
    size_t I = 14336, rows = 65536 * 2; /* one rank: every token's top-2 rows in one pass */
    CHECK_MSG(p.cap_rows == rows, "%zu", p.cap_rows);
    size_t bwd = cuda_scratch_grown(cuda_expert_bwd_slot_bytes(8192, (int)I));
    CHECK(p.dev[PLAN_DEV_EXPERT_BWD] == 4 * bwd);
    /* chunked (the SwiGLU kernel writes the kept codes): a chunk's bf16 h1, h3 in the
     * backward's slots, and one more expert weight in E4M3 (w2: 4096 x 14336, 56 MiB) */
    CHECK_MSG(p.dev[PLAN_DEV_FP8_H] == cuda_scratch_grown((size_t)4096 * I) +
                                           cuda_scratch_grown(4 * lowp_fp8blk_128x128_scales(4096, I)),
              "%zu", p.dev[PLAN_DEV_FP8_H]);
    /* unchunked (runtime.fp8_fused_save = false): the pass's bf16 h1, h3 at 64k, 9.4 GB with
     * the scratch's head room */
    char *unfused[] = {"precision.compute=fp8_block", "runtime.fp8_fused_save=false"};
    moe_plan pu;
    CHECK_MSG(config_load(&c, "bench_8x7B_2L_genomic_64k", MOE_CONFIG_DIR_DEFAULT, 2, unfused, &e) == 0 &&
                  plan_make(&pu, &c, 1, 1, NULL, &e) == 0, "%s", e.msg);
    CHECK(pu.dev[PLAN_DEV_FP8_H] == 2 * (cuda_scratch_grown(cuda_fp8_h_bf16_bytes(rows, (int)I)) - bwd));
    CHECK_MSG(pu.dev[PLAN_DEV_FP8_H] + 2 * bwd > (size_t)9300000000 &&
                  pu.dev[PLAN_DEV_FP8_H] + 2 * bwd < (size_t)9500000000,
              "%zu", pu.dev[PLAN_DEV_FP8_H] + 2 * bwd);
    if (config_load(&c, "bench_8x7B_2L_genomic_64k", MOE_CONFIG_DIR_DEFAULT, 1, fp8, &e) ||
        plan_make(&p, &c, 1, 1, NULL, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    CHECK(p.dev[PLAN_DEV_NCCL] == 0 && p.dev[PLAN_DEV_CONTEXT] > 0 && p.dev[PLAN_DEV_MARGIN] > 0);
    size_t sum = 0;
    for (int r = 0; r < PLAN_DEV_ROWS; r++)
        sum += p.dev[r];
    CHECK(p.dev_total == sum && p.need == p.total + sum && p.need_flip == p.total_flip + sum);
    /* the measured peaks of one H100 (bf16, bf16 moments): the plan's use, the margin
     * aside, within 0.5 GiB of each (NOTES.md, long genomic contexts) */
    static const struct { const char *cfg, *extra; double peak; } runs[] = {
        {"bench_8x7B_2L_genomic", NULL, 38.1},
        {"bench_8x7B_2L_genomic_32k", NULL, 50.4},
        {"bench_8x7B_2L_genomic_64k", NULL, 66.5},
        {"bench_8x7B_2L_genomic_128k", "train.activation_recompute=true", 77.3},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char *items[] = {(char *)runs[i].extra};
        if (config_load(&c, runs[i].cfg, MOE_CONFIG_DIR_DEFAULT, runs[i].extra ? 1 : 0, items, &e) ||
            plan_make(&p, &c, 1, 1, NULL, &e)) {
            CHECK_MSG(0, "%s: %s", runs[i].cfg, e.msg);
            continue;
        }
        double use = (p.need - p.dev[PLAN_DEV_MARGIN]) / GIB;
        CHECK_MSG(fabs(use - runs[i].peak) < 0.5, "%s: planned %.2f GiB in use, measured %.1f",
                  runs[i].cfg, use, runs[i].peak);
    }
    /* NCCL: an EP group's all-to-all peers and rings */
    if (load(&c, "L1_8x7B_ep"))
        return;
    CHECK(plan_make(&p, &c, 8, 2, NULL, &e) == 0);
    CHECK(p.dev[PLAN_DEV_NCCL] == 7 * PLAN_NCCL_P2P_PEER_BYTES +
                                      3 * PLAN_NCCL_RING_CHANNELS * PLAN_NCCL_CONNECTION_BYTES);
    moe_backend *cpu = NULL;
    if (load(&c, "L0_sanity") || cpu_backend_create(&cpu, 1, &e))
        return;
    CHECK(plan_make(&p, &c, 1, 1, cpu, &e) == 0 && p.dev_total == 0 && p.need == p.total);
    cpu->destroy(cpu);
}

/* 8 x H100 80 GB at EP=8 with bf16 moments: 76.85 GiB allocated fits the card's
 * 79.6 GiB, but not with what a rank holds beside it */
static void test_fit_counts_every_row(void)
{
    moe_config c;
    if (load(&c, "L1_8x7B_ep"))
        return;
    c.optimizer.moments_dtype = MOE_MOMENTS_DTYPE_BF16;
    moe_err e = {{0}};
    char msg[4096];
    double h100 = 81559.0 * 1048576.0;
    CHECK(plan_fit(&c, 8, 1, h100, 1, msg, sizeof msg, &e) == PLAN_REFUSE);
    CHECK_MSG(strstr(msg, "NCCL buffers") && strstr(msg, "GiB short") &&
                  strstr(msg, "EP=8 x DP=2 (16 GPUs)") && strstr(msg, "train.seq_length=4096"),
              "%s", msg);
    CHECK(plan_fit(&c, 8, 2, h100, 1, msg, sizeof msg, &e) == PLAN_FITS);
}

/* the free memory injected in the backend: fits, short (refuse, warn), off */
static size_t injected_free;
static size_t fake_free(moe_backend *be) { (void)be; return injected_free; }

static void test_trainer_checks_free_memory(void)
{
    moe_config c;
    if (load(&c, "L1_8x7B_ep"))
        return;
    c.optimizer.moments_dtype = MOE_MOMENTS_DTYPE_BF16;
    moe_err e = {{0}};
    moe_backend *be = NULL;
    CHECK(count_backend_create(&be, NULL, 0, &e) == 0);
    be->mem_free = fake_free;
    injected_free = (size_t)200 << 30;
    CHECK_MSG(memory_check_before_alloc(&c, be, 8, 1, 3, &e) == 0, "%s", e.msg);
    injected_free = (size_t)79 << 30; /* an H100 80GB with its context made */
    CHECK(memory_check_before_alloc(&c, be, 8, 1, 3, &e) == -1);
    CHECK_MSG(strstr(e.msg, "rank 3's GPU has free (cudaMemGetInfo) 79.0 GiB") &&
                  strstr(e.msg, "short") && strstr(e.msg, "EP=8 x DP=2 (16 GPUs)") &&
                  strstr(e.msg, "(fits)") && !strstr(e.msg, "CUDA context"),
              "%s", e.msg);
    c.runtime.memory_check = MOE_RT_MEMCHECK_WARN;
    CHECK(memory_check_before_alloc(&c, be, 8, 1, 3, &e) == 0);
    c.runtime.memory_check = MOE_RT_MEMCHECK_OFF;
    injected_free = 1;
    CHECK(memory_check_before_alloc(&c, be, 8, 1, 3, &e) == 0);
    be->destroy(be);
}

int main(void)
{
    RUN(test_plan_equals_allocation);
    RUN(test_headline_plan);
    RUN(test_sharded_optimizer_counted);
    RUN(test_plan_fit);
    RUN(test_layers_extended_exactly);
    RUN(test_huge_plans_bounded);
    RUN(test_absurd_refused);
    RUN(test_device_rows);
    RUN(test_fit_counts_every_row);
    RUN(test_trainer_checks_free_memory);
    return check_summary("test_plan");
}

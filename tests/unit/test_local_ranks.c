/* Several ranks in one process: each a thread with its own backend (on a
 * GPU: its own stream on the same device, and its own communicator stream)
 * over the in-process communicator, which keeps the stream order of NCCL
 * and nothing more (comm_local.h). EP=2, EP=4, EP=8 with one expert a rank,
 * DP=2 and EP=2 x DP=2, and expert buffers by capacity (rows beyond it in
 * further passes) train a few steps through the expert-parallel dispatcher
 * and the distributed optimizer (buckets of 512 gradients, so tensors
 * straddle buckets and slices are uneven) against one rank that takes the
 * whole global batch: the same losses, gradient norms and weights, moments
 * that come out and go back in, bf16 moments too, and the shard's
 * checkpoint written by every rank (masters and moments read from the
 * backend's memory), the state cleared and read back: the same bits.
 * Every collective runs with seeded random delays on the producers'
 * streams and the communicator's (MOE_TEST_SEED=N replays one); on the cpu
 * each rank's communicator queue is a thread of its own, so its copies run
 * late as a GPU's do. The same run with half of the stream order switched
 * off must fail: the harness has teeth. A rank that never joins a collective ends it for every
 * rank within the timeout, with its name.
 * Usage: test_local_ranks [cpu|cuda] (cpu in CI; cuda on a GPU machine). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../trainer/ckpt/fsio.h"
#include "../../trainer/ckpt/json.h"
#include "../../trainer/ckpt/shard_read.h"
#include "../../trainer/ckpt/shard_write.h"
#include "../../trainer/model/model.h"
#include "../../trainer/comm/comm_local.h"
#include "../../trainer/dispatch/dispatch_ep.h"
#include "../../trainer/parallel/layout_io.h"
#include "../../trainer/parallel/zero.h"
#include "../check.h"

static const moe_dims DIMS = {.C = 32, .L = 2, .NH = 4, .NKV = 2, .HD = 8, .E = 4, .K = 2,
                              .I = 48, .V = 256, .eps = 1e-5, .theta = 10000, .aux_coef = 0.01};
enum { B = 2, T = 16, STEPS = 3, MAX_RANKS = 8 };

static uint64_t seed = 1;     /* of the delays */
static double delay_us = 0;   /* the delays' ceiling: on on a GPU */

/* the layout's model: E experts (one a rank at EP = E) */
static moe_dims dims_for(int ep)
{
    moe_dims d = DIMS;
    d.E = ep > d.E ? ep : d.E;
    return d;
}

static const char *backend_name = "cpu";
/* an order-off run's outcome, the exit status of the process that ran it
 * (expect_miss): 42 it matched the one-rank run, 0 it did not, 43 it could
 * not run (no reference, no world), -1 not yet decided */
enum { ORDER_MATCHED = 42, ORDER_MISSED = 0, ORDER_DID_NOT_RUN = 43 };
static int order_outcome = -1;

static int open_backend(moe_backend **be, moe_err *e)
{
    if (strcmp(backend_name, "cuda")) /* each queue a thread whose copies run late */
        return cpu_backend_create(be, 1, e) || cpu_backend_enable_queues(*be, e) ? -1 : 0;
#ifdef MOE_WITH_CUDA
    return cuda_backend_create(be, 0, e);
#else
    return moe_errf(e, "this test was built without the CUDA backend");
#endif
}

/* sequence s of the global batch (every rank's B sequences in rank order) */
static void sequence(int s, int step, int32_t *tok, int32_t *tgt)
{
    for (int i = 0; i < T; i++) {
        int k = s * T + i;
        tok[i] = 4 + (k * 7 + step * 13 + (k / 5) * 3) % 60;
        tgt[i] = k % 7 == 6 ? -1 : 4 + (k * 11 + step * 5) % 60;
    }
}

static int64_t global_valid(int world, int step)
{
    int64_t n = 0;
    int32_t tok[T], tgt[T];
    for (int s = 0; s < world * B; s++) {
        sequence(s, step, tok, tgt);
        for (int i = 0; i < T; i++)
            n += tgt[i] >= 0;
    }
    return n;
}

static moe_adamw_hyper hyper(int step)
{
    return (moe_adamw_hyper){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f, .bias_corr1 = (real)(1 - pow(0.9, step)),
                             .bias_corr2 = (real)(1 - pow(0.95, step)), .grad_scale = 1};
}

#define CLIP 0.5

typedef struct job_s {
    int rank, world, ep, bf16;
    double capacity;    /* parallel.expert_capacity_factor (0: one pass) */
    int overlap;        /* parallel.overlap_expert_exchange */
    int recompute;      /* MOE_RECOMPUTE_* */
    int fewest_passes;  /* of any layer in any step */
    moe_local_world *lw;
    double loss[STEPS], norm[STEPS];
    real *masters;      /* this rank's layout, after the steps */
    real *expected;     /* the one-rank run's, sliced to this rank's layout */
    size_t n;
    const real *ref_full; /* the one-rank run's masters */
    int moments_round_trip;
    int init_same;        /* the masters' initialisation where they live == the host's */
    const char *ckpt_dir; /* the layout's checkpoint directory */
    struct job_s *all;    /* every rank's job (rank 0 writes the index from their records) */
    char *record;         /* this rank's index record */
    size_t record_len;
    int ckpt_same;        /* masters and moments read back from the checkpoint == before */
    char err[MOE_ERR_LEN];
} job;

static int world_sum(void *ctx, double *v, int n, moe_err *e)
{
    return comm_allreduce_sum(ctx, v, (size_t)n, MOE_DT_DOUBLE, e);
}

/* The seeded masters made where they live (on cuda: in the optimizer's
 * shards, on the device) against the host's initialisation, bit for bit. */
static int init_both_ways(job *j, moe_model *m, moe_err *e)
{
    size_t bytes = sizeof(real) * m->n_elems;
    real *here = malloc(bytes), *host = malloc(bytes);
    int rc = -1;
    if (!here || !host) {
        moe_errf(e, "out of memory");
        goto out;
    }
    m->init_on_host = 1;
    if (model_init_random(m, 42, 0.2, e) || model_get_masters(m, host, e))
        goto out;
    m->init_on_host = 0;
    if (model_init_random(m, 42, 0.2, e) || model_get_masters(m, here, e))
        goto out;
    j->init_same = !memcmp(here, host, bytes);
    rc = 0;
out:
    free(here);
    free(host);
    return rc;
}

#define CKPT_STAGING 4096 /* small: every file streams through it in several passes */

/* rank 0, once every rank's file is written: the index of the records */
static int write_index(const job *j, moe_err *e)
{
    size_t lens[MAX_RANKS], total = 0;
    for (int r = 0; r < j->world; r++)
        total += lens[r] = j->all[r].record_len;
    char *texts = malloc(total + 1), *at = texts;
    if (!texts)
        return moe_errf(e, "out of memory");
    for (int r = 0; r < j->world; r++) {
        memcpy(at, j->all[r].record, lens[r]);
        at += lens[r];
    }
    int rc = shard_index_write(j->ckpt_dir, "test_local_ranks", CKPT_STAGING, texts, lens,
                               j->world, e);
    free(texts);
    return rc;
}

/* The shard's checkpoint through files and back: every element of the
 * masters and moments read back bit for bit after the state was zeroed. */
static int ckpt_round_trip(job *j, moe_model *m, moe_zero *z, moe_par *p, moe_err *e)
{
    size_t n = m->n_elems, bytes = sizeof(real) * n;
    real *w0 = malloc(bytes), *m0 = malloc(bytes), *v0 = malloc(bytes);
    real *w1 = malloc(bytes), *m1 = malloc(bytes), *v1 = calloc(n, sizeof(real));
    void *staging = malloc(CKPT_STAGING);
    ckpt_slice_list l = {0}, back = {0};
    shard_set *s = NULL;
    json_writer rec;
    jw_init(&rec, 0);
    char name[64];
    snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", j->rank, j->world);
    int rc = -1;
    if (!w0 || !m0 || !v0 || !w1 || !m1 || !v1 || !staging) {
        moe_errf(e, "out of memory");
        goto out;
    }
    if (model_get_masters(m, w0, e) || zero_get_moments(z, m0, v0, e) ||
        zero_ckpt_slices(z, 1, &l, e) ||
        shard_write(j->ckpt_dir, name, &l, CKPT_STAGING, staging, CKPT_STAGING, &rec, e) ||
        jw_finish(&rec, e))
        goto out;
    j->record = malloc(rec.len + 1);
    if (!j->record) {
        moe_errf(e, "out of memory");
        goto out;
    }
    memcpy(j->record, rec.buf, rec.len);
    j->record_len = rec.len;
    if (comm_barrier(p->world, e) || (j->rank == 0 && write_index(j, e)) ||
        comm_barrier(p->world, e))
        goto out;
    memset(w1, 0, bytes);
    if (model_set_masters(m, w1, e) || zero_set_moments(z, v1, v1, e) ||
        shard_set_open(j->ckpt_dir, &s, e) || zero_ckpt_slices(z, 0, &back, e) ||
        shard_set_fill(s, &back, staging, CKPT_STAGING, e) || zero_ckpt_loaded(z, e) ||
        model_get_masters(m, w1, e) || zero_get_moments(z, m1, v1, e))
        goto out;
    j->ckpt_same = !memcmp(w0, w1, bytes) && !memcmp(m0, m1, bytes) && !memcmp(v0, v1, bytes);
    rc = 0;
out:
    shard_set_close(s);
    ckpt_slices_free(&l);
    ckpt_slices_free(&back);
    jw_free(&rec);
    free(w0), free(m0), free(v0), free(w1), free(m1), free(v1), free(staging);
    return rc;
}

static int train_rank(job *j, moe_backend *be, moe_par *p, moe_err *e)
{
    moe_dispatcher *disp = NULL;
    moe_model *m = NULL;
    moe_zero *z = NULL;
    real *mh = NULL, *vh = NULL, *back = NULL;
    int rc = -1;
    moe_dims d = dims_for(j->ep);
    if (p->ep_size > 1 ? dispatcher_ep_create(&disp, p->ep, d.E, e)
                       : dispatcher_local_create(&disp, e))
        goto out;
    if (p->ep_size > 1) {
        dispatcher_ep_set_capacity(disp, j->capacity);
        dispatcher_ep_set_overlap(disp, j->overlap);
    }
    moe_zero_opts zo = {.bucket_bytes = 512 * sizeof(real), .moments_bf16 = j->bf16};
    if (model_create_parallel(&m, &d, be, disp, B, T, p->ep_rank, p->ep_size, 0, j->recompute,
                              e) ||
        zero_create(&z, m, p, &zo, e) || init_both_ways(j, m, e))
        goto out;
    m->stats_sum = world_sum;
    m->stats_ctx = p->world;
    for (int s = 0; s < STEPS; s++) {
        int32_t tok[B * T], tgt[B * T];
        for (int b = 0; b < B; b++)
            sequence(j->rank * B + b, s, tok + b * T, tgt + b * T);
        double ls;
        int64_t nv;
        model_zero_grad(m);
        zero_arm(z); /* buckets reduce beside the backward, as the trainer runs them */
        if (model_forward_backward(m, tok, tgt, 1.0 / global_valid(j->world, s), d.aux_coef,
                                   &ls, &nv, e) ||
            comm_allreduce_sum(p->world, &ls, 1, MOE_DT_DOUBLE, e) ||
            zero_step(z, hyper(s + 1), CLIP, &j->norm[s], e))
            goto out;
        j->loss[s] = ls / global_valid(j->world, s);
        for (int l = 0; l < d.L; l++) {
            int n = model_expert_passes(m, l);
            j->fewest_passes = s + l == 0 || n < j->fewest_passes ? n : j->fewest_passes;
        }
    }
    j->n = m->n_elems;
    j->masters = malloc(sizeof(real) * j->n);
    j->expected = malloc(sizeof(real) * j->n);
    mh = malloc(sizeof(real) * j->n);
    vh = malloc(sizeof(real) * j->n);
    back = malloc(sizeof(real) * j->n);
    if (!j->masters || !j->expected || !mh || !vh || !back) {
        moe_errf(e, "out of memory");
        goto out;
    }
    moe_model full;
    if (model_get_masters(m, j->masters, e) || layout_full_make(&full, m, e))
        goto out;
    layout_slice_local(m, &full, j->ref_full, j->expected);
    layout_full_free(&full);
    /* the moments out, changed, back in, out again */
    if (zero_get_moments(z, mh, vh, e))
        goto out;
    for (size_t i = 0; i < j->n; i++)
        mh[i] = (real)(i % 97) * 0.25f;
    if (zero_set_moments(z, mh, vh, e) || zero_get_moments(z, back, vh, e))
        goto out;
    j->moments_round_trip = !memcmp(back, mh, sizeof(real) * j->n);
    if (ckpt_round_trip(j, m, z, p, e))
        goto out;
    rc = 0;
out:
    free(mh);
    free(vh);
    free(back);
    zero_destroy(z);
    if (m)
        model_destroy(m);
    if (disp)
        disp->destroy(disp);
    return rc;
}

static void *rank_main(void *arg)
{
    job *j = arg;
    moe_err e = {{0}};
    moe_backend *be = NULL;
    moe_par p;
    memset(&p, 0, sizeof p);
    if (open_backend(&be, &e) || comm_local_create(&p.world, j->lw, j->rank, be, &e) ||
        par_layout(&p, j->rank, j->world, j->ep, j->world / j->ep, &e) ||
        comm_split(p.world, j->rank / j->ep, j->rank, "ep", &p.ep, &e) ||
        comm_split(p.world, j->rank % j->ep, j->rank, "dp", &p.dp, &e) ||
        train_rank(j, be, &p, &e))
        snprintf(j->err, sizeof j->err, "%s", e.msg[0] ? e.msg : "failed");
    comm_destroy(p.dp);
    comm_destroy(p.ep);
    comm_destroy(p.world);
    if (be)
        be->destroy(be);
    return NULL;
}

/* One rank over the whole global batch, the model's own AdamW. */
static int reference(int world, int ep, int bf16, double *loss, double *norm, real **masters)
{
    const moe_dims d = dims_for(ep);
    moe_err e = {{0}};
    moe_backend *be = NULL;
    moe_dispatcher *disp = NULL;
    moe_model *m = NULL;
    int rc = -1, BW = B * world;
    if (open_backend(&be, &e) || dispatcher_local_create(&disp, &e) ||
        model_create_parallel(&m, &d, be, disp, BW, T, 0, 1, 1, 0, &e) ||
        model_set_moments_bf16(m, bf16, &e) || model_init_random(m, 42, 0.2, &e))
        goto out;
    int32_t *tok = malloc(sizeof(int32_t) * BW * T), *tgt = malloc(sizeof(int32_t) * BW * T);
    for (int s = 0; s < STEPS && tok && tgt; s++) {
        for (int b = 0; b < BW; b++)
            sequence(b, s, tok + b * T, tgt + b * T);
        double ls;
        int64_t nv;
        model_zero_grad(m);
        if (model_forward_backward(m, tok, tgt, 1.0 / global_valid(world, s), d.aux_coef, &ls,
                                   &nv, &e))
            break;
        loss[s] = ls / global_valid(world, s);
        norm[s] = sqrt(model_grad_sum_squares(m));
        moe_adamw_hyper h = hyper(s + 1);
        if (norm[s] > CLIP)
            h.grad_scale = (real)(CLIP / (norm[s] + 1e-6));
        model_adamw(m, &h);
        rc = s == STEPS - 1 ? 0 : -1;
    }
    free(tok);
    free(tgt);
    *masters = rc ? NULL : malloc(sizeof(real) * m->n_elems);
    if (*masters && model_get_masters(m, *masters, &e))
        rc = -1;
out:
    if (rc)
        fprintf(stderr, "  reference: %s\n", e.msg);
    if (m)
        model_destroy(m);
    if (disp)
        disp->destroy(disp);
    if (be)
        be->destroy(be);
    return rc;
}

/* EP x DP ranks as threads against the one-rank run. Tolerances: fp32 on
 * the cpu (sums in another order), bf16 compute on a GPU. order: half of
 * the stream order switched off (comm_local.h); the run must then miss. */
/* the larger, a NaN the worst of all */
static double worse(double a, double b) { return isnan(b) ? INFINITY : fmax(a, b); }

typedef struct {
    int ep, dp, bf16;
    double capacity;
    int overlap, recompute;
    comm_local_order order; /* ORDERED, or a switch that must make the run miss */
    real **keep;            /* [world]: each rank's masters handed back (else freed) */
    size_t *keep_n;         /* [world]: how many */
} layout_case;

static void check_layout(layout_case lc)
{
    int ep = lc.ep, dp = lc.dp, bf16 = lc.bf16, world = ep * dp;
    int gpu = !strcmp(backend_name, "cuda");
    /* bf16 moments round where fp32 sums differ in the last bit: a few steps of lr apart */
    double loss_tol = gpu ? 2e-3 : 2e-6, w_tol = gpu ? 2e-2 : bf16 ? 5e-4 : 2e-5;
    double rl[STEPS], rn[STEPS];
    real *ref = NULL;
    if (reference(world, ep, bf16, rl, rn, &ref)) {
        CHECK_MSG(0, "EP=%d x DP=%d: the reference run failed", ep, dp);
        order_outcome = ORDER_DID_NOT_RUN;
        return;
    }
    moe_local_world *lw = NULL;
    moe_err e = {{0}};
    job jobs[MAX_RANKS];
    uint64_t unwaited0 = cpu_queues_unwaited();
    pthread_t th[MAX_RANKS];
    char dir[] = "/tmp/moekit-local-ranks-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(comm_local_world_create(&lw, world, &e) == 0);
    if (lw) {
        comm_local_world_set_delays(lw, seed, delay_us);
        comm_local_world_set_order(lw, lc.order);
        comm_local_world_set_timeout(lw, 120);
    }
    for (int r = 0; r < world && lw; r++) {
        jobs[r] = (job){.rank = r, .world = world, .ep = ep, .bf16 = bf16, .lw = lw,
                        .capacity = lc.capacity, .overlap = lc.overlap,
                        .recompute = lc.recompute, .ref_full = ref, .ckpt_dir = dir,
                        .all = jobs};
        CHECK(pthread_create(&th[r], NULL, rank_main, &jobs[r]) == 0);
    }
    for (int r = 0; r < world && lw; r++)
        pthread_join(th[r], NULL);
    double worst_w = 0, worst_l = 0, worst_n = 0;
    int failed = 0;
    for (int r = 0; r < world && lw; r++) {
        job *j = &jobs[r];
        failed |= j->err[0] != 0;
        CHECK_MSG(lc.order || !j->err[0], "EP=%d x DP=%d rank %d: %s", ep, dp, r, j->err);
        if (j->err[0])
            continue;
        for (int s = 0; s < STEPS; s++) {
            worst_l = worse(worst_l, fabs(j->loss[s] - rl[s]) / rl[s]);
            worst_n = worse(worst_n, fabs(j->norm[s] - rn[s]) / rn[s]);
        }
        for (size_t i = 0; i < j->n; i++)
            worst_w = worse(worst_w, fabs((double)j->masters[i] - j->expected[i]));
        if (lc.keep) {
            lc.keep[r] = j->masters;
            lc.keep_n[r] = j->n;
        } else
            free(j->masters);
        free(j->expected);
        if (lc.order)
            continue;
        CHECK_MSG(j->moments_round_trip, "EP=%d x DP=%d rank %d: moments did not come back", ep,
                  dp, r);
        CHECK_MSG(j->init_same, "EP=%d x DP=%d rank %d: the masters initialised in the shards "
                  "differ from the host's initialisation", ep, dp, r);
        CHECK_MSG(j->ckpt_same, "EP=%d x DP=%d rank %d: the masters or moments read back from "
                  "the checkpoint differ from those written", ep, dp, r);
        CHECK_MSG(!(lc.overlap || lc.capacity > 0) || ep == 1 || j->fewest_passes >= 2,
                  "EP=%d x DP=%d rank %d: a layer ran in %d pass(es), the case needs two or more",
                  ep, dp, r, j->fewest_passes);
    }
    char what[160];
    snprintf(what, sizeof what, "EP=%d x DP=%d%s%s%s%s%s", ep, dp, bf16 ? " (bf16 moments)" : "",
             lc.capacity > 0 ? " (capacity passes)" : "",
             lc.overlap ? " (exchange overlapped)" : "",
             lc.recompute ? " (activation recompute)" : "", lc.order == COMM_LOCAL_NO_INPUT_ORDER ? " WITHOUT INPUT ORDER"
             : lc.order                               ? " WITHOUT OUTPUT ORDER"
                                                      : "");
    uint64_t unwaited = cpu_queues_unwaited() - unwaited0;
    printf("  %s on %s, delays up to %g us (seed %llu): worst relative loss %.2e, norm %.2e; "
           "worst weight %.2e; %llu queued copies nobody waited for%s\n",
           what, backend_name, delay_us, (unsigned long long)seed, worst_l, worst_n, worst_w,
           (unsigned long long)unwaited, failed ? "; a rank failed" : "");
    int within = !failed && worst_l <= loss_tol && worst_n <= 10 * loss_tol && worst_w <= w_tol;
    if (lc.order)
        order_outcome = !lw ? ORDER_DID_NOT_RUN : within ? ORDER_MATCHED : ORDER_MISSED;
    if (lc.order)
        CHECK_MSG(!within, "%s: the run matched the one-rank run although the collectives were "
                  "not ordered after their producers: the harness has no teeth", what);
    else
        CHECK_MSG(within, "%s: loss %.2e, norm %.2e, weights %.2e off the one-rank run", what,
                  worst_l, worst_n, worst_w);
    for (int r = 0; r < world && lw; r++)
        free(jobs[r].record);
    CHECK(fsio_rm_rf(dir, &e) == 0);
    comm_local_world_destroy(lw);
    free(ref);
}

static void test_ep2(void) { check_layout((layout_case){.ep = 2, .dp = 1}); }
static void test_ep4(void) { check_layout((layout_case){.ep = 4, .dp = 1}); }
static void test_ep8_one_expert_a_rank(void) { check_layout((layout_case){.ep = 8, .dp = 1}); }
static void test_dp2(void) { check_layout((layout_case){.ep = 1, .dp = 2}); }
static void test_ep2_dp2(void) { check_layout((layout_case){.ep = 2, .dp = 2}); }
static void test_ep2_dp2_bf16_moments(void) { check_layout((layout_case){.ep = 2, .dp = 2, .bf16 = 1}); }
/* expert buffers of 0.4 N K rows: every layer in three or more passes */
static void test_ep4_capacity_passes(void)
{
    check_layout((layout_case){.ep = 4, .dp = 1, .capacity = 0.4});
}
static void test_ep2_dp2_capacity_passes(void)
{
    check_layout((layout_case){.ep = 2, .dp = 2, .capacity = 0.4});
}
/* The exchange overlapped with the experts' compute (dispatch_ep.c): every
 * layer in two or more passes whose exchanges stay in flight beside another
 * pass's experts, with and without activation recompute (where the next
 * pass's rows wait in flight through the backward of the first), and with
 * capacity passes; on the cpu the same bits as the run without overlap. */
static void check_overlap(layout_case lc)
{
    int world = lc.ep * lc.dp, cpu = !strcmp(backend_name, "cpu");
    real *plain[MAX_RANKS] = {0}, *over[MAX_RANKS] = {0};
    size_t n_plain[MAX_RANKS] = {0}, n_over[MAX_RANKS] = {0};
    layout_case off = lc;
    off.overlap = 0;
    off.keep = plain;
    off.keep_n = n_plain;
    lc.overlap = 1;
    lc.keep = over;
    lc.keep_n = n_over;
    if (cpu)
        check_layout(off);
    check_layout(lc);
    for (int r = 0; r < world && cpu; r++) {
        CHECK_MSG(plain[r] && over[r], "EP=%d x DP=%d rank %d: a run gave no masters", lc.ep,
                  lc.dp, r);
        CHECK_MSG(plain[r] && over[r] && n_plain[r] == n_over[r] &&
                      !memcmp(plain[r], over[r], sizeof(real) * n_over[r]),
                  "EP=%d x DP=%d rank %d: overlapping the exchange changed the masters' bits",
                  lc.ep, lc.dp, r);
    }
    for (int r = 0; r < world; r++) {
        free(plain[r]);
        free(over[r]);
    }
}
static void test_ep2_overlap(void) { check_overlap((layout_case){.ep = 2, .dp = 1}); }
static void test_ep4_overlap_recompute(void)
{
    check_overlap((layout_case){.ep = 4, .dp = 1, .recompute = MOE_RECOMPUTE_LAYERS});
}
static void test_ep8_overlap_recompute(void)
{
    check_overlap((layout_case){.ep = 8, .dp = 1, .recompute = MOE_RECOMPUTE_LAYERS});
}
static void test_ep2_dp2_overlap_capacity_passes(void)
{
    check_overlap((layout_case){.ep = 2, .dp = 2, .capacity = 0.4});
}
static void test_ep2_dp2_overlap_capacity_recompute(void)
{
    check_overlap((layout_case){.ep = 2, .dp = 2, .capacity = 0.4,
                                .recompute = MOE_RECOMPUTE_LAYERS});
}
/* The harness's teeth: with half of the stream order taken away, the delays
 * must show. The run goes in a process of its own, this program run again
 * (not a fork: a forked child cannot use the CUDA context its parent made):
 * reads and writes out of order may land anywhere (a peer's queue still
 * reading a buffer its owner freed), and their damage must not reach this
 * process. Its stderr is dropped (MOE_TEST_CHILD_STDERR=1 keeps it). Its exit
 * status: 42 the run matched (no teeth), 43 it could not run (proves
 * nothing: a failure too), a miss otherwise (0, or a crash or a sanitizer's
 * report). */
static void expect_miss(comm_local_order order)
{
    const char *name = order == COMM_LOCAL_NO_INPUT_ORDER ? "without input order"
                                                          : "without output order";
    char seed_s[32], order_s[8];
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    snprintf(order_s, sizeof order_s, "%d", (int)order);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!getenv("MOE_TEST_CHILD_STDERR") && !freopen("/dev/null", "w", stderr))
            _exit(ORDER_DID_NOT_RUN);
        setenv("MOE_TEST_SEED", seed_s, 1);
        char *args[] = {"test_local_ranks", (char *)backend_name, "--order-off", order_s, NULL};
        execv("/proc/self/exe", args);
        _exit(ORDER_DID_NOT_RUN);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK_MSG(pid > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == ORDER_DID_NOT_RUN),
              "%s: the run could not be made (MOE_TEST_CHILD_STDERR=1 shows why)", name);
    CHECK_MSG(pid > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == ORDER_MATCHED),
              "%s: the run matched the one-rank run although the stream order was off: the "
              "harness has no teeth", name);
}

/* the process expect_miss starts: one order-off run, its outcome as the exit status */
static int order_off_run(int order)
{
    check_layout((layout_case){.ep = 2, .dp = 2, .order = (comm_local_order)order});
    return order_outcome < 0 ? ORDER_DID_NOT_RUN : order_outcome;
}

/* producers still running when a collective reads them: only a device shows it */
static void test_without_input_order_fails(void) { expect_miss(COMM_LOCAL_NO_INPUT_ORDER); }
/* a reader ahead of the collective's copies: any backend with queues */
static void test_without_output_order_fails(void) { expect_miss(COMM_LOCAL_NO_OUTPUT_ORDER); }

/* A rank that never comes: the others' collective ends within the timeout,
 * naming the collective, the group and the absent rank, and every group of
 * the world is aborted (a second collective fails at once). */
typedef struct {
    moe_local_world *lw;
    int rank;
    double took;
    int rc, rc2;
    char err[MOE_ERR_LEN], err2[MOE_ERR_LEN];
} hjob;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *hang_main(void *arg)
{
    hjob *j = arg;
    moe_err e = {{0}};
    moe_backend *be = NULL;
    moe_comm *c = NULL, *ep = NULL;
    if (open_backend(&be, &e) || comm_local_create(&c, j->lw, j->rank, be, &e) ||
        comm_split(c, 0, j->rank, "ep", &ep, &e)) {
        snprintf(j->err, sizeof j->err, "set-up: %.900s", e.msg);
        j->rc = -2;
    } else if (j->rank == 0) { /* rank 1 stops here: it died */
        size_t n = 1024 * sizeof(real);
        void *buf = be->alloc(be, 2 * n, &e);
        size_t cnt[2] = {n / 2, n / 2}, off[2] = {0, n / 2};
        double t0 = now_s();
        j->rc = buf ? comm_alltoallv(ep, buf, cnt, off, (char *)buf + n, cnt, off, &e) : -2;
        j->took = now_s() - t0;
        snprintf(j->err, sizeof j->err, "%s", e.msg);
        moe_err e2 = {{0}};
        int64_t v = 1;
        j->rc2 = comm_allreduce_sum(c, &v, 1, MOE_DT_INT64, &e2);
        snprintf(j->err2, sizeof j->err2, "%.900s", e2.msg);
        if (buf)
            be->free(be, buf);
    }
    comm_destroy(ep);
    comm_destroy(c);
    if (be)
        be->destroy(be);
    return NULL;
}

static void test_rank_never_arrives(void)
{
    moe_local_world *lw;
    moe_err e = {{0}};
    CHECK(comm_local_world_create(&lw, 2, &e) == 0);
    comm_local_world_set_timeout(lw, 1.5);
    hjob j[2] = {{.lw = lw, .rank = 0}, {.lw = lw, .rank = 1}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        CHECK(pthread_create(&th[r], NULL, hang_main, &j[r]) == 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    printf("  rank 0 gave up after %.2f s: %s\n  then: %s\n", j[0].took, j[0].err, j[0].err2);
    CHECK_MSG(j[0].rc == -1 && j[0].took >= 1.4 && j[0].took < 3.0,
              "rank 0's collective returned %d after %.2f s", j[0].rc, j[0].took);
    CHECK_MSG(strstr(j[0].err, "alltoallv on the ep group") && strstr(j[0].err, "for rank 1,") &&
                  strstr(j[0].err, "did not arrive"),
              "the message names neither the collective, its group nor the absent rank: %s",
              j[0].err);
    CHECK_MSG(j[0].rc2 == -1 && strstr(j[0].err2, "aborted"),
              "a collective on the world after the abort: %d %s", j[0].rc2, j[0].err2);
    comm_local_world_destroy(lw);
}

/* The collectives themselves on host memory (cpu backend): uneven in-place
 * reduce-scatter and all-gather, all-to-all, a mismatch named. */
typedef struct {
    moe_local_world *lw;
    int rank, ok;
    char err[MOE_ERR_LEN];
} cjob;

static void *collectives_main(void *arg)
{
    cjob *j = arg;
    moe_err e = {{0}};
    moe_backend *be = NULL;
    moe_comm *c = NULL;
    int ok = 0;
    if (cpu_backend_create(&be, 1, &e) || comm_local_create(&c, j->lw, j->rank, be, &e))
        goto out;
    size_t counts[3] = {3, 2, 2}, displs[3] = {0, 3, 5}, me = (size_t)j->rank;
    real buf[7];
    for (int i = 0; i < 7; i++)
        buf[i] = (real)(i + 10 * j->rank);
    /* sum over ranks of i + 10 r = 3 i + 30 */
    if (comm_reduce_scatter_sum(c, buf, buf + displs[me], counts, MOE_DT_REAL, &e))
        goto out;
    ok = 1;
    for (size_t i = 0; i < counts[me]; i++)
        ok &= buf[displs[me] + i] == (real)(3 * (displs[me] + i) + 30);
    if (comm_allgatherv(c, buf + displs[me], counts[me], buf, counts, displs, MOE_DT_REAL, &e))
        goto out;
    for (int i = 0; i < 7; i++)
        ok &= buf[i] == (real)(3 * i + 30);
    size_t sc[3] = {1, 1, 1}, sd[3] = {0, 1, 2}, rc[3] = {1, 1, 2};
    char s[3] = {(char)('a' + j->rank), (char)('a' + j->rank), (char)('a' + j->rank)}, r[4];
    int bad = comm_alltoallv(c, s, sc, sd, r, j->rank == 2 ? rc : sc, sd, &e);
    ok &= j->rank == 2 ? bad == -1 && strstr(e.msg, "rank 2 expects 2") != NULL
                       : bad == 0 && r[0] == 'a' && r[1] == 'b' && r[2] == 'c';
    int64_t v = j->rank + 1;
    ok &= comm_allreduce_sum(c, &v, 1, MOE_DT_INT64, &e) == 0 && v == 6;
    moe_comm *sub = NULL;
    ok &= comm_split(c, j->rank == 1, -j->rank, "sub", &sub, &e) == 0;
    if (sub) {
        ok &= sub->size == (j->rank == 1 ? 1 : 2) &&
              sub->rank == (j->rank == 0 ? 1 : 0); /* key -rank: rank 2 first */
        comm_destroy(sub);
    }
out:
    j->ok = ok;
    snprintf(j->err, sizeof j->err, "%s", e.msg);
    comm_destroy(c);
    if (be)
        be->destroy(be);
    return NULL;
}

static void test_collectives(void)
{
    moe_local_world *lw;
    moe_err e = {{0}};
    CHECK(comm_local_world_create(&lw, 3, &e) == 0);
    cjob j[3];
    pthread_t th[3];
    for (int r = 0; r < 3; r++) {
        j[r] = (cjob){.lw = lw, .rank = r};
        CHECK(pthread_create(&th[r], NULL, collectives_main, &j[r]) == 0);
    }
    for (int r = 0; r < 3; r++) {
        pthread_join(th[r], NULL);
        CHECK_MSG(j[r].ok, "rank %d: %s", r, j[r].err);
    }
    comm_local_world_destroy(lw);
    CHECK(comm_local_world_create(&lw, 0, &e) == -1 && strstr(e.msg, "at least one rank"));
}

/* The cpu queues the harness stands on (cpu_queue.c): a copy runs only once
 * something waits for it, or after its grace, never at once; else a missing
 * wait would read the copy's result by luck and every test above would lose
 * its teeth. */
static void test_queue_runs_copies_late(void)
{
    moe_backend *be = NULL;
    moe_err e = {{0}};
    CHECK(cpu_backend_create(&be, 1, &e) == 0 && cpu_backend_enable_queues(be, &e) == 0);
    if (!be)
        return;
    moe_queue *q = be->queue_create(be, &e);
    moe_event *ev = be->event_create(be, &e);
    real *src = be->alloc(be, 64 * sizeof(real), &e), *dst = be->alloc(be, 64 * sizeof(real), &e);
    CHECK(q && ev && src && dst);
    if (q && ev && src && dst) {
        for (int i = 0; i < 64; i++)
            src[i] = (real)(i + 1), dst[i] = 0;
        CHECK(be->copy_on(be, q, dst, src, 64 * sizeof(real), &e) == 0);
        CHECK(be->event_record(be, q, ev, &e) == 0);
        struct timespec t = {0, 10 * 1000000L}, t0, t1;
        clock_gettime(CLOCK_REALTIME, &t0); /* the grace's clock */
        nanosleep(&t, NULL);
        int early = dst[63] != 0;
        clock_gettime(CLOCK_REALTIME, &t1);
        double ms = 1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec);
        /* a machine so loaded that the sleep outlasted the grace proves nothing */
        CHECK_MSG(!early || ms > 40, "a copy nobody waited for ran within %.1f ms", ms);
        CHECK(be->event_wait(be, NULL, ev, &e) == 0);
        CHECK_MSG(dst[0] == 1 && dst[63] == 64, "the wait returned before the copy ran");
        /* left alone, the grace runs it, counted */
        uint64_t unwaited = cpu_queues_unwaited();
        dst[0] = 0;
        CHECK(be->copy_on(be, q, dst, src, sizeof(real), &e) == 0);
        for (int i = 0; i < 100 && dst[0] == 0; i++) {
            t.tv_nsec = 5 * 1000000L;
            nanosleep(&t, NULL);
        }
        CHECK_MSG(dst[0] == 1, "a copy nobody waited for never ran");
        CHECK(cpu_queues_unwaited() > unwaited);
    }
    if (q)
        be->queue_destroy(be, q);
    if (ev)
        be->event_destroy(be, ev);
    be->free(be, src);
    be->free(be, dst);
    be->destroy(be);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        backend_name = argv[1];
    /* The ranks of a job are processes, each with the GPU's hardware queues
     * to itself; here they are threads of one process, whose 8 queues (the
     * default) their streams share (two a rank, 16 at EP=8, and the one-rank
     * reference's). Two streams on one queue run in the order they were given
     * work, a dependency no event made, which could hide a missing one: as
     * many queues as the GPU has, set before CUDA starts (a user's value is
     * kept). */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    const char *sd = getenv("MOE_TEST_SEED");
    seed = sd && *sd ? strtoull(sd, NULL, 10) : (uint64_t)time(NULL);
    const char *du = getenv("MOE_TEST_DELAY_US"); /* the delays' ceiling (200 us) */
    delay_us = du && *du ? strtod(du, NULL) : 200;
    if (argc > 3 && !strcmp(argv[2], "--order-off"))
        return order_off_run(atoi(argv[3]));
    if (!strcmp(backend_name, "cpu")) {
        RUN(test_queue_runs_copies_late);
        RUN(test_collectives);
    }
    RUN(test_rank_never_arrives);
    RUN(test_ep2);
    RUN(test_ep4);
    RUN(test_ep8_one_expert_a_rank);
    RUN(test_dp2);
    RUN(test_ep2_dp2);
    RUN(test_ep2_dp2_bf16_moments);
    RUN(test_ep4_capacity_passes);
    RUN(test_ep2_dp2_capacity_passes);
    RUN(test_ep2_overlap);
    RUN(test_ep4_overlap_recompute);
    RUN(test_ep8_overlap_recompute);
    RUN(test_ep2_dp2_overlap_capacity_passes);
    RUN(test_ep2_dp2_overlap_capacity_recompute);
    RUN(test_without_output_order_fails);
    if (!strcmp(backend_name, "cuda"))
        RUN(test_without_input_order_fails);
    return check_summary("test_local_ranks");
}

/* The parallel layer on one rank, without a launcher: rank layout
 * arithmetic and its refusals, the single-rank communicator and its error
 * paths, status agreement, the expert-parallel dispatcher and the sharded
 * optimizer through the same collectives (they must compute exactly what
 * the local dispatcher and the plain AdamW do), the full-layout gather of
 * checkpoints, the router-statistics hook, and the collective watchdog.
 * Multi-rank runs are in tests/parallel/run.sh (mpirun). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../trainer/config/config.h"
#include "../../trainer/model/model.h"
#include "../../trainer/dispatch/dispatch_ep.h"
#include "../../trainer/parallel/layout_io.h"
#include "../../trainer/parallel/parallel.h"
#include "../../trainer/comm/watchdog.h"
#include "../../trainer/parallel/zero.h"
#include "../check.h"
#include "../slow_world.h"
#include "../model_rig.h"

static const moe_dims DIMS = {.C = 16, .L = 2, .NH = 2, .NKV = 1, .HD = 8, .E = 4, .K = 2,
                              .I = 12, .V = 256, .eps = 1e-5, .theta = 10000, .aux_coef = 0.01};
enum { B = 2, T = 8 };

static void test_layout(void)
{
    moe_par p;
    moe_err e = {{0}};
    CHECK(par_layout(&p, 3, 4, 2, 0, &e) == 0);
    CHECK(p.ep_rank == 1 && p.dp_rank == 1 && p.ep_size == 2 && p.dp_size == 2);
    CHECK_MSG(!strcmp(p.layout, "EP=2 x DP=2 over 4 ranks (EP groups: ranks 0-1, 2-3)"), "%s",
              p.layout);
    CHECK(par_layout(&p, 0, 1, 1, 1, &e) == 0 && !strcmp(p.layout, "EP=1 x DP=1 over 1 rank"));
    CHECK(par_layout(&p, 0, 6, 4, 0, &e) == -1);
    CHECK_MSG(strstr(e.msg, "parallel.ep = 4 does not divide the 6 ranks"), "%s", e.msg);
    CHECK(par_layout(&p, 0, 4, 2, 1, &e) == -1);
    CHECK_MSG(strstr(e.msg, "parallel.ep = 2 x parallel.dp = 1 = 2 ranks, but this job has 4"),
              "%s", e.msg);
    CHECK(par_layout(&p, 0, 4, 0, 0, &e) == -1 && strstr(e.msg, "at least 1"));
}

static void test_single_comm(void)
{
    moe_comm *c, *sub;
    moe_err e = {{0}};
    CHECK(comm_single_create(&c, &e) == 0);
    double v[2] = {1.5, 2};
    CHECK(comm_allreduce_sum(c, v, 2, MOE_DT_DOUBLE, &e) == 0 && v[0] == 1.5 && v[1] == 2);
    int64_t a = 7, b = 0;
    CHECK(comm_allgather(c, &a, &b, 1, MOE_DT_INT64, &e) == 0 && b == 7);
    size_t n3[1] = {3}, n2[1] = {2}, z[1] = {0};
    char src[3] = "ab", dst[3] = "";
    CHECK(comm_alltoallv(c, src, n3, z, dst, n3, z, &e) == 0 && !strcmp(dst, "ab"));
    CHECK(comm_alltoallv(c, src, n3, z, dst, n2, z, &e) == -1);
    CHECK_MSG(strstr(e.msg, "rank 0: alltoallv on the world group") &&
                  strstr(e.msg, "sends 3 bytes to itself but expects 2"), "%s", e.msg);
    float f[3] = {1, 2, 3}, g[3] = {0};
    CHECK(comm_reduce_scatter_sum(c, f, g, n3, MOE_DT_REAL, &e) == 0 && g[2] == 3);
    CHECK(comm_allgatherv(c, f, 2, g, n3, z, MOE_DT_REAL, &e) == -1);
    CHECK_MSG(strstr(e.msg, "sends 2 elements but the counts say 3"), "%s", e.msg);
    CHECK(comm_broadcast(c, f, sizeof f, 1, &e) == -1 && strstr(e.msg, "root 1 is not a rank"));
    CHECK(comm_barrier(c, &e) == 0);
    CHECK(comm_split(c, 0, 0, "ep", &sub, &e) == 0 && sub->size == 1 && !strcmp(sub->name, "ep"));
    comm_destroy(sub);
    comm_destroy(c);
}

static void test_agree(void)
{
    moe_comm *c;
    moe_err e = {{0}};
    CHECK(comm_single_create(&c, &e) == 0);
    CHECK(comm_agree(c, 0, "reading", &e) == 0);
    moe_errf(&e, "disk full");
    CHECK(comm_agree(c, 1, "reading", &e) == -1 && !strcmp(e.msg, "disk full"));
    comm_destroy(c);
}

static void test_launch_detection(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    if (comm_mpi_launched()) /* under mpirun: nothing to learn here */
        return;
    setenv("PMIX_RANK", "0", 1);
    CHECK(comm_mpi_launched());
    unsetenv("PMIX_RANK");
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        CHECK(!getenv(vars[i]));
    CHECK(!comm_mpi_launched());
}

/* ---- a launch without MPI: the world from the launcher's variables ---- */

static const char *const LAUNCH_VARS[] = {
    "NCCL_COMM_ID", "MOE_WORLD_SIZE", "MOE_RANK", "MOE_LOCAL_RANK", "MOE_MASTER_ADDR",
    "MOE_MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
    "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID"};

static void clear_launch_env(void)
{
    for (size_t i = 0; i < sizeof LAUNCH_VARS / sizeof *LAUNCH_VARS; i++)
        unsetenv(LAUNCH_VARS[i]);
}

/* "A=1 B=2": set exactly these launch variables */
static void launch_env(const char *vars)
{
    clear_launch_env();
    char buf[512];
    snprintf(buf, sizeof buf, "%s", vars);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        *eq = 0;
        setenv(tok, eq + 1, 1);
    }
}

/* refused, with a message that contains `want` */
static void launch_refused(const char *vars, const char *want)
{
    moe_launch l;
    moe_err e = {{0}};
    launch_env(vars);
    int rc = par_launch_from_env(&l, &e);
    CHECK_MSG(rc == -1 && strstr(e.msg, want), "%s: rc %d, '%s' (wanted '%s')", vars, rc, e.msg,
              want);
}

static void launch_ok(const char *vars, int rank, int size, int local, const char *meet)
{
    moe_launch l;
    moe_err e = {{0}};
    launch_env(vars);
    int rc = par_launch_from_env(&l, &e);
    CHECK_MSG(rc == 1 && l.rank == rank && l.size == size && l.local_rank == local &&
                  !strcmp(l.meet, meet),
              "%s: rc %d rank %d/%d local %d meet '%s' (%s)", vars, rc, l.rank, l.size,
              l.local_rank, l.meet, e.msg);
}

static void test_env_launch(void)
{
    if (comm_mpi_launched()) /* an MPI launch is never read as one */
        return;
    moe_launch l;
    moe_err e = {{0}};
    clear_launch_env();
    CHECK(par_launch_from_env(&l, &e) == 0); /* no launcher: one rank */
    /* the moekit plugin's variables alone (plain srun, MpiDefault=none) */
    launch_ok("MOE_WORLD_SIZE=4 MOE_RANK=3 MOE_LOCAL_RANK=1 MOE_MASTER_ADDR=n01 "
              "MOE_MASTER_PORT=29511", 3, 4, 1, "n01:29511");
    /* NCCL_COMM_ID, when set, is where they meet; the local rank defaults to the rank */
    launch_ok("NCCL_COMM_ID=127.0.0.1:29511 MOE_WORLD_SIZE=2 MOE_RANK=1", 1, 2, 1,
              "127.0.0.1:29511");
    /* torchrun: NCCL beside its store, on MASTER_PORT+1 */
    launch_ok("WORLD_SIZE=8 RANK=5 LOCAL_RANK=1 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500", 5, 8, 1,
              "10.0.0.1:29501");
    /* an srun step with the plugin's meeting point; SLURM_LOCALID for the GPU */
    launch_ok("SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_PROCID=1 SLURM_LOCALID=1 "
              "MOE_MASTER_ADDR=n01 MOE_MASTER_PORT=30000", 1, 2, 1, "n01:30000");
    /* torchrun inside an srun task: torchrun's ranks, not Slurm's */
    launch_ok("SLURM_STEP_ID=3 SLURM_NTASKS=2 SLURM_PROCID=1 SLURM_LOCALID=0 WORLD_SIZE=8 "
              "RANK=6 LOCAL_RANK=2 MASTER_ADDR=h MASTER_PORT=100", 6, 8, 2, "h:101");
    /* the batch script is no srun step: its SLURM_NTASKS is the job's */
    launch_env("SLURM_NTASKS=2 SLURM_PROCID=0");
    CHECK(par_launch_from_env(&l, &e) == 0);
    /* one rank needs no world */
    launch_env("WORLD_SIZE=1 RANK=0");
    CHECK(par_launch_from_env(&l, &e) == 0);

    /* half-set and conflicting variables are refused, naming what is missing */
    launch_refused("WORLD_SIZE=2", "RANK is not");
    launch_refused("RANK=1", "WORLD_SIZE is not");
    launch_refused("WORLD_SIZE=2 RANK=1", "MASTER_ADDR is unset");
    launch_refused("WORLD_SIZE=2 RANK=1 MASTER_ADDR=h", "MASTER_PORT is unset");
    launch_refused("WORLD_SIZE=2 RANK=2 MASTER_ADDR=h MASTER_PORT=1", "outside the world");
    launch_refused("MOE_WORLD_SIZE=2", "MOE_RANK is not");
    launch_refused("MOE_WORLD_SIZE=2 MOE_RANK=1", "MOE_MASTER_ADDR is unset");
    launch_refused("NCCL_COMM_ID=127.0.0.1:1 MOE_WORLD_SIZE=2 MOE_RANK=2", "outside the world");
    launch_refused("NCCL_COMM_ID=127.0.0.1:1 MOE_WORLD_SIZE=2 MOE_RANK=0 MOE_LOCAL_RANK=x",
                   "MOE_LOCAL_RANK='x'");
    launch_refused("NCCL_COMM_ID=nohostport MOE_WORLD_SIZE=2 MOE_RANK=0", "not host:port");
    launch_refused("MOE_WORLD_SIZE=2 MOE_RANK=1 WORLD_SIZE=4 RANK=1", "disagree on the world");
    launch_refused("MOE_WORLD_SIZE=2 MOE_RANK=1 WORLD_SIZE=2 RANK=0", "disagree on this");
    launch_refused("SLURM_STEP_ID=0 SLURM_NTASKS=4 SLURM_PROCID=1 MOE_WORLD_SIZE=2 MOE_RANK=1",
                   "SLURM_NTASKS=4");
    launch_refused("SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_PROCID=1", "MOE_MASTER_ADDR is unset");
    launch_refused("SLURM_STEP_ID=0 SLURM_NTASKS=2", "SLURM_PROCID is not");
    launch_refused("WORLD_SIZE=2 RANK=0 MASTER_ADDR=h MASTER_PORT=http", "not a port number");
    clear_launch_env();
}

/* ---- a model on the CPU backend with a given dispatcher ---- */

static int rig_open(rig *r, int ep_dispatcher, moe_comm *c, int with_moments)
{
    moe_err e = {{0}};
    memset(r, 0, sizeof *r);
    if (cpu_backend_create(&r->be, 1, &e))
        return rig_fail(&e);
    return rig_build(r, &DIMS, ep_dispatcher ? c : NULL, -1, B, T, with_moments, 0, 42, 0.2);
}

static void batch(int32_t *tok, int32_t *tgt, int salt)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = 4 + (i * 7 + salt * 13) % 60;
        tgt[i] = i % 5 == 4 ? -1 : 4 + (i * 11 + salt) % 60;
    }
}

static void test_ep_dispatcher_matches_local(void)
{
    moe_comm *c;
    moe_err e = {{0}};
    CHECK(comm_single_create(&c, &e) == 0);
    rig loc, ep;
    CHECK(rig_open(&loc, 0, c, 1) == 0 && rig_open(&ep, 1, c, 1) == 0);
    if (loc.m && ep.m) {
        int32_t tok[B * T], tgt[B * T];
        batch(tok, tgt, 1);
        double l1, l2;
        int64_t n1, n2;
        CHECK(model_forward_backward(loc.m, tok, tgt, 1.0 / 13, 0.01, &l1, &n1, &e) == 0);
        CHECK(model_forward_backward(ep.m, tok, tgt, 1.0 / 13, 0.01, &l2, &n2, &e) == 0);
        CHECK(l1 == l2 && n1 == n2 && loc.m->aux_loss == ep.m->aux_loss);
        /* same rows in the same order: the same bits */
        CHECK(!memcmp(loc.m->grad, ep.m->grad, sizeof(real) * loc.m->n_elems));
        CHECK(ep.disp->max_rows(ep.disp, B * T, DIMS.K) == B * T * DIMS.K);
    }
    rig_close(&loc);
    rig_close(&ep);
    moe_dispatcher *d;
    moe_comm fake = *c;
    fake.size = 3; /* only its size is read */
    CHECK(dispatcher_ep_create(&d, &fake, 4, &e) == -1);
    CHECK_MSG(strstr(e.msg, "4 experts do not split evenly over an EP group of 3"), "%s", e.msg);
    comm_destroy(c);
}

/* Expert buffers by capacity: with room for a third of the rows, a layer's
 * rows run in several passes, and the gradients are the one-pass bits (with
 * and without activation recompute, over micro-batches that accumulate). */
static void test_ep_capacity_passes(void)
{
    moe_comm *c;
    moe_err e = {{0}};
    CHECK(comm_single_create(&c, &e) == 0);
    for (int recompute = 0; recompute < 2; recompute++) {
        rig loc;
        moe_backend *be = NULL;
        moe_dispatcher *d = NULL;
        moe_model *m = NULL;
        CHECK(rig_open(&loc, 0, c, 1) == 0);
        CHECK(cpu_backend_create(&be, 1, &e) == 0 && dispatcher_ep_create(&d, c, DIMS.E, &e) == 0);
        if (!loc.m || !be || !d)
            goto next;
        dispatcher_ep_set_capacity(d, 0.3);
        int cap = d->max_rows(d, B * T, DIMS.K);
        CHECK_MSG(cap == (int)ceil(0.3 * B * T * DIMS.K), "%d rows", cap);
        CHECK(model_create_parallel(&m, &DIMS, be, d, B, T, 0, 1, 1, recompute, &e) == 0);
        CHECK(model_init_random(m, 42, 0.2, &e) == 0);
        if (!m)
            goto next;
        model_zero_grad(loc.m);
        model_zero_grad(m);
        for (int mb = 0; mb < 2; mb++) {
            int32_t tok[B * T], tgt[B * T];
            batch(tok, tgt, 3 + mb);
            double l1, l2;
            int64_t n1, n2;
            CHECK(model_forward_backward(loc.m, tok, tgt, 1.0 / 13, 0.01, &l1, &n1, &e) == 0);
            CHECK(model_forward_backward(m, tok, tgt, 1.0 / 13, 0.01, &l2, &n2, &e) == 0);
            CHECK(l1 == l2 && n1 == n2 && loc.m->aux_loss == m->aux_loss);
            CHECK_MSG(model_expert_passes(m, 0) >= 3, "%d passes", model_expert_passes(m, 0));
        }
        CHECK(!memcmp(loc.m->grad, m->grad, sizeof(real) * loc.m->n_elems));
    next:
        if (m)
            model_destroy(m);
        if (d)
            d->destroy(d);
        if (be)
            be->destroy(be);
        rig_close(&loc);
    }
    comm_destroy(c);
}

static int failing_sum(void *ctx, double *v, int n, moe_err *e)
{
    return moe_errf(e, "peer gone");
}

static int doubling_sum(void *ctx, double *v, int n, moe_err *e)
{
    for (int i = 0; i < n; i++) /* two ranks with the same tokens */
        v[i] *= 2;
    return 0;
}

static void test_stats_hook(void)
{
    rig r;
    moe_err e = {{0}};
    CHECK(rig_open(&r, 0, NULL, 1) == 0);
    if (r.m) {
        int32_t tok[B * T], tgt[B * T];
        batch(tok, tgt, 2);
        double ls, aux0;
        int64_t nv;
        CHECK(model_forward(r.m, tok, tgt, &ls, &nv, NULL, &e) == 0);
        aux0 = r.m->aux_loss;
        CHECK(r.m->aux_tokens == (double)DIMS.L * B * T);
        r.m->stats_sum = doubling_sum;
        CHECK(model_forward(r.m, tok, tgt, &ls, &nv, NULL, &e) == 0);
        CHECK_NEAR(r.m->aux_loss, aux0, 1e-12);
        CHECK(r.m->aux_tokens == 2.0 * DIMS.L * B * T);
        r.m->stats_sum = failing_sum;
        CHECK(model_forward(r.m, tok, tgt, &ls, &nv, NULL, &e) == -1);
        CHECK_MSG(strstr(e.msg, "router statistics: peer gone"), "%s", e.msg);
    }
    rig_close(&r);
}

static void test_zero_matches_adamw(void)
{
    moe_par p;
    moe_err e = {{0}};
    if (par_open(&p, 1, 0, 30, &e)) {
        CHECK_MSG(0, "par_open: %s", e.msg);
        return;
    }
    CHECK(p.size == 1 && !strcmp(p.world->impl, "single"));
    rig plain, sharded;
    CHECK(rig_open(&plain, 0, NULL, 1) == 0 && rig_open(&sharded, 0, NULL, 0) == 0);
    moe_zero *z = NULL;
    CHECK(sharded.m && sharded.m->m == NULL && sharded.m->v == NULL);
    /* buckets of 100 gradients: many buckets, tensors cut across them */
    moe_zero_opts zo = {.bucket_bytes = 100 * sizeof(real)};
    if (plain.m && sharded.m && zero_create(&z, sharded.m, &p, &zo, &e) == 0) {
        CHECK(zero_n_buckets(z) > 10);
        moe_backend *be = plain.be;
        for (int step = 1; step <= 2; step++) {
            int32_t tok[B * T], tgt[B * T];
            batch(tok, tgt, step);
            double ls;
            int64_t nv;
            model_zero_grad(plain.m);
            model_zero_grad(sharded.m);
            CHECK(model_forward_backward(plain.m, tok, tgt, 0.1, 0, &ls, &nv, &e) == 0);
            CHECK(model_forward_backward(sharded.m, tok, tgt, 0.1, 0, &ls, &nv, &e) == 0);
            moe_adamw_hyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                 .weight_decay = 0.1f, .bias_corr1 = 1 - (step == 1 ? 0.9f : 0.81f),
                                 .bias_corr2 = 1 - (step == 1 ? 0.95f : 0.9025f), .grad_scale = 1};
            double clip = 0.5, norm = sqrt(be->sum_squares(be, plain.m->grad, plain.m->n_elems));
            moe_adamw_hyper hp = h;
            if (norm > clip)
                hp.grad_scale = (real)(clip / (norm + 1e-6));
            model_adamw(plain.m, &hp);
            double zn;
            CHECK(zero_step(z, h, clip, &zn, &e) == 0);
            CHECK_NEAR(zn, norm, 1e-6 * norm);
        }
        size_t n = plain.m->n_elems, worst = 0;
        for (size_t i = 0; i < n; i++)
            if (((real *)plain.m->master)[i] != ((real *)sharded.m->wc)[i]) /* cpu: the master */
                worst++;
        CHECK_MSG(worst == 0, "%zu of %zu masters differ", worst, n);
        /* moments out and back in */
        real *mh = malloc(sizeof(real) * n), *vh = malloc(sizeof(real) * n);
        CHECK(zero_get_moments(z, mh, vh, &e) == 0);
        CHECK(!memcmp(mh, plain.m->m, sizeof(real) * n) && !memcmp(vh, plain.m->v, sizeof(real) * n));
        for (size_t i = 0; i < n; i++)
            mh[i] = (real)i;
        real *back = calloc(n, sizeof(real));
        CHECK(zero_set_moments(z, mh, vh, &e) == 0 && zero_get_moments(z, back, vh, &e) == 0);
        CHECK(back[n - 1] == (real)(n - 1) && back[1] == 1);
        free(back);
        CHECK(zero_moment_bytes(z) == 2 * sizeof(real) * n);
        CHECK(zero_unsharded_moment_bytes(z) == zero_moment_bytes(z));
        free(mh);
        free(vh);
    } else {
        CHECK_MSG(0, "zero_create: %s", e.msg);
    }
    zero_destroy(z);
    rig_close(&plain);
    rig_close(&sharded);
    par_close(&p);
}

static void test_layout_io(void)
{
    moe_par p;
    moe_err e = {{0}};
    CHECK(par_open(&p, 1, 0, 30, &e) == 0);
    rig r;
    CHECK(rig_open(&r, 0, NULL, 1) == 0);
    moe_model full;
    if (r.m && layout_full_make(&full, r.m, &e) == 0) {
        CHECK(full.n_elems == r.m->n_elems && full.n_params == r.m->n_params);
        size_t n = full.n_elems;
        real *a = malloc(sizeof(real) * n), *b = malloc(sizeof(real) * n);
        for (size_t i = 0; i < n; i++)
            a[i] = (real)i;
        CHECK(layout_gather_full(&p, r.m, &full, a, b, &e) == 0 && !memcmp(a, b, sizeof(real) * n));
        memset(a, 0, sizeof(real) * n);
        layout_slice_local(r.m, &full, b, a);
        CHECK(a[n - 1] == (real)(n - 1) && a[0] == 0 && a[1] == 1);
        free(a);
        free(b);
        layout_full_free(&full);
    }
    /* an expert-parallel layout: rank 1 of 2 holds experts 2 and 3 */
    moe_backend *be;
    moe_dispatcher *d;
    moe_model *half;
    CHECK(cpu_backend_create(&be, 1, &e) == 0 && dispatcher_local_create(&d, &e) == 0);
    CHECK(model_create_parallel(&half, &DIMS, be, d, B, T, 1, 2, 0, 0, &e) == 0);
    if (half && r.m && layout_full_make(&full, half, &e) == 0) {
        CHECK(full.n_elems == r.m->n_elems && half->n_elems < full.n_elems);
        CHECK(half->e0 == 2 && half->E_local == 2);
        real *f = malloc(sizeof(real) * full.n_elems), *h = malloc(sizeof(real) * half->n_elems);
        CHECK(model_get_masters(r.m, f, &e) == 0);
        layout_slice_local(half, &full, f, h);
        CHECK(model_init_random(half, 42, 0.2, &e) == 0); /* same seed: the same experts 2, 3 */
        real *got = malloc(sizeof(real) * half->n_elems);
        CHECK(model_get_masters(half, got, &e) == 0);
        CHECK(!memcmp(h, got, sizeof(real) * half->n_elems));
        free(got);
        free(f);
        free(h);
        layout_full_free(&full);
    }
    CHECK(model_create_parallel(&half, &DIMS, be, d, B, T, 0, 3, 0, 0, &e) == -1);
    CHECK_MSG(strstr(e.msg, "rank 0 of 3 cannot hold an equal share of 4 experts"), "%s", e.msg);
    model_destroy(half);
    d->destroy(d);
    be->destroy(be);
    rig_close(&r);
    par_close(&p);
}

/* ---- the watchdog over a two-rank stand-in whose barrier never returns in time ---- */


static void test_watchdog(void)
{
    moe_comm *base;
    moe_err e = {{0}};
    CHECK(watchdog_start(0, NULL, &e) == -1 && strstr(e.msg, "parallel.timeout_s = 0"));
    CHECK(comm_single_create(&base, &e) == 0);
    moe_comm_ops ops;
    moe_comm two;
    int ranks[2];
    slow_world_make(&two, &ops, ranks, base, "ep");
    CHECK(watchdog_start(0.3, &two, &e) == 0);
    CHECK(comm_barrier(&two, &e) == -1);
    CHECK(slow_world_aborted == 1);
    CHECK_MSG(strstr(e.msg, "rank 0: barrier on the ep group"), "%s", e.msg);
    watchdog_stop();
    /* a collective that finishes in time is left alone */
    slow_world_aborted = -1;
    ops.barrier = base->ops->barrier;
    CHECK(watchdog_start(0.3, &two, &e) == 0);
    CHECK(comm_barrier(&two, &e) == 0);
    usleep(500 * 1000);
    CHECK(slow_world_aborted == -1);
    /* an allowance (rank 0 writing a checkpoint) covers one slow collective only */
    ops.barrier = slow_world_barrier;
    watchdog_allow(INFINITY);
    CHECK(comm_barrier(&two, &e) == 0 && slow_world_aborted == -1);
    CHECK(comm_barrier(&two, &e) == -1 && slow_world_aborted == 1);
    watchdog_stop();
    comm_destroy(base);
}

static void test_timeout_key(void)
{
    moe_config cfg;
    moe_err e = {{0}};
    char *ok[] = {"parallel.timeout_s=12.5"}, *zero[] = {"parallel.timeout_s=0"},
         *word[] = {"parallel.timeout_s=soon"};
    CHECK(config_load(&cfg, "L0_sanity", NULL, 0, NULL, &e) == 0 && cfg.parallel.timeout_s == 300);
    CHECK(config_load(&cfg, "L0_sanity", NULL, 1, ok, &e) == 0 && cfg.parallel.timeout_s == 12.5);
    CHECK(config_load(&cfg, "L0_sanity", NULL, 1, zero, &e) == -1);
    CHECK_MSG(strstr(e.msg, "parallel.timeout_s"), "%s", e.msg);
    CHECK(config_load(&cfg, "L0_sanity", NULL, 1, word, &e) == -1);
    CHECK_MSG(strstr(e.msg, "parallel.timeout_s"), "%s", e.msg);
}

int main(void)
{
    RUN(test_layout);
    RUN(test_timeout_key);
    RUN(test_single_comm);
    RUN(test_agree);
    RUN(test_launch_detection);
    RUN(test_env_launch);
    RUN(test_ep_dispatcher_matches_local);
    RUN(test_ep_capacity_passes);
    RUN(test_stats_hook);
    RUN(test_zero_matches_adamw);
    RUN(test_layout_io);
    RUN(test_watchdog);
    return check_summary("test_parallel");
}

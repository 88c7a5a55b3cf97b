/* The NCCL paths one GPU can run (world size 1): every collective on
 * device and on host buffers, sub-groups by ncclCommSplit, the
 * expert-parallel dispatcher over NCCL with the CUDA backend against the
 * local dispatcher, and sharded AdamW over NCCL groups against the plain
 * AdamW op. Runs on a GPU machine: build/tests/gpu/test_parallel_nccl. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "../../trainer/model/model.h"
#include "../../trainer/comm/comm_nccl.h"
#include "../../trainer/dispatch/dispatch_ep.h"
#include "../../trainer/parallel/zero.h"
#include "../check.h"
#include "../model_rig.h"

static const moe_dims DIMS = {.C = 64, .L = 2, .NH = 4, .NKV = 2, .HD = 16, .E = 4, .K = 2,
                              .I = 96, .V = 256, .eps = 1e-5, .theta = 10000, .aux_coef = 0.01};
enum { B = 2, T = 32 };

static moe_comm *world;

static void test_collectives(void)
{
    moe_err e = {{0}};
    float h[4] = {1, 2, 3, 4}, g[4] = {0};
    float *d;
    CHECK(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
    CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
    /* device buffers */
    CHECK(comm_allreduce_sum(world, d, 4, MOE_DT_REAL, &e) == 0);
    size_t n4[1] = {16}, z[1] = {0}, c4[1] = {4};
    CHECK(comm_alltoallv(world, d, n4, z, d, n4, z, &e) == 0);
    CHECK(comm_broadcast(world, d, sizeof h, 0, &e) == 0);
    CHECK(cudaMemcpy(g, d, sizeof g, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(g[0] == 1 && g[3] == 4);
    /* host buffers, staged */
    double v[2] = {0.5, 2};
    CHECK(comm_allreduce_sum(world, v, 2, MOE_DT_DOUBLE, &e) == 0 && v[0] == 0.5 && v[1] == 2);
    int64_t a = 9, b = 0;
    CHECK(comm_allgather(world, &a, &b, 1, MOE_DT_INT64, &e) == 0 && b == 9);
    memset(g, 0, sizeof g);
    CHECK(comm_allgatherv(world, h, 4, g, c4, z, MOE_DT_REAL, &e) == 0 && g[2] == 3);
    memset(g, 0, sizeof g);
    CHECK(comm_reduce_scatter_sum(world, h, g, c4, MOE_DT_REAL, &e) == 0 && g[3] == 4);
    char s[6] = "hello", r[6] = "";
    size_t n6[1] = {6};
    CHECK(comm_alltoallv(world, s, n6, z, r, n6, z, &e) == 0 && !strcmp(r, "hello"));
    CHECK(comm_barrier(world, &e) == 0);
    moe_comm *sub = NULL;
    CHECK_MSG(comm_split(world, 0, 0, "ep", &sub, &e) == 0, "comm_split: %s", e.msg);
    if (sub) {
        CHECK(sub->size == 1 && sub->device_memory && !strcmp(sub->impl, "nccl"));
        comm_destroy(sub);
    }
    CHECK(comm_broadcast(world, d, 4, 1, &e) == -1 && strstr(e.msg, "root 1 is not a rank"));
    cudaFree(d);
}

static void test_bootstrap_errors(void)
{
    moe_comm *c;
    moe_err e = {{0}};
    unsetenv("NCCL_COMM_ID");
    CHECK(comm_nccl_create(&c, 0, 2, NULL, &e) == -1);
    CHECK_MSG(strstr(e.msg, "need NCCL_COMM_ID=host:port"), "%s", e.msg);
    CHECK(comm_nccl_create(&c, 0, 2, world, &e) == -1);
    CHECK_MSG(strstr(e.msg, "bootstrap over a group of 1 ranks"), "%s", e.msg);
}

/* capacity: the EP dispatcher's expert_capacity_factor (0: every row in one
 * pass); overlap: its exchange overlapped; recompute: MOE_RECOMPUTE_* */
static int rig_open_cap(rig *r, moe_comm *ep, int with_moments, double capacity, int overlap,
                        int recompute)
{
    moe_err e = {{0}};
    memset(r, 0, sizeof *r);
    if (cuda_backend_create(&r->be, 0, &e))
        return rig_fail(&e);
    return rig_build_overlapped(r, &DIMS, ep, capacity, overlap, B, T, with_moments, recompute, 7,
                                0.05);
}

static int rig_open(rig *r, moe_comm *ep, int with_moments)
{
    moe_err e = {{0}};
    memset(r, 0, sizeof *r);
    if (cuda_backend_create(&r->be, 0, &e))
        return rig_fail(&e);
    return rig_build(r, &DIMS, ep, -1, B, T, with_moments, 0, 7, with_moments ? 0.05 : 0);
}

static void batch(int32_t *tok, int32_t *tgt, int salt)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = 4 + (i * 7 + salt * 13) % 60;
        tgt[i] = 4 + (i * 11 + salt) % 60;
    }
}

/* capacity 0: one pass; 0.3: the rows in passes of 30% of them (the CUDA
 * experts over each pass, gradients accumulated over the passes); overlap:
 * two passes or more, each pass's exchange on NCCL's stream beside the
 * other pass's experts (with activation recompute: the second pass's rows
 * in flight through the first's backward) */
static void ep_dispatcher_over_nccl(double capacity, int overlap, int recompute)
{
    rig loc, ep;
    moe_err e = {{0}};
    CHECK(rig_open(&loc, NULL, 1) == 0 &&
          rig_open_cap(&ep, world, 1, capacity, overlap, recompute) == 0);
    if (loc.m && ep.m) {
        int32_t tok[B * T], tgt[B * T];
        batch(tok, tgt, 1);
        double l1, l2;
        int64_t n1, n2;
        CHECK(model_forward_backward(loc.m, tok, tgt, 1.0 / (B * T), 0.01, &l1, &n1, &e) == 0);
        CHECK(model_forward_backward(ep.m, tok, tgt, 1.0 / (B * T), 0.01, &l2, &n2, &e) == 0);
        CHECK_NEAR(l1, l2, 1e-6 * fabs(l1));
        size_t n = loc.m->n_elems;
        real *g1 = malloc(sizeof(real) * n), *g2 = malloc(sizeof(real) * n);
        CHECK(model_get_host(loc.m, loc.m->grad, g1, &e) == 0);
        CHECK(model_get_host(ep.m, ep.m->grad, g2, &e) == 0);
        double worst = 0;
        for (size_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)g1[i] - g2[i]));
        CHECK_MSG(worst <= 1e-6, "gradients differ by %g", worst);
        if (capacity > 0 || overlap)
            CHECK_MSG(model_expert_passes(ep.m, 0) >= (capacity > 0 ? 3 : 2), "%d passes",
                      model_expert_passes(ep.m, 0));
        free(g1);
        free(g2);
    }
    rig_close(&loc);
    rig_close(&ep);
}

static void test_ep_dispatcher_over_nccl(void)
{
    ep_dispatcher_over_nccl(0, 0, 0);
    ep_dispatcher_over_nccl(0.3, 0, 0);
    ep_dispatcher_over_nccl(0, 1, 0);
    ep_dispatcher_over_nccl(0, 1, MOE_RECOMPUTE_LAYERS);
    ep_dispatcher_over_nccl(0.3, 1, MOE_RECOMPUTE_LAYERS);
}

static void test_zero_over_nccl(void)
{
    moe_err e = {{0}};
    moe_par p;
    memset(&p, 0, sizeof p);
    CHECK(par_layout(&p, 0, 1, 1, 1, &e) == 0);
    p.world = world;
    CHECK(comm_split(world, 0, 0, "ep", &p.ep, &e) == 0 && comm_split(world, 0, 0, "dp", &p.dp, &e) == 0);
    rig plain, sharded;
    CHECK(rig_open(&plain, NULL, 1) == 0 && rig_open(&sharded, NULL, 0) == 0);
    moe_zero *z = NULL;
    /* the sharded model's masters live in the optimizer: initialised through it */
    if (plain.m && sharded.m && p.dp &&
        zero_create(&z, sharded.m, &p, &(moe_zero_opts){.bucket_bytes = 4096}, &e) == 0 &&
        model_init_random(sharded.m, 7, 0.05, &e) == 0) {
        moe_backend *be = plain.be;
        int32_t tok[B * T], tgt[B * T];
        batch(tok, tgt, 2);
        double ls;
        int64_t nv;
        CHECK(model_forward_backward(plain.m, tok, tgt, 0.1, 0, &ls, &nv, &e) == 0);
        CHECK(model_forward_backward(sharded.m, tok, tgt, 0.1, 0, &ls, &nv, &e) == 0);
        moe_adamw_hyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f, .bias_corr1 = 0.1f, .bias_corr2 = 0.05f,
                             .grad_scale = 1};
        double norm = sqrt(be->sum_squares(be, plain.m->grad, plain.m->n_elems)), zn;
        model_adamw(plain.m, &h);
        CHECK(zero_step(z, h, 0, &zn, &e) == 0);
        CHECK_NEAR(zn, norm, 1e-5 * norm);
        size_t n = plain.m->n_elems;
        real *a = malloc(sizeof(real) * n), *b = malloc(sizeof(real) * n);
        CHECK(model_get_masters(plain.m, a, &e) == 0);
        CHECK(model_get_masters(sharded.m, b, &e) == 0);
        double worst = 0;
        for (size_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)a[i] - b[i]));
        CHECK_MSG(worst <= 1e-7, "masters differ by %g", worst);
        free(a);
        free(b);
    } else if (!z) {
        CHECK_MSG(0, "zero_create: %s", e.msg);
    }
    zero_destroy(z);
    rig_close(&plain);
    rig_close(&sharded);
    comm_destroy(p.ep);
    comm_destroy(p.dp);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The EP exchange path at L1's size through NCCL (world 1: a self send),
 * bound to a CUDA backend: one pass of 16,384 rows of 8 KiB (4096 bf16)
 * written by a producer that the backend's stream runs only after a 50 ms
 * spin. The collective must wait for it (the received bytes are the
 * producer's, byte for byte, not the poison under them), and the host must
 * not: the call returns long before the spin ends. Then the queued form,
 * with a consumer queued behind comm_wait. */
static void test_exchange_at_l1_rows(void)
{
    moe_err e = {{0}};
    moe_backend *be = NULL;
    moe_comm *c = NULL;
    const size_t rows = 16384, row_bytes = 8192, n = rows * row_bytes;
    if (cuda_backend_create(&be, 0, &e) || comm_nccl_create(&c, 0, 1, NULL, &e) ||
        comm_bind(c, be, &e)) {
        CHECK_MSG(0, "set-up: %s", e.msg);
        goto out;
    }
    unsigned char *pattern = be->alloc(be, n, &e), *send = be->alloc(be, n, &e),
                  *recv = be->alloc(be, n, &e), *host = malloc(n), *want = malloc(n);
    CHECK(pattern && send && recv && host && want);
    if (!pattern || !send || !recv || !host || !want)
        goto out;
    uint64_t x = (uint64_t)time(NULL) | 1; /* fresh bytes every run */
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        want[i] = (unsigned char)(x >> 24);
    }
    memset(host, 0xAB, n);
    CHECK(be->upload(be, pattern, want, n, &e) == 0 && be->upload(be, send, host, n, &e) == 0 &&
          be->upload(be, recv, host, n, &e) == 0 && be->sync(be, &e) == 0);
    size_t cnt[1] = {n}, off[1] = {0};
    double t0 = now_s();
    CHECK(be->spin(be, NULL, 50000, &e) == 0);                 /* a slow producer ... */
    CHECK(be->copy(be, send, pattern, n, &e) == 0);            /* ... of the send rows */
    CHECK(comm_alltoallv(c, send, cnt, off, recv, cnt, off, &e) == 0);
    double queued = now_s() - t0;
    CHECK(be->download(be, host, recv, n, &e) == 0);
    double landed = now_s() - t0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += host[i] != want[i];
    printf("  %zu rows of %zu bytes through NCCL after a 50 ms producer: queued in %.2f ms, "
           "landed after %.1f ms, %zu bytes differ\n",
           rows, row_bytes, queued * 1e3, landed * 1e3, bad);
    CHECK_MSG(bad == 0, "%zu of %zu received bytes are not the producer's", bad, n);
    CHECK_MSG(queued < 0.025, "the host waited %.1f ms for a queued exchange", queued * 1e3);
    CHECK_MSG(landed >= 0.045, "the bytes landed after %.1f ms, before the producer ran",
              landed * 1e3);
    /* queued form: a consumer behind comm_wait reads the new rows */
    moe_comm_req req;
    memset(host, 0xCD, n);
    CHECK(be->upload(be, recv, host, n, &e) == 0);
    CHECK(be->spin(be, NULL, 20000, &e) == 0);
    CHECK(comm_alltoallv_start(c, send, cnt, off, recv, cnt, off, &req, &e) == 0);
    CHECK(comm_wait(&req, &e) == 0);
    CHECK(be->copy(be, send, recv, n, &e) == 0); /* the consumer: recv back into send */
    CHECK(be->download(be, host, send, n, &e) == 0);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += host[i] != want[i];
    CHECK_MSG(bad == 0, "queued form: %zu bytes differ", bad);
    /* bandwidth of the self exchange, timed on the backend's stream */
    for (int r = 0; r < 3; r++)
        comm_alltoallv(c, send, cnt, off, recv, cnt, off, &e);
    CHECK(be->sync(be, &e) == 0);
    double t1 = now_s();
    for (int r = 0; r < 10; r++)
        comm_alltoallv(c, send, cnt, off, recv, cnt, off, &e);
    CHECK(be->sync(be, &e) == 0);
    double per = (now_s() - t1) / 10;
    printf("  self exchange of %.0f MiB: %.3f ms (%.0f GB/s read + written)\n", n / 1048576.0,
           per * 1e3, 2.0 * n / per / 1e9);
    be->free(be, pattern), be->free(be, send), be->free(be, recv);
    free(host), free(want);
out:
    comm_destroy(c);
    if (be)
        be->destroy(be);
}

/* The abort path of a communicator: aborted (as the watchdog does to every
 * one of a rank), it refuses further collectives with the reason, and its
 * asynchronous error poll stays quiet; destroying it after is safe. */
static void test_abort_path(void)
{
    moe_err e = {{0}};
    moe_comm *c = NULL;
    CHECK(comm_nccl_create(&c, 0, 1, NULL, &e) == 0);
    if (!c)
        return;
    CHECK(c->ops->abort_comm && c->ops->async_error);
    c->ops->abort_comm(c);
    c->ops->abort_comm(c); /* twice: the watchdog's abort, then the world's */
    int64_t v = 1;
    CHECK(comm_allreduce_sum(c, &v, 1, MOE_DT_INT64, &e) == -1);
    CHECK_MSG(strstr(e.msg, "aborted") != NULL, "after an abort: %s", e.msg);
    CHECK(c->ops->async_error(c, &e) == 0);
    comm_destroy(c);
}

int main(void)
{
    moe_err e = {{0}};
    if (!cuda_backend_available() || comm_nccl_create(&world, 0, 1, NULL, &e)) {
        fprintf(stderr, "no GPU or no NCCL: %s\n", e.msg);
        CHECK(0);
        return check_summary("test_parallel_nccl");
    }
    int version = 0;
    if (ncclGetVersion(&version) == ncclSuccess)
        printf("NCCL %d.%d.%d\n", version / 10000, version / 100 % 100, version % 100);
    RUN(test_collectives);
    RUN(test_bootstrap_errors);
    RUN(test_ep_dispatcher_over_nccl);
    RUN(test_zero_over_nccl);
    RUN(test_exchange_at_l1_rows);
    RUN(test_abort_path);
    comm_destroy(world);
    return check_summary("test_parallel_nccl");
}

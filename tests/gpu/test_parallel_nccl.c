/* The NCCL paths one GPU can run (world size 1): every collective on
 * device and on host buffers, sub-groups by ncclCommSplit, the
 * expert-parallel dispatcher over NCCL with the CUDA backend against the
 * local dispatcher, and sharded AdamW over NCCL groups against the plain
 * AdamW op. Runs on a GPU machine: build/tests/gpu/test_parallel_nccl. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../../trainer/model/model.h"
#include "../../trainer/parallel/comm_nccl.h"
#include "../../trainer/parallel/dispatch_ep.h"
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
    moe_comm *sub;
    CHECK(comm_split(world, 0, 0, "ep", &sub, &e) == 0);
    CHECK(sub->size == 1 && sub->device_memory && !strcmp(sub->impl, "nccl"));
    comm_destroy(sub);
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

/* capacity: the EP dispatcher's expert_capacity_factor (0: every row in one pass) */
static int rig_open_cap(rig *r, moe_comm *ep, int with_moments, double capacity)
{
    moe_err e = {{0}};
    memset(r, 0, sizeof *r);
    if (cuda_backend_create(&r->be, 0, &e))
        return rig_fail(&e);
    return rig_build(r, &DIMS, ep, capacity, B, T, with_moments, 0, 7, 0.05);
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
 * experts over each pass, gradients accumulated over the passes) */
static void ep_dispatcher_over_nccl(double capacity)
{
    rig loc, ep;
    moe_err e = {{0}};
    CHECK(rig_open(&loc, NULL, 1) == 0 && rig_open_cap(&ep, world, 1, capacity) == 0);
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
        if (capacity > 0)
            CHECK_MSG(model_expert_passes(ep.m, 0) >= 3, "%d passes",
                      model_expert_passes(ep.m, 0));
        free(g1);
        free(g2);
    }
    rig_close(&loc);
    rig_close(&ep);
}

static void test_ep_dispatcher_over_nccl(void)
{
    ep_dispatcher_over_nccl(0);
    ep_dispatcher_over_nccl(0.3);
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

int main(void)
{
    moe_err e = {{0}};
    if (!cuda_backend_available() || comm_nccl_create(&world, 0, 1, NULL, &e)) {
        fprintf(stderr, "no GPU or no NCCL: %s\n", e.msg);
        CHECK(0);
        return check_summary("test_parallel_nccl");
    }
    RUN(test_collectives);
    RUN(test_bootstrap_errors);
    RUN(test_ep_dispatcher_over_nccl);
    RUN(test_zero_over_nccl);
    comm_destroy(world);
    return check_summary("test_parallel_nccl");
}

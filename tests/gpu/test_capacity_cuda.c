/* Expert buffers by capacity on the CUDA backend (one GPU, no NCCL): the
 * expert-parallel dispatcher over a one-rank world with room for 30% of the
 * rows runs each layer in passes (the CUDA experts' forward and backward
 * per pass, the expert gradients accumulated over the passes) and gives the
 * gradients of the local dispatcher's one pass, with and without recompute,
 * over two micro-batches. Run on a GPU machine:
 * build/tests/gpu/test_capacity_cuda. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/model/model.h"
#include "../../trainer/dispatch/dispatch_ep.h"
#include "../check.h"
#include "../model_rig.h"

static const moe_dims DIMS = {.C = 64, .L = 2, .NH = 4, .NKV = 2, .HD = 16, .E = 4, .K = 2,
                              .I = 96, .V = 256, .eps = 1e-5, .theta = 10000, .aux_coef = 0.01};
enum { B = 2, T = 32 };

static int rig_open(rig *r, moe_comm *ep, double capacity, int recompute)
{
    moe_err e = {{0}};
    memset(r, 0, sizeof *r);
    if (cuda_backend_create(&r->be, 0, &e))
        return rig_fail(&e);
    return rig_build(r, &DIMS, ep, capacity, B, T, 1, recompute, 7, 0.05);
}

static void passes_match_one_pass(int recompute)
{
    moe_comm *world;
    moe_err e = {{0}};
    CHECK(comm_single_create(&world, &e) == 0);
    rig loc, ep;
    CHECK(rig_open(&loc, NULL, 0, recompute) == 0 && rig_open(&ep, world, 0.3, recompute) == 0);
    if (loc.m && ep.m) {
        model_zero_grad(loc.m);
        model_zero_grad(ep.m);
        for (int mb = 0; mb < 2; mb++) {
            int32_t tok[B * T], tgt[B * T];
            for (int i = 0; i < B * T; i++) {
                tok[i] = 4 + (i * 7 + mb * 13) % 60;
                tgt[i] = 4 + (i * 11 + mb) % 60;
            }
            double l1, l2;
            int64_t n1, n2;
            CHECK(model_forward_backward(loc.m, tok, tgt, 1.0 / (2 * B * T), 0.01, &l1, &n1, &e) == 0);
            CHECK(model_forward_backward(ep.m, tok, tgt, 1.0 / (2 * B * T), 0.01, &l2, &n2, &e) == 0);
            CHECK_NEAR(l1, l2, 1e-6 * fabs(l1));
            CHECK_MSG(model_expert_passes(ep.m, 0) >= 3, "%d passes", model_expert_passes(ep.m, 0));
        }
        size_t n = loc.m->n_elems;
        real *g1 = malloc(sizeof(real) * n), *g2 = malloc(sizeof(real) * n);
        CHECK(model_get_host(loc.m, loc.m->grad, g1, &e) == 0);
        CHECK(model_get_host(ep.m, ep.m->grad, g2, &e) == 0);
        double worst = 0, scale = 0;
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)g1[i] - g2[i]));
            scale = fmax(scale, fabs((double)g1[i]));
        }
        CHECK_MSG(worst <= 1e-5 * scale, "recompute %d: gradients differ by %g (largest %g)",
                  recompute, worst, scale);
        free(g1);
        free(g2);
    }
    rig_close(&loc);
    rig_close(&ep);
    comm_destroy(world);
}

static void test_passes_recompute_off(void) { passes_match_one_pass(0); }
static void test_passes_recompute_on(void) { passes_match_one_pass(1); }

int main(void)
{
    RUN(test_passes_recompute_off);
    RUN(test_passes_recompute_on);
    return check_summary("test_capacity_cuda");
}

/* Lazy expert gradients (model_set_lazy_expert_grads): an expert no token
 * reached keeps no gradient, only a mark, and the step is the same bits as
 * with every gradient stored: over two accumulated micro-batches where one
 * expert is reached only by the second (its gradient must start from zeros
 * then) and one by neither (counted as zeros by the sum of squares and by
 * AdamW, written as zeros when the gradients are read).
 *
 * Routing is steered by the tokens: a micro-batch of one repeated token has
 * the same input at every position to layer 0's experts (attention over
 * identical values returns that value), so all of its tokens go to the same
 * top-k experts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/dispatch/dispatch.h"
#include "../../trainer/model/model.h"
#include "../check.h"
#include "../model_rig.h"

static const moe_dims DIMS = {.C = 32, .L = 2, .NH = 4, .NKV = 2, .HD = 8, .E = 4, .K = 1,
                              .I = 40, .V = 48, .eps = 1e-5, .theta = 10000, .aux_coef = 0.02};
enum { B = 1, T = 12 };

static int rig_open(rig *r)
{
    moe_err e = {{0}};
    memset(r, 0, sizeof *r);
    if (cpu_backend_create(&r->be, 0, &e))
        return rig_fail(&e);
    return rig_build(r, &DIMS, NULL, -1, B, T, 1, 0, 11, 0.3);
}

/* the layer-0 expert every position of a micro-batch of token `tok` goes to, or -1 */
static int expert_of(rig *r, int tok)
{
    int32_t in[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++)
        in[i] = tok, tgt[i] = (tok + 1) % DIMS.V;
    double ls;
    int64_t nv;
    moe_err e = {{0}};
    if (model_forward(r->m, in, tgt, &ls, &nv, NULL, &e))
        return -1;
    for (int x = 0; x < DIMS.E; x++)
        if (model_route_counts(r->m, 0)[x] == B * T)
            return x;
    return -1;
}

static void step(rig *r, const int tok[2], double clip_norm, double *norm)
{
    moe_err e = {{0}};
    model_zero_grad(r->m);
    for (int mb = 0; mb < 2; mb++) {
        int32_t in[B * T], tgt[B * T];
        for (int i = 0; i < B * T; i++)
            in[i] = tok[mb], tgt[i] = (tok[mb] + i) % DIMS.V;
        double ls;
        int64_t nv;
        CHECK(model_forward_backward(r->m, in, tgt, 1.0 / (2 * B * T), 0.01, &ls, &nv, &e) == 0);
    }
    *norm = sqrt(model_grad_sum_squares(r->m));
    moe_adamw_hyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .bias_corr1 = 0.1f, .bias_corr2 = 0.05f,
                         .grad_scale = (real)(1.0 / clip_norm)};
    model_adamw(r->m, &h);
}

static void test_same_step(void)
{
    rig eager, lazy;
    CHECK(rig_open(&eager) == 0 && rig_open(&lazy) == 0);
    if (!eager.m || !lazy.m)
        goto out;
    /* two tokens whose micro-batches reach different layer-0 experts */
    int tok[2] = {-1, -1}, ex[2] = {-1, -1};
    for (int a = 0; a < DIMS.V && tok[1] < 0; a++) {
        int xa = expert_of(&eager, a);
        for (int b = a + 1; b < DIMS.V && xa >= 0 && tok[1] < 0; b++) {
            int xb = expert_of(&eager, b);
            if (xb >= 0 && xb != xa)
                tok[0] = a, tok[1] = b, ex[0] = xa, ex[1] = xb;
        }
    }
    CHECK_MSG(tok[1] >= 0, "no two tokens route layer 0 to different experts");
    if (tok[1] < 0)
        goto out;
    fprintf(stderr, "  micro-batches of token %d -> expert %d, of token %d -> expert %d\n", tok[0],
            ex[0], tok[1], ex[1]);
    model_set_lazy_expert_grads(lazy.m, 1);
    for (int s = 0; s < 2; s++) {
        double ne, nl;
        step(&eager, tok, 1, &ne);
        /* the norm sums ranges in another order: equal to rounding */
        step(&lazy, tok, 1, &nl);
        CHECK_MSG(fabs(ne - nl) <= 1e-12 * ne, "step %d: gradient norm %.17g vs %.17g", s, ne, nl);
        /* layer 0 in the first step (the routing found above): two experts
         * reached in all, so two hold no gradient */
        int invalid = 0;
        for (int x = 0; x < DIMS.E; x++)
            invalid += !lazy.m->expert_dw_valid[x];
        if (s == 0)
            CHECK_MSG(invalid == DIMS.E - 2 && lazy.m->expert_dw_valid[ex[0]] &&
                          lazy.m->expert_dw_valid[ex[1]],
                      "%d layer-0 experts marked empty", invalid);
    }
    size_t n = eager.m->n_elems, dm = 0, dg = 0;
    real *a = malloc(sizeof(real) * n), *b = malloc(sizeof(real) * n);
    moe_err e = {{0}};
    CHECK(model_get_masters(eager.m, a, &e) == 0 && model_get_masters(lazy.m, b, &e) == 0);
    for (size_t i = 0; i < n; i++)
        dm += a[i] != b[i];
    CHECK(model_get_host(eager.m, eager.m->grad, a, &e) == 0 &&
          model_get_host(lazy.m, lazy.m->grad, b, &e) == 0);
    for (size_t i = 0; i < n; i++)
        dg += a[i] != b[i];
    CHECK_MSG(dm == 0, "%zu of %zu master weights differ after two steps", dm, n);
    CHECK_MSG(dg == 0, "%zu of %zu gradients differ once materialised", dg, n);
    free(a);
    free(b);
out:
    rig_close(&eager);
    rig_close(&lazy);
}

int main(void)
{
    RUN(test_same_step);
    return check_summary("lazy_grads");
}

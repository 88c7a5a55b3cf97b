/* train.activation_recompute and train.recompute_experts: the same loss, aux
 * loss and gradients, bit for bit, as keeping every layer's activations (the
 * backward recomputes a layer, or its experts' SwiGLU inputs, from kept
 * inputs with the same ops on the same values), over two accumulated
 * micro-batches, and a memory plan that shrinks by about a layer's
 * activations (or its h1, h3) per layer but one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/dispatch/dispatch.h"
#include "../../trainer/model/model.h"
#include "../check.h"
#include "../model_rig.h"

static const moe_dims DIMS = {.C = 32, .L = 4, .NH = 4, .NKV = 2, .HD = 8, .E = 4, .K = 2,
                              .I = 48, .V = 40, .eps = 1e-5, .theta = 10000, .aux_coef = 0.02};
enum { B = 2, T = 24 };

/* the backend's allocations, counted */
static size_t allocated;
static void *(*cpu_alloc)(moe_backend *, size_t, moe_err *);
static void *counting_alloc(moe_backend *be, size_t bytes, moe_err *e)
{
    allocated += bytes;
    return cpu_alloc(be, bytes, e);
}

/* *bytes: what the memory plan allocated */
static int rig_open(rig *r, int recompute, size_t *bytes)
{
    moe_err e = {{0}};
    memset(r, 0, sizeof *r);
    if (cpu_backend_create(&r->be, 0, &e) || dispatcher_local_create(&r->disp, &e)) {
        fprintf(stderr, "  rig: %s\n", e.msg);
        return -1;
    }
    cpu_alloc = r->be->alloc;
    r->be->alloc = counting_alloc;
    allocated = 0;
    int rc = model_create_parallel(&r->m, &DIMS, r->be, r->disp, B, T, 0, 1, 1, recompute, &e);
    *bytes = allocated;
    if (rc || model_init_random(r->m, 7, 0.2, &e)) {
        fprintf(stderr, "  rig: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* `mode` against keeping everything; `saved_per_layer`: the least the plan must shrink by per
 * layer after the first */
static void same_gradients(int mode, size_t saved_per_layer)
{
    rig keep, rec;
    size_t keep_bytes = 0, rec_bytes = 0;
    CHECK(rig_open(&keep, MOE_RECOMPUTE_NONE, &keep_bytes) == 0 &&
          rig_open(&rec, mode, &rec_bytes) == 0);
    if (!keep.m || !rec.m)
        goto out;
    moe_err e = {{0}};
    int32_t tok[B * T], tgt[B * T];
    for (int mb = 0; mb < 2; mb++) {
        for (int i = 0; i < B * T; i++) {
            tok[i] = (i * 7 + mb * 11) % DIMS.V;
            tgt[i] = i % 9 == 4 ? -1 : (i * 5 + mb * 3 + 1) % DIMS.V;
        }
        double l1, l2;
        int64_t n1, n2;
        CHECK(model_forward_backward(keep.m, tok, tgt, 1.0 / 80, 0.01, &l1, &n1, &e) == 0);
        CHECK(model_forward_backward(rec.m, tok, tgt, 1.0 / 80, 0.01, &l2, &n2, &e) == 0);
        CHECK_MSG(l1 == l2 && n1 == n2, "loss %.9g vs %.9g", l1, l2);
        CHECK_MSG(keep.m->aux_loss == rec.m->aux_loss, "aux %.9g vs %.9g", keep.m->aux_loss,
                  rec.m->aux_loss);
    }
    size_t n = keep.m->n_elems, differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += keep.m->grad[i] != rec.m->grad[i];
    CHECK_MSG(differ == 0, "%zu of %zu gradients differ", differ, n);
    fprintf(stderr, "  memory plan: %zu bytes kept, %zu with recompute mode %d\n", keep_bytes,
            rec_bytes, mode);
    CHECK(keep_bytes > rec_bytes && keep_bytes - rec_bytes >= (DIMS.L - 1) * saved_per_layer);
out:
    rig_close(&keep);
    rig_close(&rec);
}

static void test_same_gradients(void)
{
    size_t N = B * T, rows = N * DIMS.K, C = DIMS.C, I = DIMS.I;
    /* a layer's activations: 4 layers keep 1 set instead of 4 */
    same_gradients(MOE_RECOMPUTE_LAYERS, sizeof(real) * (N * C * 4 + rows * (C + 2 * I)));
    /* h1 and h3: 4 layers share 1 pair */
    same_gradients(MOE_RECOMPUTE_EXPERTS, sizeof(real) * rows * 2 * I);
}

int main(void)
{
    RUN(test_same_gradients);
    return check_summary("recompute");
}

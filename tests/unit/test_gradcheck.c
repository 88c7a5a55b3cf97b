/* Every parameter's gradient of the whole model (LM loss + aux loss) against
 * central finite differences, in double precision, on tiny models: GQA,
 * top-k < experts, ignored targets, experts that receive no tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/model/model.h"
#include "../../trainer/numerics/rng.h"
#include "../check.h"

typedef struct {
    const char *label;
    moe_dims d;
    int B, T;
    double std;
} gc_case;

static double total_loss(moe_model *m, const int32_t *tok, const int32_t *tgt, double aux_coef)
{
    double ls;
    int64_t nv;
    moe_err e;
    if (model_forward(m, tok, tgt, &ls, &nv, NULL, &e)) {
        fprintf(stderr, "forward: %s\n", e.msg);
        return NAN;
    }
    return ls / (double)nv + aux_coef * m->aux_loss;
}

static void run_case(const gc_case *c)
{
    moe_err e;
    moe_backend *be;
    moe_dispatcher *disp;
    moe_model *m;
    CHECK(cpu_backend_create(&be, 0, &e) == 0);
    CHECK(dispatcher_local_create(&disp, &e) == 0);
    if (model_create(&m, &c->d, be, disp, c->B, c->T, &e)) {
        fprintf(stderr, "model_create: %s\n", e.msg);
        CHECK(0);
        return;
    }
    CHECK(model_init_random(m, 1234, c->std, &e) == 0);
    /* norms away from 1 so their gradients are not special */
    real *theta = malloc(sizeof(real) * m->n_elems);
    real *grad = malloc(sizeof(real) * m->n_elems);
    model_get_masters(m, theta, &e);
    moe_rng r;
    rng_seed(&r, 99);
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].ndim == 1)
            for (size_t j = 0; j < m->params[i].n; j++)
                theta[m->params[i].offset + j] = (real)(1 + 0.3 * rng_normal(&r));
    model_set_masters(m, theta, &e);

    int N = c->B * c->T;
    int32_t *tok = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N);
    int64_t valid = 0;
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)(rng_next(&r) % c->d.V);
        tgt[i] = (i % 7 == 3) ? -1 : (int32_t)(rng_next(&r) % c->d.V);
        valid += tgt[i] >= 0;
    }
    double ls;
    int64_t nv;
    model_zero_grad(m);
    CHECK(model_forward_backward(m, tok, tgt, 1.0 / valid, c->d.aux_coef, &ls, &nv, &e) == 0);
    CHECK(nv == valid);
    model_get_host(m, m->grad, grad, &e);

    const double h = 1e-6;
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < m->n_elems; i++) {
        real keep = theta[i];
        theta[i] = keep + h;
        model_set_masters(m, theta, &e);
        double lp = total_loss(m, tok, tgt, c->d.aux_coef);
        theta[i] = keep - h;
        model_set_masters(m, theta, &e);
        double lm = total_loss(m, tok, tgt, c->d.aux_coef);
        theta[i] = keep;
        double num = (lp - lm) / (2 * h), ana = grad[i];
        double err = fabs(num - ana) / (1e-6 + fabs(num) + fabs(ana));
        if (err > worst)
            worst = err;
        if (fabs(num - ana) > 1e-7 + 1e-5 * fabs(num)) {
            if (bad++ < 10)
                fprintf(stderr, "  %s: element %zu: numeric %.10g analytic %.10g\n", c->label, i,
                        num, ana);
        }
    }
    fprintf(stderr, "  %s: %zu parameters, worst relative error %.3g, %d mismatches\n", c->label,
            m->n_elems, worst, bad);
    CHECK(bad == 0);
    free(theta);
    free(grad);
    free(tok);
    free(tgt);
    model_destroy(m);
    disp->destroy(disp);
    be->destroy(be);
}

static void test_gqa_top2_of_4(void)
{
    gc_case c = {"gqa top2/4", {.C = 8, .L = 2, .NH = 4, .NKV = 2, .HD = 4, .E = 4, .K = 2, .I = 6,
                                .V = 11, .eps = 1e-5, .theta = 10000, .aux_coef = 0.05},
                 2, 5, 0.4};
    run_case(&c);
}

static void test_top1_of_8_sparse_experts(void)
{
    /* 6 tokens over 8 experts, top-1: some experts get no token at all */
    gc_case c = {"top1/8", {.C = 6, .L = 1, .NH = 2, .NKV = 1, .HD = 6, .E = 8, .K = 1, .I = 5,
                            .V = 9, .eps = 1e-6, .theta = 1e6, .aux_coef = 0.1},
                 1, 6, 0.5};
    run_case(&c);
}

static void test_no_aux_mha(void)
{
    gc_case c = {"mha top3/4 no aux", {.C = 8, .L = 2, .NH = 2, .NKV = 2, .HD = 4, .E = 4, .K = 3,
                                       .I = 4, .V = 7, .eps = 1e-5, .theta = 500, .aux_coef = 0},
                 2, 4, 0.4};
    run_case(&c);
}

int main(void)
{
    RUN(test_gqa_top2_of_4);
    RUN(test_top1_of_8_sparse_experts);
    RUN(test_no_aux_mha);
    return check_summary("gradcheck");
}

/* moekit against Hugging Face transformers: for each committed fixture
 * (tests/fixtures/hf, written by tests/hf/make_fixtures.py), load the
 * Hub-named checkpoint, run the same tokens, and compare logits, LM loss,
 * aux loss and every parameter's gradient with what transformers computed
 * in float64. fp32 tolerances: 1e-5 relative on losses, 1e-4 on logits and
 * gradients (relative to the tensor's norm, and per element). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/backend/select.h"
#include "../../trainer/ckpt/hf_dir.h"
#include "../../trainer/cmd/eval.h"
#include "../../trainer/config/hf_config.h"
#include "../../trainer/model/dims_config.h"
#include "../../trainer/model/params.h"
#include "../../trainer/train/trainer.h"
#include "../../trainer/train/weights_io.h"
#include "../check.h"

#ifndef MOE_SOURCE_DIR
#define MOE_SOURCE_DIR "."
#endif

static double rel_err(const float *a, const float *ref, size_t n, double *max_elem)
{
    double num = 0, den = 0, worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        /* per element, against the tensor's scale: tiny entries of a
         * gradient carry cancellation noise that says nothing */
        worst = fmax(worst, fabs(d) / (scale + 1e-30));
    }
    *max_elem = worst;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void check_fixture(const char *name)
{
    char dir[4096], path[4300];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf/%s", MOE_SOURCE_DIR, name);
    moe_err e = {{0}};
    moe_model_cfg mc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hf_config_read(path, &mc, &e)) {
        fprintf(stderr, "  %s\n", e.msg);
        CHECK(0);
        return;
    }
    int32_t *tok;
    int rows, L;
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    CHECK(eval_read_tokens(path, mc.vocab_size, &tok, &rows, &L, &e) == 0);
    /* like transformers: every token goes through the model (the router sees
     * the last one too, which counts in the aux loss); the last has no target */
    int T = L, N = rows * T;
    int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < T; t++) {
            in[r * T + t] = tok[r * L + t];
            tg[r * T + t] = t + 1 < L ? tok[r * L + t + 1] : -1;
        }
    moe_dims d = model_dims_from_config(&mc);
    moe_backend *be;
    moe_dispatcher *disp;
    moe_model *m;
    hf_dir *hd;
    CHECK(cpu_backend_create(&be, 0, &e) == 0);
    CHECK(dispatcher_local_create(&disp, &e) == 0);
    CHECK(model_create(&m, &d, be, disp, rows, T, &e) == 0);
    CHECK(hf_dir_open(dir, &hd, &e) == 0);
    real *host = malloc(sizeof(real) * m->n_elems);
    CHECK(weights_read(m, weights_source_hf(hd, dir), "", 1, host, &e) == 0);
    hf_dir_close(hd);
    model_set_masters(m, host, &e);

    st_file *ref;
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    CHECK(st_open(path, &ref, &e) == 0);
    float lm_ref, aux_ref;
    int64_t one = 1;
    CHECK(st_read_f32(ref, "lm_loss", 1, &one, &lm_ref, &e) == 0);
    CHECK(st_read_f32(ref, "aux_loss", 1, &one, &aux_ref, &e) == 0);

    /* forward: logits and both losses */
    float *logits = malloc(sizeof(float) * (size_t)N * d.V);
    float *logits_ref = malloc(sizeof(float) * (size_t)N * d.V);
    int64_t lshape[3] = {rows, T, d.V};
    CHECK(st_read_f32(ref, "logits", 3, lshape, logits_ref, &e) == 0);
    double ls;
    int64_t nv;
    CHECK(model_forward(m, in, tg, &ls, &nv, logits, &e) == 0);
    double lm = ls / nv, aux = m->aux_loss, worst;
    double lerr = rel_err(logits, logits_ref, (size_t)N * d.V, &worst);
    fprintf(stderr, "  %s: lm_loss %.7f (HF %.7f, rel %.2e), aux %.7f (HF %.7f, rel %.2e), "
                    "logits rel %.2e (worst element %.2e)\n",
            name, lm, lm_ref, fabs(lm - lm_ref) / lm_ref, aux, aux_ref,
            fabs(aux - aux_ref) / aux_ref, lerr, worst);
    CHECK(fabs(lm - lm_ref) <= 1e-5 * fabs(lm_ref));
    CHECK(fabs(aux - aux_ref) <= 1e-5 * fabs(aux_ref));
    CHECK(lerr <= 1e-4 && worst <= 1e-4);

    /* backward of lm_loss + coef * aux, every parameter */
    model_zero_grad(m);
    CHECK(model_forward_backward(m, in, tg, 1.0 / nv, d.aux_coef, &ls, &nv, &e) == 0);
    real *grad = malloc(sizeof(real) * m->n_elems);
    real *gref = malloc(sizeof(real) * m->n_elems);
    model_get_host(m, m->grad, grad, &e);
    CHECK(weights_read(m, weights_source_st(ref, path), "grad.", 0, gref, &e) == 0);
    double gworst = 0, gworst_elem = 0;
    char wname[160] = "";
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        int nx = p->n_experts > 0 ? p->n_experts : 1;
        size_t per = params_matrix_elems(p);
        for (int x = 0; x < nx; x++) {
            size_t off = p->offset + (size_t)x * per;
            double we, re = rel_err(grad + off, gref + off, per, &we);
            if (re > gworst) {
                gworst = re;
                model_param_name(m, p, x, wname, sizeof wname);
            }
            gworst_elem = fmax(gworst_elem, we);
        }
    }
    fprintf(stderr, "  %s: gradients: worst tensor rel %.2e (%s), worst element %.2e\n", name,
            gworst, wname, gworst_elem);
    CHECK(gworst <= 1e-4 && gworst_elem <= 1e-4);
    st_close(ref);
    free(grad);
    free(gref);
    free(logits);
    free(logits_ref);
    free(host);
    free(in);
    free(tg);
    free(tok);
    model_destroy(m);
    disp->destroy(disp);
    be->destroy(be);
}

static void test_gqa_top2(void) { check_fixture("gqa_top2"); }
static void test_genomic_top2of8(void) { check_fixture("genomic_top2of8"); }

int main(void)
{
    RUN(test_gqa_top2);
    RUN(test_genomic_top2of8);
    return check_summary("hf_agreement");
}

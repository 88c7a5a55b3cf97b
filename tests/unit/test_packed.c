/* Packed windows in the CPU reference: a row holding several records (and
 * the start of one that goes on in the next window) gives every token the
 * logits it gets when its record runs alone, and the gradients of the
 * packed batch are the sum of the records' gradients (fp32, within 1e-5):
 * attention stays within each record, RoPE positions restart at each, no
 * target crosses a boundary. The same as Hugging Face run record by record
 * (tests/hf/check_packed.py compares with transformers' position_ids). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/data/data.h"
#include "../check.h"
#include "../model_rig.h"
#include "../test_rng.h"

static const moe_dims DIMS = {.C = 32, .L = 2, .NH = 4, .NKV = 2, .HD = 8, .E = 4, .K = 2,
                              .I = 40, .V = 256, .eps = 1e-5, .theta = 10000, .aux_coef = 0};
enum { B = 2, T = 40, V = 256 };

/* A record: BOS, n random bases, EOS. */
static int record(int32_t *out, int n)
{
    out[0] = MOE_TOK_BOS;
    for (int i = 1; i <= n; i++)
        out[i] = "ACGT"[test_rng_u64() % 4];
    out[n + 1] = MOE_TOK_EOS;
    return n + 2;
}

/* One record (or the head of one) run alone: inputs in[0..n), targets in[1..n]. */
typedef struct {
    int row, at, n;    /* where its inputs sit in the packed batch */
    int32_t tok[64];   /* n + 1 tokens */
} piece;

static double max_diff(const real *a, const real *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* the largest difference relative to the largest magnitude (gradients
 * summed over the batch at once or record by record add in other orders) */
static double max_rel_diff(const real *a, const real *b, size_t n)
{
    double big = 0;
    for (size_t i = 0; i < n; i++)
        big = fmax(big, fabs((double)b[i]));
    return max_diff(a, b, n) / (big > 0 ? big : 1);
}

static void test_packed_equals_alone(void)
{
    int32_t w[B][T + 1];
    piece pieces[8];
    int np = 0;
    /* row 0: records of 6, 11 and 8 bases, then the first 10 tokens of one of
     * 30 bases (its window's last target included); row 1: a record, then PAD */
    int lens0[] = {6, 11, 8}, at = 0;
    for (int k = 0; k < 3; k++) {
        piece *p = &pieces[np++];
        int n = record(p->tok, lens0[k]);
        memcpy(&w[0][at], p->tok, sizeof(int32_t) * n);
        p->row = 0, p->at = at, p->n = n - 1; /* its EOS predicts nothing */
        at += n;
    }
    int32_t longrec[40];
    record(longrec, 30);
    memcpy(&w[0][at], longrec, sizeof(int32_t) * (T + 1 - at));
    piece *c = &pieces[np++];
    c->row = 0, c->at = at, c->n = T - at;
    memcpy(c->tok, longrec, sizeof(int32_t) * (c->n + 1));
    piece *r1 = &pieces[np++];
    int n1 = record(r1->tok, 18);
    for (int t = 0; t <= T; t++)
        w[1][t] = t < n1 ? r1->tok[t] : MOE_TOK_PAD;
    r1->row = 1, r1->at = 0, r1->n = n1 - 1;

    /* the batch as the data layer gives it: targets -1 across boundaries */
    int32_t in[B * T], tg[B * T], pos[B * T], cu[B * T + 1];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = w[b][t];
            int nx = w[b][t + 1];
            tg[b * T + t] = nx == MOE_TOK_PAD || tok_sequence_starts(w[b][t], nx) ? -1 : nx;
        }
    int max_len, n_seg = tok_segments(in, B, T, pos, cu, &max_len);
    CHECK(n_seg == 6 && cu[0] == 0 && cu[1] == 8 && cu[2] == 21 && cu[3] == 31 && cu[4] == 40 &&
          cu[5] == 40 + n1 && cu[6] == 2 * T);
    CHECK(pos[8] == 0 && pos[20] == 12 && pos[31] == 0 && pos[39] == 8 && max_len == 20);

    rig r = {0};
    moe_err e = {{0}};
    if (cpu_backend_create(&r.be, 1, &e) || rig_build(&r, &DIMS, NULL, -1, B, T, 0, 0, 7, 0.3)) {
        CHECK_MSG(0, "%s", e.msg);
        rig_close(&r);
        return;
    }
    size_t P = r.m->n_elems;
    real *host = malloc(sizeof(real) * P), *g_packed = malloc(sizeof(real) * P),
         *g_sum = calloc(P, sizeof(real)), *g_one = malloc(sizeof(real) * P);
    real *lp = malloc(sizeof(real) * B * T * V), *lo = malloc(sizeof(real) * 64 * V);
    CHECK(model_get_masters(r.m, host, &e) == 0);
    double ls_packed, ls_sum = 0, ls;
    int64_t nv_packed, nv_sum = 0, nv;
    CHECK(model_set_segments(r.m, pos, cu, n_seg, max_len, &e) == 0);
    CHECK(model_forward(r.m, in, tg, &ls, &nv, lp, &e) == 0);
    model_zero_grad(r.m);
    CHECK(model_forward_backward(r.m, in, tg, 1.0, 0.0, &ls_packed, &nv_packed, &e) == 0);
    CHECK(r.be->download(r.be, g_packed, r.m->grad, sizeof(real) * P, &e) == 0);

    double worst_logit = 0;
    for (int k = 0; k < np; k++) {
        piece *p = &pieces[k];
        moe_model *m1 = NULL;
        int32_t pin[64], ptg[64];
        for (int t = 0; t < p->n; t++)
            pin[t] = p->tok[t], ptg[t] = p->tok[t + 1];
        if (model_create(&m1, &DIMS, r.be, r.disp, 1, p->n, &e) ||
            model_set_masters(m1, host, &e) || model_forward(m1, pin, ptg, &ls, &nv, lo, &e)) {
            CHECK_MSG(0, "%s", e.msg);
            break;
        }
        for (int t = 0; t < p->n; t++)
            worst_logit = fmax(worst_logit, max_diff(lo + (size_t)t * V,
                                                     lp + ((size_t)p->row * T + p->at + t) * V, V));
        model_zero_grad(m1);
        CHECK(model_forward_backward(m1, pin, ptg, 1.0, 0.0, &ls, &nv, &e) == 0);
        CHECK(r.be->download(r.be, g_one, m1->grad, sizeof(real) * P, &e) == 0);
        for (size_t i = 0; i < P; i++)
            g_sum[i] += g_one[i];
        ls_sum += ls;
        nv_sum += nv;
        model_destroy(m1);
    }
    double worst_grad = max_rel_diff(g_packed, g_sum, P);
    fprintf(stderr, "  packed vs alone: logits %.2e (max abs), loss %.2e, gradients %.2e (max abs "
            "/ largest)\n", worst_logit, fabs(ls_packed - ls_sum), worst_grad);
    CHECK(nv_packed == nv_sum && nv_sum == 7 + 12 + 9 + 9 + 19);
    CHECK(worst_logit <= 1e-5 && fabs(ls_packed - ls_sum) <= 1e-5 * fabs(ls_sum) &&
          worst_grad <= 1e-5);

    /* the same row without its boundaries reads across records: far off */
    CHECK(model_set_segments(r.m, NULL, NULL, 0, 0, &e) == 0);
    CHECK(model_forward(r.m, in, tg, &ls, &nv, lp, &e) == 0);
    CHECK_MSG(fabs(ls - ls_packed) > 1e-3, "one sequence per row gave %g, packed %g", ls,
              ls_packed);
    free(host), free(g_packed), free(g_sum), free(g_one), free(lp), free(lo);
    rig_close(&r);
}

int main(void)
{
    RUN(test_packed_equals_alone);
    return check_summary("packed");
}

/* CPU reference: gradient norm and AdamW. */
#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"

/* Fixed blocks, summed in order: the same bits for any thread count. */
#define SUMSQ_BLOCK 65536

static double sum_squares(moe_backend *be, const real *x, size_t n)
{
    size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double *partial = malloc(sizeof(double) * (nb ? nb : 1));
    if (!partial)
        abort();
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * SUMSQ_BLOCK, hi = lo + SUMSQ_BLOCK < n ? lo + SUMSQ_BLOCK : n;
        double s = 0;
        for (size_t i = lo; i < hi; i++)
            s += (double)x[i] * x[i];
        partial[b] = s;
    }
    double total = 0;
    for (size_t b = 0; b < nb; b++)
        total += partial[b];
    free(partial);
    return total;
}

/* elements [lo, hi) of one span; zero: their gradient counts as 0 (not read) */
static void adamw_piece(real *master, real *wc, const real *grad, real *m, real *v, size_t lo,
                        size_t hi, real wd, int zero, const moe_adamw_hyper *h)
{
#pragma omp parallel for schedule(static)
    for (size_t i = lo; i < hi; i++) {
        real g = zero ? 0 : grad[i] * h->grad_scale;
        m[i] = h->beta1 * m[i] + (1 - h->beta1) * g;
        v[i] = h->beta2 * v[i] + (1 - h->beta2) * g * g;
        real mhat = m[i] / h->bias_corr1, vhat = v[i] / h->bias_corr2;
        /* decoupled decay, as torch.optim.AdamW: p -= lr * wd * p first */
        real p = master[i] * (1 - h->lr * wd);
        p -= h->lr * mhat / ((real)sqrt((double)vhat) + h->eps);
        master[i] = p;
        wc[i] = p;
    }
}

static void adamw(moe_backend *be, real *master, act *wc_, const real *grad, real *m, real *v,
                  const moe_param_span *spans, int n_spans, const moe_adamw_hyper *h)
{
    real *wc = wc_;
    int z = 0; /* the first zero range that may still overlap */
    for (int s = 0; s < n_spans; s++) {
        size_t lo = spans[s].offset, hi = lo + spans[s].n;
        real wd = spans[s].decay ? h->weight_decay : 0;
        /* the span in pieces: read gradients between the zero ranges */
        while (lo < hi) {
            while (z < h->n_zero_grads && h->zero_grads[z].offset + h->zero_grads[z].n <= lo)
                z++;
            size_t zb = z < h->n_zero_grads ? h->zero_grads[z].offset : hi;
            if (zb > lo) {
                size_t end = zb < hi ? zb : hi;
                adamw_piece(master, wc, grad, m, v, lo, end, wd, 0, h);
                lo = end;
            } else {
                size_t ze = h->zero_grads[z].offset + h->zero_grads[z].n, end = ze < hi ? ze : hi;
                adamw_piece(master, wc, grad, m, v, lo, end, wd, 1, h);
                lo = end;
            }
        }
        z = 0; /* spans need not be sorted */
    }
}

void cpu_fill_optim_ops(moe_backend *be)
{
    be->sum_squares = sum_squares;
    be->adamw = adamw;
}

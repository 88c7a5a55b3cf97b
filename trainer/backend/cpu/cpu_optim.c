/* CPU reference: gradient norm and AdamW. */
#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "../../numerics/half.h"

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

/* moment i as fp32, and stored back (bf16: rounded to nearest even) */
static inline real mom_get(const void *m, int bf16, size_t i)
{
    return bf16 ? (real)bf16_to_f32(((const uint16_t *)m)[i]) : ((const real *)m)[i];
}

static inline void mom_put(void *m, int bf16, size_t i, real x)
{
    if (bf16)
        ((uint16_t *)m)[i] = f32_to_bf16((float)x);
    else
        ((real *)m)[i] = x;
}

/* One AdamW element: the moments at state index s, the new master returned. */
static inline real adamw_elem(real p, real g, void *m, void *v, size_t s, real wd,
                              const moe_adamw_hyper *h)
{
    int b = h->moments_bf16;
    g *= h->grad_scale;
    real mk = h->beta1 * mom_get(m, b, s) + (1 - h->beta1) * g;
    real vk = h->beta2 * mom_get(v, b, s) + (1 - h->beta2) * g * g;
    mom_put(m, b, s, mk);
    mom_put(v, b, s, vk);
    /* what the next step reads: the stored (maybe rounded) moments */
    real mhat = mom_get(m, b, s) / h->bias_corr1, vhat = mom_get(v, b, s) / h->bias_corr2;
    /* decoupled decay, as torch.optim.AdamW: p -= lr * wd * p first */
    p *= 1 - h->lr * wd;
    return p - h->lr * mhat / ((real)sqrt((double)vhat) + h->eps);
}

/* elements [lo, hi) of one span; zero: their gradient counts as 0 (not read) */
static void adamw_piece(real *master, real *wc, const real *grad, void *m, void *v, size_t lo,
                        size_t hi, real wd, int zero, const moe_adamw_hyper *h)
{
#pragma omp parallel for schedule(static)
    for (size_t i = lo; i < hi; i++) {
        real p = adamw_elem(master[i], zero ? 0 : grad[i], m, v, i, wd, h);
        master[i] = p;
        wc[i] = p;
    }
}

static void adamw(moe_backend *be, real *master, act *wc_, const real *grad, void *m, void *v,
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

/* The shard's update: the compute copy is the fp32 master itself (lo unused). */
static void adamw_shard(moe_backend *be, const real *grad, act *wc_, uint16_t *lo, void *m,
                        void *v, const moe_shard_piece *pieces, int n_pieces,
                        const moe_adamw_hyper *h)
{
    real *wc = wc_;
    (void)lo;
    for (int k = 0; k < n_pieces; k++) {
        const moe_shard_piece *q = &pieces[k];
        real wd = q->decay ? h->weight_decay : 0;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < q->n; i++)
            wc[q->flat + i] = adamw_elem(wc[q->flat + i], grad[q->flat + i], m, v, q->state + i,
                                         wd, h);
    }
}

static void accumulate(moe_backend *be, real *dst, const real *src, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void cpu_fill_optim_ops(moe_backend *be)
{
    be->sum_squares = sum_squares;
    be->adamw = adamw;
    be->adamw_shard = adamw_shard;
    be->accumulate = accumulate;
}

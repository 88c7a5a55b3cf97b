/* CPU matrix products for the reference backend. The loops keep both operands
 * contiguous in the inner dimension and split work by output rows, so each
 * output element is summed by one thread in a fixed order. */
#include "cpu_internal.h"

static inline real dot(const real *a, const real *b, int n)
{
    /* four partial sums: vectorises without reassociation flags, and the
     * order is fixed, so results do not depend on the thread count */
    real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void cpu_gemm_xwT(real *y, const real *x, const real *w, int rows, int in, int out)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const real *xr = x + (size_t)r * in;
        real *yr = y + (size_t)r * out;
        for (int o = 0; o < out; o++)
            yr[o] = dot(xr, w + (size_t)o * in, in);
    }
}

void cpu_gemm_dyw(real *dx, const real *dy, const real *w, int rows, int in, int out,
                  int accumulate)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        real *dxr = dx + (size_t)r * in;
        const real *dyr = dy + (size_t)r * out;
        if (!accumulate)
            for (int i = 0; i < in; i++)
                dxr[i] = 0;
        for (int o = 0; o < out; o++) {
            real g = dyr[o];
            const real *wo = w + (size_t)o * in;
            for (int i = 0; i < in; i++)
                dxr[i] += g * wo[i];
        }
    }
}

void cpu_gemm_dyTx(real *dw, const real *dy, const real *x, int rows, int in, int out)
{
#pragma omp parallel for schedule(static)
    for (int o = 0; o < out; o++) {
        real *dwo = dw + (size_t)o * in;
        for (int r = 0; r < rows; r++) {
            real g = dy[(size_t)r * out + o];
            const real *xr = x + (size_t)r * in;
            for (int i = 0; i < in; i++)
                dwo[i] += g * xr[i];
        }
    }
}

/* moekit CUDA backend: the bf16 GEMMs (row-major views of column-major calls)
 * through cuBLASLt, with the algorithm chosen once per shape family.
 *
 * Why: the expert GEMMs' row counts change every step, and cublasGemmEx runs
 * its heuristic for every new shape on the host; right after the routing's
 * count synchronisation the GPU waits for it. Here a family is the GEMM's
 * form, its fixed sizes, output type, beta = 0 or not, operand alignment and
 * the row count rounded up to a quarter octave; its algorithm is cuBLASLt's
 * first choice for the family's largest row count, asked once, then reused
 * for every row count in it.
 * A problem cuBLASLt refuses with that algorithm, or a family it has none
 * for, goes through cublasGemmEx. runtime.gemm=cublas sends all of them
 * there (to compare; cuda_set_run_opts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define GEMM_WORKSPACE_BYTES CUDA_GEMM_WORKSPACE_BYTES

enum { FORM_XWT = 0, FORM_DYW = 1, FORM_DYTX = 2 };

struct cuda_gemm_plan {
    int used, ok;
    int form, out_f32, accumulate, in, out, bucket, align;
    cublasLtMatmulAlgo_t algo;
};

int cuda_gemm_init(moe_backend *be, moe_err *e)
{
    cuda_ctx *c = CTX(be);
    cublasStatus_t st = cublasLtCreate(&c->lt);
    if (st != CUBLAS_STATUS_SUCCESS)
        return moe_errf(e, "cublasLtCreate: %s", cublasGetStatusString(st));
    c->gemm_plans = (cuda_gemm_plan *)calloc(CUDA_GEMM_PLANS, sizeof *c->gemm_plans);
    cudaError_t err = cudaMalloc(&c->gemm_ws, GEMM_WORKSPACE_BYTES);
    if (!c->gemm_plans || err != cudaSuccess) {
        cuda_gemm_destroy(be);
        return moe_errf(e, "cuda: cannot allocate the GEMM workspace (%s)",
                        err != cudaSuccess ? cudaGetErrorString(err) : "out of host memory");
    }
    return 0;
}

void cuda_gemm_destroy(moe_backend *be)
{
    cuda_ctx *c = CTX(be);
    if (c->gemm_ws)
        cudaFree(c->gemm_ws);
    if (c->lt)
        cublasLtDestroy(c->lt);
    free(c->gemm_plans);
    c->gemm_ws = NULL, c->lt = NULL, c->gemm_plans = NULL;
}

/* rows rounded up to a quarter octave (5, 6, 7 or 8 x 2^j, at least 16): the
 * family's largest row count is at most 25% above any of its members', so
 * its algorithm fits them all about as well as one asked for each */
static int row_bucket(int rows)
{
    int p = 16;
    while (p < rows && p < (1 << 30))
        p <<= 1;
    int q = p >= 64 ? p / 8 : p;
    return (rows + q - 1) / q * q;
}

/* the largest power of two (<= 256) that divides every address */
static int common_alignment(const void *a, const void *b, const void *d)
{
    uintptr_t u = (uintptr_t)a | (uintptr_t)b | (uintptr_t)d | 256;
    return (int)(u & (~u + 1));
}

/* A column-major problem: D[m, n] = alpha op(A) op(B) + beta D, every
 * operand bf16 but D (bf16 or fp32). `rows` is the dimension that varies. */
typedef struct {
    int form, out_f32;
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    int rows, in, out;
} gemm_problem;

static void set_dims(const gemm_problem *p, int rows, int *m, int *n, int *k)
{
    *m = p->m, *n = p->n, *k = p->k;
    if (p->form == FORM_DYTX)
        *k = rows;
    else
        *n = rows;
}

static cublasStatus_t describe(const gemm_problem *p, int rows, cublasLtMatmulDescOpaque_t *desc,
                               cublasLtMatrixLayoutOpaque_t *la, cublasLtMatrixLayoutOpaque_t *lb,
                               cublasLtMatrixLayoutOpaque_t *lc)
{
    int m, n, k;
    set_dims(p, rows, &m, &n, &k);
    cublasStatus_t st = cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!st)
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &p->ta, sizeof p->ta);
    if (!st)
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &p->tb, sizeof p->tb);
    if (!st)
        st = cublasLtMatrixLayoutInit(la, CUDA_R_16BF, p->ta == CUBLAS_OP_N ? m : k,
                                      p->ta == CUBLAS_OP_N ? k : m, p->lda);
    if (!st)
        st = cublasLtMatrixLayoutInit(lb, CUDA_R_16BF, p->tb == CUBLAS_OP_N ? k : n,
                                      p->tb == CUBLAS_OP_N ? n : k, p->ldb);
    if (!st)
        st = cublasLtMatrixLayoutInit(lc, p->out_f32 ? CUDA_R_32F : CUDA_R_16BF, m, n, p->ldc);
    return st;
}

/* The family's plan: found, or made now (cuBLASLt's heuristic at the
 * bucket's row count and the operands' alignment). NULL: table full. */
static cuda_gemm_plan *family_plan(moe_backend *be, const gemm_problem *p, float beta, int align)
{
    cuda_ctx *c = CTX(be);
    int bucket = row_bucket(p->rows), acc = beta != 0.f;
    unsigned h = (unsigned)(p->form * 131 + p->out_f32 * 31 + acc * 17) * 2654435761u ^
                 (unsigned)p->in * 40503u ^ (unsigned)p->out * 9973u ^ (unsigned)bucket * 613u ^
                 (unsigned)align;
    for (int probe = 0; probe < CUDA_GEMM_PLANS; probe++) {
        cuda_gemm_plan *q = &c->gemm_plans[(h + probe) % CUDA_GEMM_PLANS];
        if (q->used) {
            if (q->form == p->form && q->out_f32 == p->out_f32 && q->accumulate == acc &&
                q->in == p->in && q->out == p->out && q->bucket == bucket && q->align == align)
                return q;
            continue;
        }
        q->used = 1, q->form = p->form, q->out_f32 = p->out_f32, q->accumulate = acc;
        q->in = p->in, q->out = p->out, q->bucket = bucket, q->align = align, q->ok = 0;
        cublasLtMatmulDescOpaque_t desc;
        cublasLtMatrixLayoutOpaque_t la, lb, lc;
        cublasLtMatmulPreferenceOpaque_t pref;
        cublasLtMatmulHeuristicResult_t res;
        int got = 0;
        uint32_t al = (uint32_t)align;
        size_t ws = GEMM_WORKSPACE_BYTES;
        cublasStatus_t st = describe(p, bucket, &desc, &la, &lb, &lc);
        if (!st)
            st = cublasLtMatmulPreferenceInit(&pref);
        if (!st)
            st = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ws, sizeof ws);
        const cublasLtMatmulPreferenceAttributes_t aligns[] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4 && !st; i++)
            st = cublasLtMatmulPreferenceSetAttribute(&pref, aligns[i], &al, sizeof al);
        if (!st)
            st = cublasLtMatmulAlgoGetHeuristic(c->lt, &desc, &la, &lb, &lc, &lc, &pref, 1, &res, &got);
        if (!st && got > 0) {
            q->algo = res.algo;
            q->ok = 1;
        }
        return q;
    }
    return NULL;
}

static void gemm(moe_backend *be, const char *what, const gemm_problem *p, const void *A,
                 const void *B, void *D, float beta)
{
    cuda_ctx *c = CTX(be);
    float alpha = 1;
    if (c->lt) {
        cuda_gemm_plan *q = family_plan(be, p, beta, common_alignment(A, B, D));
        if (q && q->ok) {
            cublasLtMatmulDescOpaque_t desc;
            cublasLtMatrixLayoutOpaque_t la, lb, lc;
            cublasStatus_t st = describe(p, p->rows, &desc, &la, &lb, &lc);
            if (!st)
                st = cublasLtMatmul(c->lt, &desc, &alpha, A, &la, B, &lb, &beta, D, &lc, D, &lc,
                                    &q->algo, c->gemm_ws, GEMM_WORKSPACE_BYTES, c->stream);
            if (st == CUBLAS_STATUS_SUCCESS)
                return;
            if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) {
                cuda_note(be, what, cublasGetStatusString(st));
                return;
            }
            /* this row count does not suit the family's algorithm: the library picks */
        }
    }
    int m, n, k;
    set_dims(p, p->rows, &m, &n, &k);
    CUBLAS(be, what,
           cublasGemmEx(c->blas, p->ta, p->tb, m, n, k, &alpha, A, CUDA_R_16BF, p->lda, B,
                        CUDA_R_16BF, p->ldb, &beta, D, p->out_f32 ? CUDA_R_32F : CUDA_R_16BF, p->ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void cuda_gemm_xwT(moe_backend *be, void *y, int y_fp32, const bf16 *x, const bf16 *w, int rows,
                   int in, int out, float beta)
{
    if (rows == 0)
        return;
    /* Y^T[out, rows] = W[out, in] X^T: W row-major is W^T column-major */
    gemm_problem p = {FORM_XWT, y_fp32, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, in, in, out,
                      rows, in, out};
    gemm(be, "gemm xW^T", &p, w, x, y, beta);
}

void cuda_gemm_dyw(moe_backend *be, bf16 *dx, const bf16 *dy, const bf16 *w, int rows, int in,
                   int out, float beta)
{
    if (rows == 0)
        return;
    /* DX^T[in, rows] = W^T[in, out] DY^T[out, rows] */
    gemm_problem p = {FORM_DYW, 0, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, in, out, in,
                      rows, in, out};
    gemm(be, "gemm dY W", &p, w, dy, dx, beta);
}

void cuda_gemm_dyTx(moe_backend *be, float *dw, const bf16 *dy, const bf16 *x, int rows, int in,
                    int out, float beta)
{
    if (rows == 0) {
        if (beta == 0.f) /* an empty sum overwrites with zeros */
            CU(be, "gemm dY^T X", cudaMemsetAsync(dw, 0, sizeof(float) * in * out, CTX(be)->stream));
        return;
    }
    /* DW^T[in, out] = beta DW^T + X^T[in, rows] DY[rows, out] */
    gemm_problem p = {FORM_DYTX, 1, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, in, out, in,
                      rows, in, out};
    gemm(be, "gemm dY^T X", &p, x, dy, dw, beta);
}

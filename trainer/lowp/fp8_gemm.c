/* moekit low precision: FP8 block-scaled GEMMs through cuBLASLt (fp8_gemm.h).
 *
 * Each distinct problem (shape, scale modes, output type, beta == 0 or not)
 * gets one plan: matmul descriptor, the three layouts and the algorithm the
 * heuristic picked. Expert GEMMs see a new token count n most steps, so the
 * cache is large and evicts by overwriting; planning costs tens of
 * microseconds, the GEMMs milliseconds. */
#include "fp8_gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#define PLAN_SLOTS 1024 /* power of two */
#define PROBES 8

typedef struct {
    int used;
    int m, n, k, a_kind, b_kind, out_type, accumulate;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} plan;

struct lowp_fp8_gemm {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
    int n_plans;
    plan plans[PLAN_SLOTS];
};

static const char *kind_name(int kind)
{
    return kind == LOWP_BLK_128X128 ? "128x128" : kind == LOWP_MX_1X32 ? "MXFP8 1x32" : "1x128";
}

static cublasLtMatmulMatrixScale_t scale_mode(int kind)
{
    return kind == LOWP_BLK_128X128 ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
           : kind == LOWP_MX_1X32   ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0
                                    : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
}

static int lt_fail(moe_err *e, const char *what, const char *step, cublasStatus_t st)
{
    return moe_errf(e, "fp8 block GEMM: %s: %s: %s (%d)", what, step, cublasLtGetStatusString(st),
                    (int)st);
}

int lowp_fp8_gemm_create(lowp_fp8_gemm **out, size_t workspace_bytes, moe_err *e)
{
    *out = NULL;
    lowp_fp8_gemm *g = calloc(1, sizeof(*g));
    if (!g)
        return moe_errf(e, "fp8 block GEMM: out of host memory");
    cublasStatus_t st = cublasLtCreate(&g->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return lt_fail(e, "creating the handle", "cublasLtCreate", st);
    }
    if (workspace_bytes) {
        cudaError_t ce = cudaMalloc(&g->workspace, workspace_bytes);
        if (ce != cudaSuccess) {
            cublasLtDestroy(g->lt);
            free(g);
            return moe_errf(e, "fp8 block GEMM: cudaMalloc of a %zu-byte workspace: %s",
                            workspace_bytes, cudaGetErrorString(ce));
        }
    }
    g->workspace_bytes = workspace_bytes;
    *out = g;
    return 0;
}

static void plan_free(plan *p)
{
    if (!p->used)
        return;
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof(*p));
}

void lowp_fp8_gemm_destroy(lowp_fp8_gemm *g)
{
    if (!g)
        return;
    for (int i = 0; i < PLAN_SLOTS; i++)
        plan_free(&g->plans[i]);
    cudaFree(g->workspace);
    cublasLtDestroy(g->lt);
    free(g);
}

int lowp_fp8_gemm_plans(const lowp_fp8_gemm *g) { return g->n_plans; }

static int same_problem(const plan *p, int m, int n, int k, int ak, int bk, int ot, int acc)
{
    return p->used && p->m == m && p->n == n && p->k == k && p->a_kind == ak && p->b_kind == bk &&
           p->out_type == ot && p->accumulate == acc;
}

/* Descriptor, layouts and algorithm for one problem; the slot is empty on
 * entry and stays empty on failure. */
static int plan_build(lowp_fp8_gemm *g, plan *p, int m, int n, int k, int ak, int bk, int ot,
                      int acc, const void *a_scales, const void *b_scales, moe_err *e)
{
    char what[160];
    snprintf(what, sizeof what, "m=%d n=%d k=%d, A %s / B %s scales, %s out%s", m, n, k,
             kind_name(ak), kind_name(bk), ot == LOWP_OUT_F32 ? "fp32" : "bf16",
             acc ? " accumulated" : "");
    cudaDataType_t dt = ot == LOWP_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulMatrixScale_t am = scale_mode(ak), bm = scale_mode(bk);
    /* each step named, so a refusal says which call and attribute it was */
    const char *step = "cublasLtMatmulDescCreate";
    cublasStatus_t st;
    memset(p, 0, sizeof(*p));
    st = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st)
        return lt_fail(e, what, step, st);
    p->used = 1;
#define SET(attr, val)                                                                         \
    if (!st) {                                                                                 \
        step = #attr;                                                                          \
        st = cublasLtMatmulDescSetAttribute(p->desc, attr, &(val), sizeof(val));               \
    }
    SET(CUBLASLT_MATMUL_DESC_TRANSA, ta)
    SET(CUBLASLT_MATMUL_DESC_TRANSB, tb)
    SET(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, am)
    SET(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, bm)
    /* the heuristic validates the scale pointers too: give it the real ones */
    SET(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scales)
    SET(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scales)
#undef SET
    if (!st && (step = "cublasLtMatrixLayoutCreate(A)"))
        st = cublasLtMatrixLayoutCreate(&p->la, CUDA_R_8F_E4M3, k, m, k);
    if (!st && (step = "cublasLtMatrixLayoutCreate(B)"))
        st = cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_8F_E4M3, k, n, k);
    if (!st && (step = "cublasLtMatrixLayoutCreate(D)"))
        st = cublasLtMatrixLayoutCreate(&p->lc, dt, m, n, m);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    memset(&heur, 0, sizeof heur);
    if (!st && (step = "cublasLtMatmulPreferenceCreate"))
        st = cublasLtMatmulPreferenceCreate(&pref);
    if (!st && (step = "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES"))
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &g->workspace_bytes, sizeof g->workspace_bytes);
    if (!st && (step = "cublasLtMatmulAlgoGetHeuristic"))
        st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1,
                                            &heur, &found);
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (st || found < 1) {
        plan_free(p);
        if (!st)
            return moe_errf(e, "fp8 block GEMM: %s: cuBLASLt has no algorithm for it on this GPU "
                               "(1x128 / 128x128 scaling needs compute capability 9.x and cuBLAS "
                               "12.9+, MXFP8 compute capability 10.x)",
                            what);
        return lt_fail(e, what, step, st);
    }
    p->algo = heur.algo;
    p->m = m, p->n = n, p->k = k, p->a_kind = ak, p->b_kind = bk, p->out_type = ot;
    p->accumulate = acc;
    g->n_plans++;
    return 0;
}

static plan *plan_get(lowp_fp8_gemm *g, int m, int n, int k, int ak, int bk, int ot, int acc,
                      const void *as, const void *bs, moe_err *e)
{
    unsigned h = (unsigned)m * 2654435761u ^ (unsigned)n * 40503u ^ (unsigned)k * 97u ^
                 (unsigned)(ak | bk << 1 | ot << 2 | acc << 3) * 2246822519u;
    for (int i = 0; i < PROBES; i++) {
        plan *p = &g->plans[(h + i) & (PLAN_SLOTS - 1)];
        if (same_problem(p, m, n, k, ak, bk, ot, acc))
            return p;
        if (!p->used)
            return plan_build(g, p, m, n, k, ak, bk, ot, acc, as, bs, e) ? NULL : p;
    }
    plan *victim = &g->plans[h & (PLAN_SLOTS - 1)];
    plan_free(victim);
    g->n_plans--;
    return plan_build(g, victim, m, n, k, ak, bk, ot, acc, as, bs, e) ? NULL : victim;
}

int lowp_fp8_gemm_run(lowp_fp8_gemm *g, cudaStream_t stream, int m, int n, int k,
                      const lowp_fp8_operand *a, const lowp_fp8_operand *b, void *out,
                      lowp_out_type out_type, float alpha, float beta, moe_err *e)
{
    int align = out_type == LOWP_OUT_F32 ? 4 : 8;
    if ((a->kind == LOWP_MX_1X32) != (b->kind == LOWP_MX_1X32))
        return moe_errf(e, "fp8 block GEMM: m=%d n=%d k=%d: MXFP8 scales on one operand only", m,
                        n, k);
    if (a->kind == LOWP_MX_1X32 && k % 32)
        return moe_errf(e, "fp8 block GEMM: m=%d n=%d k=%d: MXFP8 needs k a multiple of 32", m, n,
                        k);
    if (m < 1 || n < 1 || k < 16 || k % 16 || m % align)
        return moe_errf(e, "fp8 block GEMM: m=%d n=%d k=%d: needs k a multiple of 16 and m a "
                           "multiple of %d",
                        m, n, k, align);
    if (((uintptr_t)a->codes | (uintptr_t)b->codes | (uintptr_t)out) % 16 ||
        ((uintptr_t)a->scales | (uintptr_t)b->scales) % 16)
        return moe_errf(e, "fp8 block GEMM: m=%d n=%d k=%d: codes, scales and output must be "
                           "16-byte aligned",
                        m, n, k);
    plan *p = plan_get(g, m, n, k, a->kind, b->kind, out_type, beta != 0.f, a->scales, b->scales, e);
    if (!p)
        return -1;
    cublasStatus_t st;
    if ((st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                             &a->scales, sizeof a->scales)) ||
        (st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                             &b->scales, sizeof b->scales)))
        return lt_fail(e, "setting the scale pointers", "CUBLASLT_MATMUL_DESC_*_SCALE_POINTER", st);
    st = cublasLtMatmul(g->lt, p->desc, &alpha, a->codes, p->la, b->codes, p->lb, &beta, out,
                        p->lc, out, p->lc, &p->algo, g->workspace, g->workspace_bytes, stream);
    if (st) {
        char what[96];
        snprintf(what, sizeof what, "cublasLtMatmul m=%d n=%d k=%d", m, n, k);
        return lt_fail(e, what, "cublasLtMatmul", st);
    }
    return 0;
}

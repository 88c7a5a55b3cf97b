/* The expert FFN's GEMMs at the benchmark's shapes (hidden 4096, intermediate
 * 14336, ROWS rows an expert), each timed three ways: cublasGemmEx as the
 * backend calls it, cuBLASLt's first heuristic choice, and the fastest of
 * cuBLASLt's top candidates, so algorithm choice can be judged by numbers.
 * Median of 5 after a warm-up, CUDA events, random bf16 inputs.
 *   build/tests/gpu/bench_gemm [ROWS]   (default 2048) */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        int rc_ = (int)(x);                                                                    \
        if (rc_) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, rc_);           \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

typedef struct {
    const char *name;
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    int out_f32;
    float beta;
} problem;

static cublasHandle_t blas;
static cublasLtHandle_t lt;
static void *ws;
static const size_t ws_bytes = 32u << 20;
static void *A, *B, *Cbuf;

static float median5(float *t)
{
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (t[j] < t[i]) {
                float x = t[i];
                t[i] = t[j];
                t[j] = x;
            }
    return t[2];
}

static float time_gemmex(const problem *p)
{
    float alpha = 1, t[5];
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int r = -1; r < 5; r++) {
        CK(cudaEventRecord(a, 0));
        CK(cublasGemmEx(blas, p->ta, p->tb, p->m, p->n, p->k, &alpha, A, CUDA_R_16BF, p->lda, B,
                        CUDA_R_16BF, p->ldb, &p->beta, Cbuf, p->out_f32 ? CUDA_R_32F : CUDA_R_16BF,
                        p->ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        if (r >= 0)
            CK(cudaEventElapsedTime(&t[r], a, b));
    }
    return median5(t);
}

static void time_lt(const problem *p, double flop)
{
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &p->ta, sizeof p->ta));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &p->tb, sizeof p->tb));
    int ar = p->ta == CUBLAS_OP_N ? p->m : p->k, ac = p->ta == CUBLAS_OP_N ? p->k : p->m;
    int br = p->tb == CUBLAS_OP_N ? p->k : p->n, bc = p->tb == CUBLAS_OP_N ? p->n : p->k;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ar, ac, p->lda));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, br, bc, p->ldb));
    CK(cublasLtMatrixLayoutCreate(&lc, p->out_f32 ? CUDA_R_32F : CUDA_R_16BF, p->m, p->n, p->ldc));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t h[16];
    int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 16, h, &got));
    float alpha = 1, best = 1e30f;
    int best_i = -1;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < got; i++) {
        float t[5];
        int bad = 0;
        for (int r = -1; r < 5 && !bad; r++) {
            CK(cudaEventRecord(a, 0));
            bad = cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &p->beta, Cbuf, lc, Cbuf, lc,
                                 &h[i].algo, ws, ws_bytes, 0) != CUBLAS_STATUS_SUCCESS;
            CK(cudaEventRecord(b, 0));
            CK(cudaEventSynchronize(b));
            if (r >= 0)
                CK(cudaEventElapsedTime(&t[r], a, b));
        }
        if (bad)
            continue;
        float ms = median5(t);
        int tile = 0, stages = 0, splitk = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&h[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(&h[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(&h[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof splitk, NULL);
        printf("    lt #%-2d %8.3f ms %7.1f TFLOP/s  tile %d stages %d splitk %d waves %.2f\n", i,
               ms, flop / ms / 1e9, tile, stages, splitk, h[i].wavesCount);
        if (ms < best)
            best = ms, best_i = i;
    }
    printf("    best: lt #%d %.3f ms (%.1f TFLOP/s)\n", best_i, best, flop / best / 1e9);
}

int main(int argc, char **argv)
{
    int R = argc > 1 ? atoi(argv[1]) : 2048, C = 4096, I = 14336;
    CK(cublasCreate(&blas));
    CK(cublasLtCreate(&lt));
    CK(cudaMalloc(&ws, ws_bytes));
    size_t big = (size_t)I * C > (size_t)R * I ? (size_t)I * C : (size_t)R * I;
    CK(cudaMalloc(&A, 2 * big));
    CK(cudaMalloc(&B, 2 * big));
    CK(cudaMalloc(&Cbuf, 4 * big));
    uint16_t *h = malloc(2 * big);
    unsigned s = 12345;
    for (size_t i = 0; i < big; i++) { /* bf16 = the high half of an fp32 */
        s = s * 1664525u + 1013904223u;
        float f = ((s >> 8) & 0xffff) / 65536.0f - 0.5f;
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = (uint16_t)(u >> 16);
    }
    CK(cudaMemcpy(A, h, 2 * big, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B, h, 2 * big, cudaMemcpyHostToDevice));
    CK(cudaMemset(Cbuf, 0, 4 * big));
    free(h);
    const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    problem ps[] = {
        /* y[rows, out] = x W^T: (T, N) m=out n=rows k=in */
        {"fprop w1/w3 (x W^T, out I)", T, N, I, R, C, C, C, I, 0, 0},
        {"fprop w2 (a W2^T, out C)", T, N, C, R, I, I, I, C, 0, 0},
        /* dx[rows, in] = dy W: (N, N) m=in n=rows k=out */
        {"dgrad w1/w3 (dH W, out C)", N, N, C, R, I, C, I, C, 0, 0},
        {"dgrad w1/w3 accumulate", N, N, C, R, I, C, I, C, 0, 1},
        {"dgrad w2 (dY W2, out I)", N, N, I, R, C, I, C, I, 0, 0},
        /* dw[out, in] = dy^T x: (N, T) m=in n=out k=rows */
        {"wgrad w1/w3 fp32 overwrite", N, T, C, I, R, C, I, C, 1, 0},
        {"wgrad w1/w3 fp32 accumulate", N, T, C, I, R, C, I, C, 1, 1},
        {"wgrad w1/w3 bf16 overwrite", N, T, C, I, R, C, I, C, 0, 0},
        {"wgrad w2 fp32 overwrite", N, T, I, C, R, I, C, I, 1, 0},
        {"wgrad w2 bf16 overwrite", N, T, I, C, R, I, C, I, 0, 0},
    };
    printf("rows %d, hidden %d, intermediate %d\n", R, C, I);
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        const problem *p = &ps[i];
        double flop = 2.0 * p->m * p->n * p->k;
        float ms = time_gemmex(p);
        printf("%-30s cublasGemmEx %8.3f ms %7.1f TFLOP/s\n", p->name, ms, flop / ms / 1e9);
        time_lt(p, flop);
    }
    return 0;
}

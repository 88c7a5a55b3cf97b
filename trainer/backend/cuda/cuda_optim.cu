/* moekit CUDA backend: gradient norm and the fused multi-tensor AdamW. */
#include <math.h>
#include <stdlib.h>

#include "cuda_internal.h"

#define NORM_BLOCKS 1024

__global__ void sumsq_kernel(double *partial, const float *x, size_t n)
{
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    __shared__ double part[CUDA_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0;
        for (int w = 0; w < CUDA_THREADS / 32; w++)
            t += part[w];
        partial[blockIdx.x] = t;
    }
}

static double sum_squares(moe_backend *be, const real *x, size_t n)
{
    cuda_ctx *c = CTX(be);
    if (!c->d_partial) {
        if (cudaMalloc(&c->d_partial, sizeof(double) * NORM_BLOCKS) != cudaSuccess ||
            cudaMallocHost(&c->h_partial, sizeof(double) * NORM_BLOCKS) != cudaSuccess) {
            cuda_note(be, "sum_squares", "cannot allocate partial sums");
            return NAN;
        }
    }
    sumsq_kernel<<<NORM_BLOCKS, CUDA_THREADS, 0, c->stream>>>(c->d_partial, x, n);
    LAUNCHED(be, "sum_squares");
    CU(be, "sum_squares", cudaMemcpy(c->h_partial, c->d_partial, sizeof(double) * NORM_BLOCKS,
                                     cudaMemcpyDeviceToHost));
    if (c->error[0])
        return NAN; /* the trainer stops on a non-finite norm; the error says why */
    double t = 0;
    for (int i = 0; i < NORM_BLOCKS; i++)
        t += c->h_partial[i];
    return t;
}

/* The parameter spans cut into chunks; a block updates one chunk. The
 * table is built once per span layout (the model's never changes). */
typedef struct {
    unsigned long long offset;
    unsigned int n;
    int decay;
} adam_chunk;

#define ADAM_CHUNK 16384

__global__ void adamw_kernel(float *master, bf16 *wc, const float *grad, float *m, float *v,
                             const adam_chunk *chunks, float lr, float b1, float b2, float eps,
                             float wd, float bc1, float bc2, float scale)
{
    adam_chunk ch = chunks[blockIdx.x];
    float decay = ch.decay ? 1.f - lr * wd : 1.f;
    for (unsigned i = threadIdx.x; i < ch.n; i += blockDim.x) {
        size_t k = ch.offset + i;
        float g = grad[k] * scale;
        float mk = b1 * m[k] + (1.f - b1) * g;
        float vk = b2 * v[k] + (1.f - b2) * g * g;
        m[k] = mk;
        v[k] = vk;
        float p = master[k] * decay - lr * (mk / bc1) / (sqrtf(vk / bc2) + eps);
        master[k] = p;
        wc[k] = __float2bfloat16(p);
    }
}

static void adamw(moe_backend *be, real *master, act *wc, const real *grad, real *m, real *v,
                  const moe_param_span *spans, int n_spans, const moe_adamw_hyper *h)
{
    cuda_ctx *c = CTX(be);
    if (c->adam_spans_key != spans) {
        size_t n_chunks = 0;
        for (int s = 0; s < n_spans; s++)
            n_chunks += (spans[s].n + ADAM_CHUNK - 1) / ADAM_CHUNK;
        adam_chunk *table = (adam_chunk *)malloc(sizeof(adam_chunk) * (n_chunks ? n_chunks : 1));
        if (!table) {
            cuda_note(be, "adamw", "out of host memory for the chunk table");
            return;
        }
        size_t k = 0;
        for (int s = 0; s < n_spans; s++)
            for (size_t o = 0; o < spans[s].n; o += ADAM_CHUNK) {
                table[k].offset = spans[s].offset + o;
                table[k].n = (unsigned)(spans[s].n - o < ADAM_CHUNK ? spans[s].n - o : ADAM_CHUNK);
                table[k].decay = spans[s].decay;
                k++;
            }
        if (c->adam_chunks)
            cudaFree(c->adam_chunks);
        c->adam_chunks = NULL;
        CU(be, "adamw", cudaMalloc(&c->adam_chunks, sizeof(adam_chunk) * (n_chunks ? n_chunks : 1)));
        if (c->adam_chunks)
            CU(be, "adamw", cudaMemcpy(c->adam_chunks, table, sizeof(adam_chunk) * n_chunks,
                                       cudaMemcpyHostToDevice));
        free(table);
        c->adam_n_chunks = (int)n_chunks;
        c->adam_spans_key = spans;
    }
    if (!c->adam_chunks || c->adam_n_chunks == 0)
        return;
    adamw_kernel<<<c->adam_n_chunks, CUDA_THREADS, 0, c->stream>>>(
        master, (bf16 *)wc, grad, m, v, (const adam_chunk *)c->adam_chunks, h->lr, h->beta1,
        h->beta2, h->eps, h->weight_decay, h->bias_corr1, h->bias_corr2, h->grad_scale);
    LAUNCHED(be, "adamw");
}

void cuda_fill_optim_ops(moe_backend *be)
{
    be->sum_squares = sum_squares;
    be->adamw = adamw;
}

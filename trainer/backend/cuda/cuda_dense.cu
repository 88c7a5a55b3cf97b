/* moekit CUDA backend: embedding, RMSNorm, linear layers, RoPE, LM head + loss. */
#include <math.h>
#include <stdlib.h>

#include "cuda_internal.h"
#include "cuda_reduce.cuh"

#define B16(p) ((bf16 *)(p))
#define CB16(p) ((const bf16 *)(p))


/* ---- embedding ---- */

__global__ void embedding_fwd_kernel(bf16 *out, const int32_t *tok, const bf16 *wte, int C)
{
    const bf16 *row = wte + (size_t)tok[blockIdx.x] * C;
    bf16 *o = out + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        o[c] = row[c];
}

static void embedding_fwd(moe_backend *be, act *out, const int32_t *tokens, const act *wte, int N,
                          int C)
{
    embedding_fwd_kernel<<<N, CUDA_THREADS, 0, CTX(be)->stream>>>(B16(out), tokens, CB16(wte), C);
    LAUNCHED(be, "embedding_fwd");
}

/* A block per vocabulary row and EMB_COLS columns: it alone writes them,
 * adding the rows of dx whose token is its own in token order (atomics from
 * a block per token would add them in whatever order the blocks run: other
 * bits each run). The block walks the tokens a tile at a time, lists the
 * tile's hits in order (warp ballots), and each thread adds its eight
 * columns of every hit in registers: the loads of successive hits do not
 * wait on one another. */
#define EMB_COLS (CUDA_THREADS * 8)
__global__ void embedding_bwd_kernel(float *dwte, const bf16 *dx, const int32_t *tok, int N, int C)
{
    __shared__ int hits[CUDA_THREADS], warp_hits[CUDA_THREADS / 32];
    const int v = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c = blockIdx.y * EMB_COLS + threadIdx.x * 8; /* this thread's first column */
    const int vec = C % 8 == 0 && ((uintptr_t)dx & 15) == 0;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int any = 0; /* (block-uniform) a row no token reached is not touched */
    for (int t0 = 0; t0 < N; t0 += CUDA_THREADS) {
        const int n = t0 + threadIdx.x, mine = n < N && tok[n] == v;
        const unsigned b = __ballot_sync(0xFFFFFFFFu, mine);
        if (lane == 0)
            warp_hits[warp] = __popc(b);
        if (!__syncthreads_or(mine))
            continue; /* (block-uniform) none of this row in the tile: most, with a large vocabulary */
        any = 1;
        int before = 0, total = 0;
        for (int w = 0; w < CUDA_THREADS / 32; w++)
            before += w < warp ? warp_hits[w] : 0, total += warp_hits[w];
        if (mine)
            hits[before + __popc(b & ((1u << lane) - 1))] = n;
        __syncthreads();
        if (c < C) {
            if (vec) {
                float f[8];
#pragma unroll 4
                for (int j = 0; j < total; j++) {
                    bf16x8_unpack(*(const bf16x8 *)(dx + (size_t)hits[j] * C + c), f);
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        acc[k] += f[k];
                }
            } else {
                for (int j = 0; j < total; j++)
                    for (int k = 0; k < 8 && c + k < C; k++)
                        acc[k] += __bfloat162float(dx[(size_t)hits[j] * C + c + k]);
            }
        }
        __syncthreads();
    }
    float *row = dwte + (size_t)v * C;
    for (int k = 0; any && k < 8 && c + k < C; k++)
        row[c + k] += acc[k];
}

static void embedding_bwd(moe_backend *be, real *dwte, const act *dx, const int32_t *tokens, int N,
                          int C, int V)
{
    if (N <= 0 || V <= 0 || C <= 0)
        return;
    dim3 grid((unsigned)V, (unsigned)((C + EMB_COLS - 1) / EMB_COLS));
    embedding_bwd_kernel<<<grid, CUDA_THREADS, 0, CTX(be)->stream>>>(dwte, CB16(dx), tokens, N, C);
    LAUNCHED(be, "embedding_bwd");
}

/* ---- RMSNorm, optionally fused with the residual add before it ---- */

/* Rows of at most RN_VEC x 8 x blockDim values held in registers: one read
 * of each input, eight bf16 a load. */
#define RN_VEC 4
__device__ __forceinline__ int rn_vec_ok(int C, const void *a, const void *b, const void *c,
                                         const void *d)
{
    return rows_vec8(C, a, b, c, d) && C / 8 <= RN_VEC * (int)blockDim.x;
}

__global__ void add_rmsnorm_kernel(bf16 *resid_out, bf16 *out, float *rstd, const bf16 *resid_in,
                                   const bf16 *delta, const bf16 *w, int C, float eps)
{
    size_t base = (size_t)blockIdx.x * C;
    if (rn_vec_ok(C, resid_in, out, delta ? delta : resid_in, delta ? resid_out : out) &&
        rows_vec8(C, w, w, w, w)) {
        float x[RN_VEC][8], ss = 0;
        int nv = C / 8;
#pragma unroll
        for (int j = 0; j < RN_VEC; j++) {
            int v = threadIdx.x + j * blockDim.x;
            if (v >= nv)
                continue;
            bf16x8_unpack(((const bf16x8 *)(resid_in + base))[v], x[j]);
            if (delta) {
                /* the residual is stored in bf16; normalise what is stored */
                float d[8];
                bf16x8_unpack(((const bf16x8 *)(delta + base))[v], d);
#pragma unroll
                for (int k = 0; k < 8; k++)
                    x[j][k] += d[k];
                bf16x8 r = bf16x8_pack(x[j]);
                ((bf16x8 *)(resid_out + base))[v] = r;
                bf16x8_unpack(r, x[j]);
            }
#pragma unroll
            for (int k = 0; k < 8; k++)
                ss += x[j][k] * x[j][k];
        }
        float r = rsqrtf(block_sum(ss) / C + eps);
#pragma unroll
        for (int j = 0; j < RN_VEC; j++) {
            int v = threadIdx.x + j * blockDim.x;
            if (v >= nv)
                continue;
            float wv[8];
            bf16x8_unpack(((const bf16x8 *)w)[v], wv);
#pragma unroll
            for (int k = 0; k < 8; k++)
                x[j][k] = wv[k] * (x[j][k] * r);
            ((bf16x8 *)(out + base))[v] = bf16x8_pack(x[j]);
        }
        if (threadIdx.x == 0)
            rstd[blockIdx.x] = r;
        return;
    }
    float ss = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float x = __bfloat162float(resid_in[base + c]);
        if (delta) {
            /* the residual is stored in bf16; normalise what is stored */
            bf16 r = __float2bfloat16(x + __bfloat162float(delta[base + c]));
            resid_out[base + c] = r;
            x = __bfloat162float(r);
        }
        ss += x * x;
    }
    float r = rsqrtf(block_sum(ss) / C + eps);
    const bf16 *src = delta ? resid_out : resid_in;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        out[base + c] = __float2bfloat16(__bfloat162float(w[c]) * (__bfloat162float(src[base + c]) * r));
    if (threadIdx.x == 0)
        rstd[blockIdx.x] = r;
}

static void rmsnorm_fwd(moe_backend *be, act *out, real *rstd, const act *in, const act *w, int N,
                        int C, real eps)
{
    add_rmsnorm_kernel<<<N, CUDA_THREADS, 0, CTX(be)->stream>>>(NULL, B16(out), rstd, CB16(in),
                                                                NULL, CB16(w), C, eps);
    LAUNCHED(be, "rmsnorm_fwd");
}

static void add_rmsnorm_fwd(moe_backend *be, act *resid_out, act *norm_out, real *rstd,
                            const act *resid_in, const act *delta, const act *w, int N, int C,
                            real eps)
{
    add_rmsnorm_kernel<<<N, CUDA_THREADS, 0, CTX(be)->stream>>>(
        B16(resid_out), B16(norm_out), rstd, CB16(resid_in), CB16(delta), CB16(w), C, eps);
    LAUNCHED(be, "add_rmsnorm_fwd");
}

__global__ void add_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

static void add(moe_backend *be, act *out, const act *a, const act *b, size_t n)
{
    add_kernel<<<cuda_grid(n), CUDA_THREADS, 0, CTX(be)->stream>>>(B16(out), CB16(a), CB16(b), n);
    LAUNCHED(be, "add");
}

/* Rows in blocks of RN_ROWS: dx per row, and dw partial sums for the block's
 * rows in shared memory, written to the block's row of `part` (summed in a
 * fixed order by dw_add_partials: the same bits every run, where atomics
 * would add the blocks in whatever order they finish). */
#define RN_ROWS CUDA_NORM_ROWS
__global__ void rmsnorm_bwd_kernel(bf16 *din, float *part, const bf16 *dout, const bf16 *in,
                                   const bf16 *w, const float *rstd, int N, int C, int accumulate)
{
    extern __shared__ float dw_part[];
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dw_part[c] = 0;
    int r0 = blockIdx.x * RN_ROWS;
    for (int n = r0; n < r0 + RN_ROWS && n < N; n++) {
        size_t base = (size_t)n * C;
        float r = rstd[n], dot = 0;
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            dot += __bfloat162float(dout[base + c]) * __bfloat162float(w[c]) *
                   __bfloat162float(in[base + c]);
        dot = block_sum(dot);
        float k = dot * r * r * r / C;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float dy = __bfloat162float(dout[base + c]), x = __bfloat162float(in[base + c]);
            float g = dy * __bfloat162float(w[c]) * r - x * k;
            if (accumulate)
                g += __bfloat162float(din[base + c]);
            din[base + c] = __float2bfloat16(g);
            dw_part[c] += dy * x * r;
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        part[(size_t)blockIdx.x * C + c] = dw_part[c];
}

/* The same with each thread's columns in registers: a persistent grid, each
 * block striding over rows with the next row's loads in flight while it
 * reduces the current one (the row's dot product is a block-wide sum, so a
 * block would otherwise wait on memory once a row), its dw partial sums
 * kept until the end. NV 16-byte vectors a thread a row (C <= 8 NV x 256). */
template <int NV>
__global__ void __launch_bounds__(CUDA_THREADS)
rmsnorm_bwd_vec_kernel(bf16 *din, float *part, const bf16 *dout, const bf16 *in, const bf16 *w,
                       const float *rstd, int N, int C, int accumulate)
{
    int nv = C / 8;
    bf16x8 wv[NV], dy_next[NV], x_next[NV];
    float dwp[NV][8];
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int v = threadIdx.x + j * CUDA_THREADS;
        if (v < nv)
            wv[j] = ((const bf16x8 *)w)[v];
#pragma unroll
        for (int k = 0; k < 8; k++)
            dwp[j][k] = 0;
    }
    int n = blockIdx.x;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int v = threadIdx.x + j * CUDA_THREADS;
        if (v < nv && n < N) {
            dy_next[j] = ((const bf16x8 *)(dout + (size_t)n * C))[v];
            x_next[j] = ((const bf16x8 *)(in + (size_t)n * C))[v];
        }
    }
    for (; n < N; n += gridDim.x) {
        size_t base = (size_t)n * C;
        bf16x8 dyr[NV], xr[NV];
        float dot = 0;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            dyr[j] = dy_next[j], xr[j] = x_next[j];
            int v = threadIdx.x + j * CUDA_THREADS;
            if (v >= nv)
                continue;
            float dy[8], x[8], ww[8];
            bf16x8_unpack(dyr[j], dy), bf16x8_unpack(xr[j], x), bf16x8_unpack(wv[j], ww);
#pragma unroll
            for (int k = 0; k < 8; k++)
                dot += dy[k] * ww[k] * x[k];
        }
        int nn = n + gridDim.x;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            int v = threadIdx.x + j * CUDA_THREADS;
            if (v < nv && nn < N) {
                dy_next[j] = ((const bf16x8 *)(dout + (size_t)nn * C))[v];
                x_next[j] = ((const bf16x8 *)(in + (size_t)nn * C))[v];
            }
        }
        dot = block_sum(dot);
        float r = rstd[n], kk = dot * r * r * r / C;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            int v = threadIdx.x + j * CUDA_THREADS;
            if (v >= nv)
                continue;
            float dy[8], x[8], ww[8], g[8], prev[8];
            bf16x8_unpack(dyr[j], dy), bf16x8_unpack(xr[j], x), bf16x8_unpack(wv[j], ww);
            if (accumulate)
                bf16x8_unpack(((const bf16x8 *)(din + base))[v], prev);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                g[k] = dy[k] * ww[k] * r - x[k] * kk;
                if (accumulate)
                    g[k] += prev[k];
                dwp[j][k] += dy[k] * x[k] * r;
            }
            ((bf16x8 *)(din + base))[v] = bf16x8_pack(g);
        }
    }
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int v = threadIdx.x + j * CUDA_THREADS;
        if (v < nv)
#pragma unroll
            for (int k = 0; k < 8; k++)
                part[(size_t)blockIdx.x * C + 8 * v + k] = dwp[j][k];
    }
}

/* dw[c] += the blocks' partial sums of column c, block 0 first */
__global__ void dw_add_partials_kernel(float *dw, const float *part, int blocks, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float s = 0;
    for (int b = 0; b < blocks; b++)
        s += part[(size_t)b * C + c];
    dw[c] += s;
}

static float *dw_partials(moe_backend *be, int blocks, int C)
{
    return (float *)cuda_scratch(be, CUDA_SCRATCH_PARTIALS, cuda_norm_partials_bytes(blocks, C));
}

static void dw_add_partials(moe_backend *be, float *dw, const float *part, int blocks, int C)
{
    dw_add_partials_kernel<<<cuda_blocks(C, 256), 256, 0, CTX(be)->stream>>>(dw, part, blocks, C);
}

/* blocks of the persistent grid: as many as fit on the GPU at once, at most one a row */
template <int NV> static void rmsnorm_bwd_vec(moe_backend *be, bf16 *din, float *dw, const bf16 *dout,
                                               const bf16 *in, const bf16 *w, const float *rstd,
                                               int N, int C, int accumulate)
{
    static int per_sm; /* the kernel's occupancy, the same for every call */
    if (!per_sm &&
        (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rmsnorm_bwd_vec_kernel<NV>,
                                                       CUDA_THREADS, 0) != cudaSuccess ||
         per_sm < 1))
        per_sm = 1;
    int grid = CTX(be)->sm_count * per_sm;
    if (grid > CUDA_NORM_GRID_MAX)
        grid = CUDA_NORM_GRID_MAX;
    if (grid > N)
        grid = N;
    float *part = dw_partials(be, grid, C);
    if (!part)
        return;
    rmsnorm_bwd_vec_kernel<NV><<<grid, CUDA_THREADS, 0, CTX(be)->stream>>>(din, part, dout, in, w,
                                                                           rstd, N, C, accumulate);
    dw_add_partials(be, dw, part, grid, C);
}

static int rn_vec_host(int C, const void *a, const void *b, const void *c, const void *d)
{
    return C % 8 == 0 && C / 8 <= RN_VEC * CUDA_THREADS &&
           (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & 15) == 0;
}

static void rmsnorm_bwd(moe_backend *be, act *din, real *dw, const act *dout, const act *in,
                        const act *w, const real *rstd, int N, int C, int accumulate)
{
    if (N > 0 && rn_vec_host(C, din, dout, in, w)) {
        int nv = (C / 8 + CUDA_THREADS - 1) / CUDA_THREADS;
        if (nv == 1)
            rmsnorm_bwd_vec<1>(be, B16(din), dw, CB16(dout), CB16(in), CB16(w), rstd, N, C, accumulate);
        else if (nv == 2)
            rmsnorm_bwd_vec<2>(be, B16(din), dw, CB16(dout), CB16(in), CB16(w), rstd, N, C, accumulate);
        else
            rmsnorm_bwd_vec<RN_VEC>(be, B16(din), dw, CB16(dout), CB16(in), CB16(w), rstd, N, C,
                                    accumulate);
        LAUNCHED(be, "rmsnorm_bwd");
        return;
    }
    if (N <= 0)
        return;
    int blocks = cuda_blocks(N, RN_ROWS);
    float *part = dw_partials(be, blocks, C);
    if (!part)
        return;
    rmsnorm_bwd_kernel<<<blocks, CUDA_THREADS, sizeof(float) * C, CTX(be)->stream>>>(
        B16(din), part, CB16(dout), CB16(in), CB16(w), rstd, N, C, accumulate);
    dw_add_partials(be, dw, part, blocks, C);
    LAUNCHED(be, "rmsnorm_bwd");
}

/* ---- linear layers ---- */

/* precision.layers=all with a low-precision recipe set (cuda_linear_lowp.cu) */
static int linear_lowp(moe_backend *be)
{
    return CTX(be)->linear_lowp && CTX(be)->expert_recipe->gemms != MOE_GEMMS_BF16;
}

static void matmul_fwd(moe_backend *be, act *out, const act *in, const act *w, int N, int IC,
                       int OC)
{
    if (linear_lowp(be)) {
        cuda_linear_fwd_lowp(be, out, in, w, N, IC, OC);
        return;
    }
    cuda_gemm_xwT(be, out, 0, CB16(in), CB16(w), N, IC, OC, 0.f);
}

static void matmul_bwd(moe_backend *be, act *din, real *dw, const act *dout, const act *in,
                       const act *w, int N, int IC, int OC, int accumulate)
{
    if (linear_lowp(be)) {
        cuda_linear_bwd_lowp(be, din, dw, dout, in, w, N, IC, OC, accumulate);
        return;
    }
    if (din)
        cuda_gemm_dyw(be, B16(din), CB16(dout), CB16(w), N, IC, OC, accumulate ? 1.f : 0.f);
    cuda_gemm_dyTx(be, dw, CB16(dout), CB16(in), N, IC, OC, 1.f);
}

/* ---- RoPE (angles in fp32 as Hugging Face computes them) ---- */

/* token bt at position pos[bt] (packed rows restart at each segment), or
 * bt % T without pos */
__global__ void rope_kernel(bf16 *x, int T, int H, int HD, float theta, float sign,
                            const int32_t *pos)
{
    int half = HD / 2;
    size_t bt = blockIdx.x;
    int t = pos ? pos[bt] : (int)(bt % T);
    if (half % 2 == 0 && half / 2 <= (int)blockDim.x && blockDim.x % (half / 2) == 0) {
        /* a thread keeps the angles of two adjacent frequencies (the same
         * expressions as below: the same bits) and turns them in every
         * head of its group, two bf16 a load */
        int pairs = half / 2, j = 2 * (threadIdx.x % pairs), groups = blockDim.x / pairs;
        float s0, c0, s1, c1;
        sincosf((float)t * (1.0f / powf(theta, (float)(2 * j) / (float)HD)), &s0, &c0);
        sincosf((float)t * (1.0f / powf(theta, (float)(2 * j + 2) / (float)HD)), &s1, &c1);
        s0 *= sign, s1 *= sign;
        for (int h = threadIdx.x / pairs; h < H; h += groups) {
            __nv_bfloat162 *lo = (__nv_bfloat162 *)(x + (bt * H + h) * HD + j);
            __nv_bfloat162 *hi = (__nv_bfloat162 *)(x + (bt * H + h) * HD + j + half);
            float2 a = __bfloat1622float2(*lo), b = __bfloat1622float2(*hi);
            *lo = __floats2bfloat162_rn(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1);
            *hi = __floats2bfloat162_rn(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1);
        }
        return;
    }
    for (int i = threadIdx.x; i < H * half; i += blockDim.x) {
        int h = i / half, j = i % half;
        float inv = 1.0f / powf(theta, (float)(2 * j) / (float)HD);
        float s, c;
        sincosf((float)t * inv, &s, &c);
        s *= sign;
        bf16 *v = x + (bt * H + h) * HD;
        float a = __bfloat162float(v[j]), b = __bfloat162float(v[j + half]);
        v[j] = __float2bfloat16(a * c - b * s);
        v[j + half] = __float2bfloat16(b * c + a * s);
    }
}

static void rope_fwd(moe_backend *be, act *q, act *k, int B, int T, int NH, int NKV, int HD,
                     real theta, const int32_t *pos)
{
    rope_kernel<<<B * T, 128, 0, CTX(be)->stream>>>(B16(q), T, NH, HD, theta, 1.f, pos);
    rope_kernel<<<B * T, 128, 0, CTX(be)->stream>>>(B16(k), T, NKV, HD, theta, 1.f, pos);
    LAUNCHED(be, "rope_fwd");
}

static void rope_bwd(moe_backend *be, act *dq, act *dk, int B, int T, int NH, int NKV, int HD,
                     real theta, const int32_t *pos)
{
    rope_kernel<<<B * T, 128, 0, CTX(be)->stream>>>(B16(dq), T, NH, HD, theta, -1.f, pos);
    rope_kernel<<<B * T, 128, 0, CTX(be)->stream>>>(B16(dk), T, NKV, HD, theta, -1.f, pos);
    LAUNCHED(be, "rope_bwd");
}

/* ---- LM head ---- */

static void lm_head_logits(moe_backend *be, real *logits, const act *x, const act *w, int N, int C,
                           int V)
{
    cuda_gemm_xwT(be, logits, 1, CB16(x), CB16(w), N, C, V, 0.f);
}

/* One row of bf16 logits: loss = lse - logit[target]; with grad, the row is
 * overwritten by (softmax - onehot) * dloss. */
__global__ void cross_entropy_kernel(bf16 *logits, float *loss, const int32_t *targets, int V,
                                     float dloss, int grad, int *bad)
{
    bf16 *l = logits + (size_t)blockIdx.x * V;
    int tgt = targets[blockIdx.x];
    if (tgt >= V) {
        *bad = blockIdx.x + 1;
        tgt = -1;
    }
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, __bfloat162float(l[v]));
    mx = block_max(mx);
    float sum = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        sum += __expf(__bfloat162float(l[v]) - mx);
    sum = block_sum(sum);
    float lse = mx + logf(sum);
    if (threadIdx.x == 0)
        loss[blockIdx.x] = tgt >= 0 ? lse - __bfloat162float(l[tgt]) : 0.f;
    __syncthreads(); /* l[tgt] is read before it is overwritten */
    if (!grad)
        return;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float p = __expf(__bfloat162float(l[v]) - lse);
        l[v] = __float2bfloat16(tgt < 0 ? 0.f : (p - (v == tgt ? 1.f : 0.f)) * dloss);
    }
}

static int lm_head_loss(moe_backend *be, double *loss_sum_out, int64_t *n_valid_out, act *dx,
                        real *dw, const act *x, const act *w, const int32_t *targets, int N, int C,
                        int V, real dloss, moe_err *e)
{
    cuda_ctx *c = CTX(be);
    /* stream the tokens in chunks so the logits block stays bounded (bf16) */
    int chunk = cuda_logits_chunk_rows(N, V);
    bf16 *logits = (bf16 *)cuda_scratch(be, 0, cuda_logits_bytes(N, V));
    int *d_bad = c->d_bad;
    if (c->loss_cap < (size_t)N) {
        if (c->d_loss)
            cudaFree(c->d_loss);
        cudaFreeHost(c->h_loss);
        c->d_loss = NULL;
        c->h_loss = NULL;
        if (cudaMalloc(&c->d_loss, sizeof(float) * N) != cudaSuccess ||
            cudaMallocHost(&c->h_loss, sizeof(float) * (2 * (size_t)N + 1)) != cudaSuccess) {
            c->loss_cap = 0;
            return moe_errf(e, "cuda lm_head_loss: cannot allocate %d losses", N);
        }
        c->loss_cap = N;
    }
    if (!logits || !d_bad)
        return cuda_check(be, e);
    CU(be, "lm_head_loss", cudaMemsetAsync(d_bad, 0, sizeof(int), c->stream));
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        const bf16 *xr = CB16(x) + (size_t)r0 * C;
        cuda_gemm_xwT(be, logits, 0, xr, CB16(w), rows, C, V, 0.f);
        cross_entropy_kernel<<<rows, 512, 0, c->stream>>>(logits, c->d_loss + r0, targets + r0, V,
                                                          dloss, dx != NULL, d_bad);
        LAUNCHED(be, "cross_entropy");
        if (dx) {
            cuda_gemm_dyw(be, B16(dx) + (size_t)r0 * C, logits, CB16(w), rows, C, V, 0.f);
            cuda_gemm_dyTx(be, dw, logits, xr, rows, C, V, 1.f);
        }
    }
    /* the per-row losses, the targets and the bad-target flag land in one
     * pinned block, behind one host wait */
    int32_t *h_tgt = (int32_t *)(c->h_loss + N);
    int *h_bad = (int *)(c->h_loss + 2 * (size_t)N);
    CU(be, "lm_head_loss", cuda_to_host(be, c->h_loss, c->d_loss, sizeof(float) * N, NULL));
    CU(be, "lm_head_loss", cuda_to_host(be, h_bad, d_bad, sizeof(int), NULL));
    CU(be, "lm_head_loss", cuda_to_host(be, h_tgt, targets, sizeof(int32_t) * N, "loss"));
    int bad = *h_bad;
    double s = 0;
    int64_t nv = 0;
    for (int i = 0; i < N; i++)
        if (h_tgt[i] >= 0 && h_tgt[i] < V) {
            s += c->h_loss[i];
            nv++;
        }
    if (cuda_check(be, e))
        return -1;
    if (bad)
        return moe_errf(e, "target token at position %d is outside the vocabulary (%d)", bad - 1, V);
    *loss_sum_out = s;
    *n_valid_out = nv;
    return 0;
}

void cuda_fill_dense_ops(moe_backend *be)
{
    be->embedding_fwd = embedding_fwd;
    be->embedding_bwd = embedding_bwd;
    be->rmsnorm_fwd = rmsnorm_fwd;
    be->add_rmsnorm_fwd = add_rmsnorm_fwd;
    be->add = add;
    be->rmsnorm_bwd = rmsnorm_bwd;
    be->matmul_fwd = matmul_fwd;
    be->matmul_bwd = matmul_bwd;
    be->rope_fwd = rope_fwd;
    be->rope_bwd = rope_bwd;
    be->lm_head_logits = lm_head_logits;
    be->lm_head_loss = lm_head_loss;
}

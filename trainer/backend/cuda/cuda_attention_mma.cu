/* moekit CUDA backend: causal GQA flash attention on the tensor cores with
 * raw mma.sync (m16n8k16, bf16 in, fp32 accumulate), head dims 64 and 128.
 *
 * Why not WMMA: WMMA hides which thread holds which accumulator element, so
 * the online softmax had to go through shared memory every key tile. With
 * mma.sync the layout is documented (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16"): a thread with lane = 4 g + t holds, of a 16 x 8 fp32
 * accumulator, rows g and g + 8 at columns 2t and 2t + 1. Two adjacent
 * accumulator tiles of scores are then exactly the A operand of the next
 * product (P V), so probabilities never leave registers.
 *
 * Blocks of 64 rows, 4 warps of 16 rows; 64-wide tiles of the other side,
 * double-buffered in shared memory with cp.async; operands are read from
 * shared memory with ldmatrix (.trans where the product needs the transpose).
 *   forward: per query tile, over key tiles: S = Q K^T, online softmax, O += P V
 *   dQ:      per query tile, over key tiles: dS = P (dO V^T - D), dQ += dS K
 *   dK, dV:  per key tile, over the query tiles of every head of its group:
 *            dV += P^T dO, dK += dS^T Q
 * Nothing of size T x T exists and nothing is accumulated with atomics. */
#include <math.h>
#include <stdint.h>

#include "cuda_internal.h"
#include "cuda_reduce.cuh"

#define TILE 64 /* rows of a block and width of the tiles it loops over */
#define WARPS 4 /* 16 rows each */
#define LD(HD) ((HD) + 8) /* smem row pitch in bf16: 16 bytes of padding keep ldmatrix conflict-free */
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

/* ---- PTX wrappers ---- */
__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; zero-filled when !valid */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* four 8 x 8 bf16 matrices; lane l supplies the row address of matrix l / 8 */
__device__ __forceinline__ void ldsm4(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm4_t(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c[16 x 8] += a[16 x 16] b[16 x 8] */
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* ---- fragment loads out of a row-major [rows][LD(HD)] smem tile ---- */

/* A operand, rows [r0, r0 + 16) x cols [c0, c0 + 16) */
template <int HD> __device__ __forceinline__ void load_a(uint32_t a[4], const bf16 *s, int r0, int c0)
{
    int lane = threadIdx.x & 31;
    ldsm4(a, s + (r0 + (lane & 15)) * LD(HD) + c0 + (lane >> 4) * 8);
}

/* B operands of two n-tiles when B = X^T (X stored [n][k]): n in [n0, n0 + 16), k in [k0, k0 + 16).
 * b[0], b[1]: n-tile n0; b[2], b[3]: n-tile n0 + 8 */
template <int HD> __device__ __forceinline__ void load_bT(uint32_t b[4], const bf16 *s, int n0, int k0)
{
    int lane = threadIdx.x & 31;
    ldsm4(b, s + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LD(HD) + k0 + ((lane >> 3) & 1) * 8);
}

/* B operands of two n-tiles when B = X (X stored [k][n]): k in [k0, k0 + 16), n in [n0, n0 + 16) */
template <int HD> __device__ __forceinline__ void load_b(uint32_t b[4], const bf16 *s, int k0, int n0)
{
    int lane = threadIdx.x & 31;
    ldsm4_t(b, s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD(HD) + n0 + (lane >> 4) * 8);
}

/* rows [r0, r0 + 64) of head h of a [B, T, H, HD] tensor into smem, zero past T */
template <int HD>
__device__ __forceinline__ void load_tile_async(bf16 *dst, const bf16 *src, int b, int r0, int h,
                                                int T, int H)
{
    const int vec = HD / 8;
    for (int i = threadIdx.x; i < TILE * vec; i += WARPS * 32) {
        int r = i / vec, c = (i % vec) * 8, t = r0 + r;
        bool ok = t < T;
        const bf16 *g = src + (((size_t)b * T + (ok ? t : 0)) * H + h) * HD + c;
        cp_async16(dst + r * LD(HD) + c, g, ok);
    }
}

/* Double-buffered K/V over the key tiles: start loading tile j + 1 into the
 * other buffer, then wait until tile j (loaded one step earlier) is in place
 * for every thread. The caller syncs again before the buffer is reused. */
template <int HD>
__device__ __forceinline__ void kv_next_tile(bf16 *Ks, bf16 *Vs, const bf16 *k, const bf16 *v,
                                             int j, int n_tiles, int b, int kh, int T, int NKV)
{
    if (j + 1 < n_tiles) {
        int next = ((j + 1) & 1) * TILE * LD(HD), k1 = (j + 1) * TILE;
        load_tile_async<HD>(Ks + next, k, b, k1, kh, T, NKV);
        load_tile_async<HD>(Vs + next, v, b, k1, kh, T, NKV);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
    __syncthreads();
}

/* S[16 x 64] = A[16 x HD] B[64 x HD]^T for the warp's 16 rows (A rows at a0) */
template <int HD>
__device__ __forceinline__ void scores(float S[8][4], const bf16 *A, int a0, const bf16 *Bm)
{
#pragma unroll
    for (int n = 0; n < 8; n++)
        S[n][0] = S[n][1] = S[n][2] = S[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t a[4];
        load_a<HD>(a, A, a0, kk * 16);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            load_bT<HD>(b, Bm, np * 16, kk * 16);
            mma(S[2 * np], a, b[0], b[1]);
            mma(S[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* acc[16 x HD] += P[16 x 64] X[64 x HD]; P given as fp32 accumulator tiles, rounded to bf16 here */
template <int HD>
__device__ __forceinline__ void acc_px(float acc[HD / 8][4], const float P[8][4], const bf16 *X)
{
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        uint32_t a[4] = {pack_bf16(P[2 * kc][0], P[2 * kc][1]), pack_bf16(P[2 * kc][2], P[2 * kc][3]),
                         pack_bf16(P[2 * kc + 1][0], P[2 * kc + 1][1]),
                         pack_bf16(P[2 * kc + 1][2], P[2 * kc + 1][3])};
#pragma unroll
        for (int dp = 0; dp < HD / 16; dp++) {
            uint32_t b[4];
            load_b<HD>(b, X, kc * 16, dp * 16);
            mma(acc[2 * dp], a, b[0], b[1]);
            mma(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

/* rows r (the thread's g) and r + 8 of a warp's 16 x HD accumulator, times mul, as bf16 into a
 * [B, T, H, HD] tensor */
template <int HD>
__device__ __forceinline__ void store_acc(bf16 *dst, const float acc[HD / 8][4], float mul_g,
                                          float mul_g8, int b, int row0, int h, int T, int H)
{
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int r1 = row0 + g, r2 = row0 + g + 8;
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++) {
        int d = dt * 8 + 2 * t;
        if (r1 < T)
            *(uint32_t *)(dst + (((size_t)b * T + r1) * H + h) * HD + d) =
                pack_bf16(acc[dt][0] * mul_g, acc[dt][1] * mul_g);
        if (r2 < T)
            *(uint32_t *)(dst + (((size_t)b * T + r2) * H + h) * HD + d) =
                pack_bf16(acc[dt][2] * mul_g8, acc[dt][3] * mul_g8);
    }
}

/* ------------------------------------------------------------------ forward */

template <int HD> static size_t fwd_smem(void) { return sizeof(bf16) * 5 * TILE * LD(HD); }

template <int HD>
__global__ void __launch_bounds__(WARPS * 32, 2)
    attn_mma_fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int T, int NH,
                 int NKV, float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + TILE * LD(HD), *Vs = Ks + 2 * TILE * LD(HD);
    /* the longest (last) query tiles first: the causal work is uneven */
    int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * TILE;
    int b = blockIdx.z, h = blockIdx.y, kh = h / (NH / NKV);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int row_g = q0 + w * 16 + g, row_g8 = row_g + 8;
    float sl2 = scale * LOG2E;
    int n_tiles = (min(T - 1, q0 + TILE - 1)) / TILE + 1;

    load_tile_async<HD>(Qs, q, b, q0, h, T, NH);
    load_tile_async<HD>(Ks, k, b, 0, kh, T, NKV);
    load_tile_async<HD>(Vs, v, b, 0, kh, T, NKV);
    cp_async_commit();

    float O[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
        O[i][0] = O[i][1] = O[i][2] = O[i][3] = 0.f;
    float m_g = -INFINITY, m_g8 = -INFINITY, l_g = 0.f, l_g8 = 0.f; /* m in log2 units */

    for (int j = 0; j < n_tiles; j++) {
        int buf = j & 1, k0 = j * TILE;
        kv_next_tile<HD>(Ks, Vs, k, v, j, n_tiles, b, kh, T, NKV);
        const bf16 *Kb = Ks + buf * TILE * LD(HD), *Vb = Vs + buf * TILE * LD(HD);
        float S[8][4];
        scores<HD>(S, Qs, w * 16, Kb);
        /* scale into log2 units; mask the future and the keys past T */
        bool edge = k0 + TILE - 1 > q0 + w * 16 || k0 + TILE > T;
        float mx_g = -INFINITY, mx_g8 = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; n++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int key = k0 + n * 8 + 2 * t + i;
                float s1 = S[n][i] * sl2, s2 = S[n][2 + i] * sl2;
                if (edge) {
                    bool bad = key >= T;
                    s1 = (bad || key > row_g) ? -INFINITY : s1;
                    s2 = (bad || key > row_g8) ? -INFINITY : s2;
                }
                S[n][i] = s1;
                S[n][2 + i] = s2;
                mx_g = fmaxf(mx_g, s1);
                mx_g8 = fmaxf(mx_g8, s2);
            }
        }
        mx_g = lanes_max_up<4>(mx_g); /* a fragment row's four lanes */
        mx_g8 = lanes_max_up<4>(mx_g8);
        /* key k0 <= every row of the block, so each row has a finite score by now */
        float mn_g = fmaxf(m_g, mx_g), mn_g8 = fmaxf(m_g8, mx_g8);
        float c_g = exp2f(m_g - mn_g), c_g8 = exp2f(m_g8 - mn_g8);
        m_g = mn_g;
        m_g8 = mn_g8;
        float sum_g = 0.f, sum_g8 = 0.f;
#pragma unroll
        for (int n = 0; n < 8; n++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                /* the row sums use the bf16 values that P V multiplies */
                float p1 = __bfloat162float(__float2bfloat16(exp2f(S[n][i] - mn_g)));
                float p2 = __bfloat162float(__float2bfloat16(exp2f(S[n][2 + i] - mn_g8)));
                S[n][i] = p1;
                S[n][2 + i] = p2;
                sum_g += p1;
                sum_g8 += p2;
            }
        }
        l_g = l_g * c_g + sum_g; /* per-thread partial sums; the quad adds them at the end */
        l_g8 = l_g8 * c_g8 + sum_g8;
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            O[i][0] *= c_g;
            O[i][1] *= c_g;
            O[i][2] *= c_g8;
            O[i][3] *= c_g8;
        }
        acc_px<HD>(O, S, Vb);
        __syncthreads(); /* the next iteration's loads overwrite this buffer */
    }
    l_g = lanes_sum_up<4>(l_g);
    l_g8 = lanes_sum_up<4>(l_g8);
    store_acc<HD>(out, O, 1.f / l_g, 1.f / l_g8, b, q0 + w * 16, h, T, NH);
    if (t == 0) {
        if (row_g < T)
            lse[((size_t)b * NH + h) * T + row_g] = m_g * LN2 + logf(l_g);
        if (row_g8 < T)
            lse[((size_t)b * NH + h) * T + row_g8] = m_g8 * LN2 + logf(l_g8);
    }
}

/* ------------------------------------------------------------------ dQ */

template <int HD> static size_t dq_smem(void) { return sizeof(bf16) * 6 * TILE * LD(HD); }

template <int HD>
__global__ void __launch_bounds__(WARPS * 32, 2)
    attn_mma_dq(bf16 *dq, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout,
                const float *lse, const float *D, int T, int NH, int NKV, float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *dOs = Qs + TILE * LD(HD), *Ks = dOs + TILE * LD(HD),
         *Vs = Ks + 2 * TILE * LD(HD);
    int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * TILE;
    int b = blockIdx.z, h = blockIdx.y, kh = h / (NH / NKV);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int row_g = q0 + w * 16 + g, row_g8 = row_g + 8;
    float sl2 = scale * LOG2E;
    size_t rbase = ((size_t)b * NH + h) * T;
    float L_g = row_g < T ? lse[rbase + row_g] * LOG2E : 0.f;
    float L_g8 = row_g8 < T ? lse[rbase + row_g8] * LOG2E : 0.f;
    float D_g = row_g < T ? D[rbase + row_g] : 0.f, D_g8 = row_g8 < T ? D[rbase + row_g8] : 0.f;
    int n_tiles = (min(T - 1, q0 + TILE - 1)) / TILE + 1;

    load_tile_async<HD>(Qs, q, b, q0, h, T, NH);
    load_tile_async<HD>(dOs, dout, b, q0, h, T, NH);
    load_tile_async<HD>(Ks, k, b, 0, kh, T, NKV);
    load_tile_async<HD>(Vs, v, b, 0, kh, T, NKV);
    cp_async_commit();

    float G[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
        G[i][0] = G[i][1] = G[i][2] = G[i][3] = 0.f;

    for (int j = 0; j < n_tiles; j++) {
        int buf = j & 1, k0 = j * TILE;
        kv_next_tile<HD>(Ks, Vs, k, v, j, n_tiles, b, kh, T, NKV);
        const bf16 *Kb = Ks + buf * TILE * LD(HD), *Vb = Vs + buf * TILE * LD(HD);
        float S[8][4], dP[8][4];
        scores<HD>(S, Qs, w * 16, Kb);
        scores<HD>(dP, dOs, w * 16, Vb);
        bool edge = k0 + TILE - 1 > q0 + w * 16 || k0 + TILE > T;
#pragma unroll
        for (int n = 0; n < 8; n++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int key = k0 + n * 8 + 2 * t + i;
                float p1 = exp2f(S[n][i] * sl2 - L_g), p2 = exp2f(S[n][2 + i] * sl2 - L_g8);
                if (edge) {
                    bool bad = key >= T;
                    p1 = (bad || key > row_g) ? 0.f : p1;
                    p2 = (bad || key > row_g8) ? 0.f : p2;
                }
                /* dS without the softmax scale, which multiplies dQ once at the end */
                S[n][i] = p1 * (dP[n][i] - D_g);
                S[n][2 + i] = p2 * (dP[n][2 + i] - D_g8);
            }
        }
        acc_px<HD>(G, S, Kb);
        __syncthreads();
    }
    store_acc<HD>(dq, G, scale, scale, b, q0 + w * 16, h, T, NH);
}

/* ------------------------------------------------------------------ dK, dV */

template <int HD> static size_t dkv_smem(void)
{
    return sizeof(bf16) * 6 * TILE * LD(HD) + sizeof(float) * 4 * TILE;
}

/* the loads of iteration i of the dK/dV loop into buffer buf: head kh * group + i / per_head,
 * query tile k0 + (i % per_head) * TILE, with its log-sum-exp and D rows */
template <int HD>
__device__ __forceinline__ void dkv_issue(bf16 *Qs, bf16 *dOs, float *Ls, float *Ds, const bf16 *q,
                                          const bf16 *dout, const float *lse, const float *D,
                                          int i, int buf, int b, int kh, int group, int per_head,
                                          int k0, int T, int NH)
{
    int h = kh * group + i / per_head, t0 = k0 + (i % per_head) * TILE;
    load_tile_async<HD>(Qs + buf * TILE * LD(HD), q, b, t0, h, T, NH);
    load_tile_async<HD>(dOs + buf * TILE * LD(HD), dout, b, t0, h, T, NH);
    size_t rbase = ((size_t)b * NH + h) * T;
    for (int r = threadIdx.x; r < TILE; r += WARPS * 32) {
        bool ok = t0 + r < T;
        cp_async4(Ls + buf * TILE + r, lse + rbase + (ok ? t0 + r : 0), ok);
        cp_async4(Ds + buf * TILE + r, D + rbase + (ok ? t0 + r : 0), ok);
    }
    cp_async_commit();
}

template <int HD>
__global__ void __launch_bounds__(WARPS * 32, 2)
    attn_mma_dkv(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                 const bf16 *dout, const float *lse, const float *D, int T, int NH, int NKV,
                 float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + TILE * LD(HD), *Qs = Vs + TILE * LD(HD),
         *dOs = Qs + 2 * TILE * LD(HD);
    float *Ls = (float *)(dOs + 2 * TILE * LD(HD)), *Ds = Ls + 2 * TILE;
    /* key tile 0 sees every query: block 0 has the most work and starts first */
    int b = blockIdx.z, kh = blockIdx.y, group = NH / NKV, k0 = blockIdx.x * TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int key_g = k0 + w * 16 + g, key_g8 = key_g + 8;
    float sl2 = scale * LOG2E;
    int per_head = (T - k0 + TILE - 1) / TILE, n_iter = group * per_head;

    load_tile_async<HD>(Ks, k, b, k0, kh, T, NKV);
    load_tile_async<HD>(Vs, v, b, k0, kh, T, NKV);
    dkv_issue<HD>(Qs, dOs, Ls, Ds, q, dout, lse, D, 0, 0, b, kh, group, per_head, k0, T, NH);

    float GK[HD / 8][4], GV[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
        GK[i][0] = GK[i][1] = GK[i][2] = GK[i][3] = 0.f;
        GV[i][0] = GV[i][1] = GV[i][2] = GV[i][3] = 0.f;
    }
    for (int it = 0; it < n_iter; it++) {
        int buf = it & 1, t0 = k0 + (it % per_head) * TILE;
        if (it + 1 < n_iter) {
            dkv_issue<HD>(Qs, dOs, Ls, Ds, q, dout, lse, D, it + 1, buf ^ 1, b, kh, group,
                          per_head, k0, T, NH);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16 *Qb = Qs + buf * TILE * LD(HD), *dOb = dOs + buf * TILE * LD(HD);
        const float *Lb = Ls + buf * TILE, *Db = Ds + buf * TILE;
        float S[8][4], dP[8][4]; /* transposed: rows are keys, columns queries */
        scores<HD>(S, Ks, w * 16, Qb);
        scores<HD>(dP, Vs, w * 16, dOb);
        bool edge = t0 < k0 + w * 16 + 16 || t0 + TILE > T || k0 + TILE > T;
#pragma unroll
        for (int n = 0; n < 8; n++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int c = n * 8 + 2 * t + i, qry = t0 + c;
                float L = Lb[c] * LOG2E, Dq = Db[c];
                float p1 = exp2f(S[n][i] * sl2 - L), p2 = exp2f(S[n][2 + i] * sl2 - L);
                if (edge) {
                    bool bad = qry >= T;
                    p1 = (bad || key_g >= T || qry < key_g) ? 0.f : p1;
                    p2 = (bad || key_g8 >= T || qry < key_g8) ? 0.f : p2;
                }
                S[n][i] = p1;
                S[n][2 + i] = p2;
                dP[n][i] = p1 * (dP[n][i] - Dq);
                dP[n][2 + i] = p2 * (dP[n][2 + i] - Dq);
            }
        }
        acc_px<HD>(GV, S, dOb); /* dV += P^T dO */
        acc_px<HD>(GK, dP, Qb); /* dK += dS^T Q (scale applied at the end) */
        __syncthreads();
    }
    int kv_row0 = k0 + w * 16;
    store_acc<HD>(dk, GK, scale, scale, b, kv_row0, kh, T, NKV);
    store_acc<HD>(dv, GV, 1.f, 1.f, b, kv_row0, kh, T, NKV);
}

/* ------------------------------------------------------------------ launch */

int cuda_attention_mma_supported(int HD) { return HD == 64 || HD == 128; }

template <int HD>
static void mma_fwd(moe_backend *be, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                    const bf16 *v, int B, int T, int NH, int NKV)
{
    size_t smem = fwd_smem<HD>();
    CU(be, "attention_fwd", cudaFuncSetAttribute(attn_mma_fwd<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((T + TILE - 1) / TILE, NH, B);
    attn_mma_fwd<HD><<<grid, WARPS * 32, smem, CTX(be)->stream>>>(out, lse, q, k, v, T, NH, NKV,
                                                                 (float)(1.0 / sqrt((double)HD)));
    LAUNCHED(be, "attention_fwd (mma.sync)");
}

template <int HD>
static void mma_bwd(moe_backend *be, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                    const bf16 *q, const bf16 *k, const bf16 *v, const float *lse, const float *D,
                    int B, int T, int NH, int NKV)
{
    float scale = (float)(1.0 / sqrt((double)HD));
    size_t s1 = dq_smem<HD>(), s2 = dkv_smem<HD>();
    CU(be, "attention_bwd", cudaFuncSetAttribute(attn_mma_dq<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
    CU(be, "attention_bwd", cudaFuncSetAttribute(attn_mma_dkv<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
    dim3 gq((T + TILE - 1) / TILE, NH, B), gk((T + TILE - 1) / TILE, NKV, B);
    attn_mma_dq<HD><<<gq, WARPS * 32, s1, CTX(be)->stream>>>(dq, q, k, v, dout, lse, D, T, NH, NKV, scale);
    LAUNCHED(be, "attention_bwd dq (mma.sync)");
    attn_mma_dkv<HD><<<gk, WARPS * 32, s2, CTX(be)->stream>>>(dk, dv, q, k, v, dout, lse, D, T, NH, NKV, scale);
    LAUNCHED(be, "attention_bwd dk dv (mma.sync)");
}

void cuda_attention_mma_fwd(moe_backend *be, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                            const bf16 *v, int B, int T, int NH, int NKV, int HD)
{
    if (HD == 128)
        mma_fwd<128>(be, out, lse, q, k, v, B, T, NH, NKV);
    else if (HD == 64)
        mma_fwd<64>(be, out, lse, q, k, v, B, T, NH, NKV);
    else
        cuda_note(be, "attention_fwd", "no mma.sync kernel for this head dim");
}

void cuda_attention_mma_bwd(moe_backend *be, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                            const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                            const float *D, int B, int T, int NH, int NKV, int HD)
{
    if (HD == 128)
        mma_bwd<128>(be, dq, dk, dv, dout, q, k, v, lse, D, B, T, NH, NKV);
    else if (HD == 64)
        mma_bwd<64>(be, dq, dk, dv, dout, q, k, v, lse, D, B, T, NH, NKV);
    else
        cuda_note(be, "attention_bwd", "no mma.sync kernel for this head dim");
}

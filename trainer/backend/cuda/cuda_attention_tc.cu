/* moekit CUDA backend: causal GQA flash attention on the tensor cores (WMMA,
 * bf16 operands, fp32 accumulation), forward and backward, for head dims
 * that are multiples of 16 up to 128 (Mixtral's is 128).
 *
 * Blocks of 64 rows, 4 warps of 16 rows each. Every product is a WMMA
 * fragment product out of shared memory; the online softmax and the
 * rescaling of the output run on fp32 tiles in shared memory, because WMMA
 * hides which thread holds which accumulator element.
 *   forward: per query tile, over key tiles: S = Q K^T, online softmax, O += P V
 *   dQ:      per query tile, over key tiles: dS = P (dO V^T - D), dQ += dS K
 *   dK, dV:  per key tile, over query tiles of every head of its group:
 *            dV += P^T dO, dK += dS^T Q
 * Nothing of size T x T exists; dQ is not accumulated with atomics. */
#include <math.h>
#include <mma.h>

#include "cuda_internal.h"
#include "cuda_reduce.cuh"

using namespace nvcuda;

#define BR 64 /* rows of a tile */
#define NW 4  /* warps per block, 16 rows each */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a_row;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> frag_a_col;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* leading dimensions, padded against bank conflicts (bf16: multiple of 8, fp32: of 4) */
#define LDH(HD) ((HD) + 8)
#define LDS 68 /* fp32 16 x 64 score tiles */
#define LDP 72 /* bf16 16 x 64 probability tiles */
#define LDO(HD) ((HD) + 4)

/* rows [r0, r0 + 64) of a [B, T, H, HD] tensor (head h) into smem, zero past T */
__device__ void load_tile(bf16 *dst, const bf16 *src, int b, int r0, int h, int T, int H, int HD)
{
    int vec = HD / 8; /* 16-byte vectors per row */
    for (int i = threadIdx.x; i < BR * vec; i += blockDim.x) {
        int r = i / vec, c = (i % vec) * 8, t = r0 + r;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (t < T)
            v = *(const uint4 *)(src + (((size_t)b * T + t) * H + h) * HD + c);
        *(uint4 *)(dst + r * LDH(HD) + c) = v;
    }
}

/* S[16 x 64] (fp32, ld LDS) = A[16 x HD] B[64 x HD]^T, A and B row-major bf16 in smem */
__device__ void mm_abT(float *S, const bf16 *A, const bf16 *B, int HD)
{
    for (int n = 0; n < 4; n++) {
        frag_c acc;
        wmma::fill_fragment(acc, 0.f);
        for (int k = 0; k < HD; k += 16) {
            frag_a_row a;
            frag_b_col bt;
            wmma::load_matrix_sync(a, A + k, LDH(HD));
            wmma::load_matrix_sync(bt, B + n * 16 * LDH(HD) + k, LDH(HD));
            wmma::mma_sync(acc, a, bt, acc);
        }
        wmma::store_matrix_sync(S + n * 16, acc, LDS, wmma::mem_row_major);
    }
}

/* O[16 x HD] (fp32, ld LDO) += P[16 x 64] (bf16, ld LDP) X[64 x HD] (bf16 row-major) */
__device__ void mm_acc_px(float *O, const bf16 *P, const bf16 *X, int HD)
{
    for (int j = 0; j < HD; j += 16) {
        frag_c acc;
        wmma::load_matrix_sync(acc, O + j, LDO(HD), wmma::mem_row_major);
        for (int k = 0; k < 64; k += 16) {
            frag_a_row a;
            frag_b_row x;
            wmma::load_matrix_sync(a, P + k, LDP);
            wmma::load_matrix_sync(x, X + k * LDH(HD) + j, LDH(HD));
            wmma::mma_sync(acc, a, x, acc);
        }
        wmma::store_matrix_sync(O + j, acc, LDO(HD), wmma::mem_row_major);
    }
}

static size_t fwd_smem(int HD)
{
    return sizeof(bf16) * 3 * BR * LDH(HD) + sizeof(float) * NW * 16 * LDS +
           sizeof(bf16) * NW * 16 * LDP + sizeof(float) * NW * 16 * LDO(HD);
}

__global__ void __launch_bounds__(NW * 32) attn_tc_fwd(bf16 *out, float *lse, const bf16 *q,
                                                       const bf16 *k, const bf16 *v, int T,
                                                       int NH, int NKV, int HD, float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Q = (bf16 *)smem, *K = Q + BR * LDH(HD), *V = K + BR * LDH(HD);
    float *S = (float *)(V + BR * LDH(HD));
    bf16 *P = (bf16 *)(S + NW * 16 * LDS);
    float *O = (float *)(P + NW * 16 * LDP);
    int b = blockIdx.z, h = blockIdx.y, kh = h / (NH / NKV), q0 = blockIdx.x * BR;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = S + w * 16 * LDS, *Ow = O + w * 16 * LDO(HD);
    bf16 *Pw = P + w * 16 * LDP;
    load_tile(Q, q, b, q0, h, T, NH, HD);
    for (int i = lane; i < 16 * LDO(HD); i += 32)
        Ow[i] = 0;
    /* lanes 2r, 2r+1 own row r of the warp's 16: columns [32 * (lane & 1), +32) */
    int r = lane >> 1, c0 = (lane & 1) * 32, tq = q0 + w * 16 + r;
    float m = -INFINITY, l = 0;
    int last = min(T - 1, q0 + BR - 1);
    for (int k0 = 0; k0 <= last; k0 += BR) {
        __syncthreads();
        load_tile(K, k, b, k0, kh, T, NKV, HD);
        load_tile(V, v, b, k0, kh, T, NKV, HD);
        __syncthreads();
        mm_abT(Sw, Q + w * 16 * LDH(HD), K, HD);
        __syncwarp();
        float mx = -INFINITY;
        for (int c = c0; c < c0 + 32; c++) {
            int tk = k0 + c;
            float s = (tk <= tq && tk < T && tq < T) ? Sw[r * LDS + c] * scale : -INFINITY;
            Sw[r * LDS + c] = s;
            mx = fmaxf(mx, s);
        }
        mx = lanes_max_up<2>(mx); /* the row's two lanes */
        float m_new = fmaxf(m, mx), sum = 0;
        float corr = m == -INFINITY ? 0.f : __expf(m - m_new);
        for (int c = c0; c < c0 + 32; c++) {
            float s = Sw[r * LDS + c];
            float p = s == -INFINITY ? 0.f : __expf(s - m_new);
            bf16 pb = __float2bfloat16(p);
            Pw[r * LDP + c] = pb;
            sum += __bfloat162float(pb); /* the sum of what P V will use */
        }
        sum = lanes_sum_up<2>(sum);
        l = l * corr + sum;
        m = m_new;
        for (int d = (lane & 1); d < HD; d += 2)
            Ow[r * LDO(HD) + d] *= corr;
        __syncwarp();
        mm_acc_px(Ow, Pw, V, HD);
        __syncwarp();
    }
    if (tq >= T)
        return;
    float inv = l > 0 ? 1.f / l : 0.f;
    for (int d = (lane & 1); d < HD; d += 2)
        out[(((size_t)b * T + tq) * NH + h) * HD + d] = __float2bfloat16(Ow[r * LDO(HD) + d] * inv);
    if ((lane & 1) == 0)
        lse[((size_t)b * NH + h) * T + tq] = m + logf(l);
}

/* acc[j] (16 x 16 fp32 fragments over HD) += P[16 x 64] (bf16, ld LDP) X[64 x HD] */
template <int HD>
__device__ __forceinline__ void mm_reg_px(frag_c *acc, const bf16 *P, const bf16 *X)
{
#pragma unroll
    for (int k = 0; k < 64; k += 16) {
        frag_a_row a;
        wmma::load_matrix_sync(a, P + k, LDP);
#pragma unroll
        for (int j = 0; j < HD / 16; j++) {
            frag_b_row x;
            wmma::load_matrix_sync(x, X + k * LDH(HD) + j * 16, LDH(HD));
            wmma::mma_sync(acc[j], a, x, acc[j]);
        }
    }
}

/* write a warp's 16 x HD register accumulator as bf16 rows of a [B, T, H, HD]
 * tensor, through a 16 x LDO fp32 staging tile of smem */
template <int HD>
__device__ void store_rows(bf16 *dst, frag_c *acc, float *stage, int b, int r0, int h, int T, int H)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < HD / 16; j++)
        wmma::store_matrix_sync(stage + j * 16, acc[j], LDO(HD), wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * HD; i += 32) {
        int r = i / HD, d = i % HD, t = r0 + r;
        if (t < T)
            dst[(((size_t)b * T + t) * H + h) * HD + d] = __float2bfloat16(stage[r * LDO(HD) + d]);
    }
}

/* one fp32 score tile per warp (S, then dP in the same place): small enough
 * for two blocks per SM at head dim 128 */
static size_t dq_smem(int HD)
{
    return sizeof(bf16) * 4 * BR * LDH(HD) + sizeof(float) * NW * 16 * LDS +
           sizeof(bf16) * NW * 16 * LDP;
}

/* dQ per query tile: the accumulators stay in registers for the whole key loop */
template <int HD>
__global__ void __launch_bounds__(NW * 32) attn_tc_dq(bf16 *dq, const bf16 *q, const bf16 *k,
                                                      const bf16 *v, const bf16 *dout,
                                                      const float *lse, const float *D, int T,
                                                      int NH, int NKV, float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Q = (bf16 *)smem, *dO = Q + BR * LDH(HD), *K = dO + BR * LDH(HD), *V = K + BR * LDH(HD);
    float *S = (float *)(V + BR * LDH(HD));
    bf16 *dS = (bf16 *)(S + NW * 16 * LDS);
    int b = blockIdx.z, h = blockIdx.y, kh = h / (NH / NKV), q0 = blockIdx.x * BR;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = S + w * 16 * LDS;
    bf16 *dSw = dS + w * 16 * LDP;
    load_tile(Q, q, b, q0, h, T, NH, HD);
    load_tile(dO, dout, b, q0, h, T, NH, HD);
    frag_c g[HD / 16];
#pragma unroll
    for (int j = 0; j < HD / 16; j++)
        wmma::fill_fragment(g[j], 0.f);
    int r = lane >> 1, c0 = (lane & 1) * 32, tq = q0 + w * 16 + r;
    float L = tq < T ? lse[((size_t)b * NH + h) * T + tq] : 0.f;
    float Dt = tq < T ? D[((size_t)b * NH + h) * T + tq] : 0.f;
    int last = min(T - 1, q0 + BR - 1);
    for (int k0 = 0; k0 <= last; k0 += BR) {
        __syncthreads();
        load_tile(K, k, b, k0, kh, T, NKV, HD);
        load_tile(V, v, b, k0, kh, T, NKV, HD);
        __syncthreads();
        mm_abT(Sw, Q + w * 16 * LDH(HD), K, HD);
        __syncwarp();
        float p[32]; /* this lane's 32 probabilities, kept while dP takes the tile */
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int tk = k0 + c0 + i;
            p[i] = (tk <= tq && tk < T && tq < T) ? __expf(Sw[r * LDS + c0 + i] * scale - L) : 0.f;
        }
        __syncwarp();
        mm_abT(Sw, dO + w * 16 * LDH(HD), V, HD);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 32; i++)
            dSw[r * LDP + c0 + i] = __float2bfloat16(p[i] * (Sw[r * LDS + c0 + i] - Dt) * scale);
        __syncwarp();
        mm_reg_px<HD>(g, dSw, K);
    }
    __syncthreads(); /* the tiles are free: stage the result there */
    store_rows<HD>(dq, g, (float *)smem + w * 16 * LDO(HD), b, q0 + w * 16, h, T, NH);
}

static size_t dkv_smem(int HD)
{
    return sizeof(bf16) * 4 * BR * LDH(HD) + sizeof(float) * NW * 16 * LDS +
           sizeof(bf16) * 2 * NW * 16 * LDP + sizeof(float) * 2 * BR;
}

/* dK, dV per key tile, over the query tiles of every head of its group;
 * both accumulators stay in registers */
template <int HD>
__global__ void __launch_bounds__(NW * 32) attn_tc_dkv(bf16 *dk, bf16 *dv, const bf16 *q,
                                                       const bf16 *k, const bf16 *v,
                                                       const bf16 *dout, const float *lse,
                                                       const float *D, int T, int NH, int NKV,
                                                       float scale)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *K = (bf16 *)smem, *V = K + BR * LDH(HD), *Q = V + BR * LDH(HD), *dO = Q + BR * LDH(HD);
    float *St = (float *)(dO + BR * LDH(HD));
    bf16 *Pt = (bf16 *)(St + NW * 16 * LDS), *dSt = Pt + NW * 16 * LDP;
    float *Ls = (float *)(dSt + NW * 16 * LDP), *Ds = Ls + BR;
    int b = blockIdx.z, kh = blockIdx.y, group = NH / NKV, k0 = blockIdx.x * BR;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Stw = St + w * 16 * LDS;
    bf16 *Ptw = Pt + w * 16 * LDP, *dStw = dSt + w * 16 * LDP;
    load_tile(K, k, b, k0, kh, T, NKV, HD);
    load_tile(V, v, b, k0, kh, T, NKV, HD);
    frag_c gk[HD / 16], gv[HD / 16];
#pragma unroll
    for (int j = 0; j < HD / 16; j++) {
        wmma::fill_fragment(gk[j], 0.f);
        wmma::fill_fragment(gv[j], 0.f);
    }
    int r = lane >> 1, c0 = (lane & 1) * 32, tk = k0 + w * 16 + r;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int t0 = k0; t0 < T; t0 += BR) {
            __syncthreads();
            load_tile(Q, q, b, t0, h, T, NH, HD);
            load_tile(dO, dout, b, t0, h, T, NH, HD);
            for (int i = threadIdx.x; i < BR; i += blockDim.x) {
                int t = t0 + i;
                Ls[i] = t < T ? lse[((size_t)b * NH + h) * T + t] : 0.f;
                Ds[i] = t < T ? D[((size_t)b * NH + h) * T + t] : 0.f;
            }
            __syncthreads();
            mm_abT(Stw, K + w * 16 * LDH(HD), Q, HD); /* S^T: keys x queries */
            __syncwarp();
            float p[32];
#pragma unroll
            for (int i = 0; i < 32; i++) {
                int tq = t0 + c0 + i;
                p[i] = (tq >= tk && tq < T && tk < T) ? __expf(Stw[r * LDS + c0 + i] * scale - Ls[c0 + i]) : 0.f;
                Ptw[r * LDP + c0 + i] = __float2bfloat16(p[i]);
            }
            __syncwarp();
            mm_abT(Stw, V + w * 16 * LDH(HD), dO, HD); /* dP^T, in the same tile */
            __syncwarp();
#pragma unroll
            for (int i = 0; i < 32; i++)
                dStw[r * LDP + c0 + i] =
                    __float2bfloat16(p[i] * (Stw[r * LDS + c0 + i] - Ds[c0 + i]) * scale);
            __syncwarp();
            mm_reg_px<HD>(gv, Ptw, dO); /* dV += P^T dO */
            mm_reg_px<HD>(gk, dStw, Q); /* dK += dS^T Q */
        }
    }
    __syncthreads();
    float *stage = (float *)smem + w * 16 * LDO(HD);
    store_rows<HD>(dk, gk, stage, b, k0 + w * 16, kh, T, NKV);
    __syncwarp();
    store_rows<HD>(dv, gv, stage, b, k0 + w * 16, kh, T, NKV);
}

int cuda_attention_tc_supported(int HD) { return HD == 16 || HD == 32 || HD == 64 || HD == 128; }

void cuda_attention_tc_fwd(moe_backend *be, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                           const bf16 *v, int B, int T, int NH, int NKV, int HD)
{
    size_t smem = fwd_smem(HD);
    CU(be, "attention_fwd", cudaFuncSetAttribute(attn_tc_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((T + BR - 1) / BR, NH, B);
    attn_tc_fwd<<<grid, NW * 32, smem, CTX(be)->stream>>>(out, lse, q, k, v, T, NH, NKV, HD,
                                                          (float)(1.0 / sqrt((double)HD)));
    LAUNCHED(be, "attention_fwd (tensor cores)");
}

template <int HD>
static void tc_bwd(moe_backend *be, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                   const bf16 *q, const bf16 *k, const bf16 *v, const float *lse, const float *D,
                   int B, int T, int NH, int NKV)
{
    float scale = (float)(1.0 / sqrt((double)HD));
    size_t s1 = dq_smem(HD), s2 = dkv_smem(HD);
    CU(be, "attention_bwd", cudaFuncSetAttribute(attn_tc_dq<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
    CU(be, "attention_bwd", cudaFuncSetAttribute(attn_tc_dkv<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
    dim3 gq((T + BR - 1) / BR, NH, B), gk((T + BR - 1) / BR, NKV, B);
    attn_tc_dq<HD><<<gq, NW * 32, s1, CTX(be)->stream>>>(dq, q, k, v, dout, lse, D, T, NH, NKV, scale);
    attn_tc_dkv<HD><<<gk, NW * 32, s2, CTX(be)->stream>>>(dk, dv, q, k, v, dout, lse, D, T, NH, NKV, scale);
    LAUNCHED(be, "attention_bwd (tensor cores)");
}

void cuda_attention_tc_bwd(moe_backend *be, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                           const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                           const float *D, int B, int T, int NH, int NKV, int HD)
{
    switch (HD) {
    case 16: tc_bwd<16>(be, dq, dk, dv, dout, q, k, v, lse, D, B, T, NH, NKV); break;
    case 32: tc_bwd<32>(be, dq, dk, dv, dout, q, k, v, lse, D, B, T, NH, NKV); break;
    case 64: tc_bwd<64>(be, dq, dk, dv, dout, q, k, v, lse, D, B, T, NH, NKV); break;
    case 128: tc_bwd<128>(be, dq, dk, dv, dout, q, k, v, lse, D, B, T, NH, NKV); break;
    default: cuda_note(be, "attention_bwd", "no tensor-core kernel for this head dim");
    }
}

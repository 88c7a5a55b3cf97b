/* moekit CUDA backend: causal grouped-query attention, forward and backward,
 * flash style: scores live one 32-key tile at a time in registers, with an
 * online softmax; no T x T matrix exists. One warp owns one query row (or,
 * for dK/dV, one key row); a block's 8 warps share K/V (or Q/dO) tiles in
 * shared memory. Layouts as the CPU reference: q, out [B, T, NH, HD];
 * k, v [B, T, NKV, HD]; lse [B, NH, T]. HD <= 256.
 * Packed rows (moe_segments): with pos, query t sees keys t - pos[t] .. t,
 * its own sequence's (positions restart at 0 where a sequence starts). cuDNN
 * takes them as a [B, 1, T, T] score bias of 0 / -inf (segment_bias) while
 * that fits SEGMENT_BIAS_MAX_BYTES; else, or where cuDNN refuses the graph,
 * these SIMT kernels do (the tensor-core kernels do not take them). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_reduce.cuh"

#define WARPS 8
#define TILE 32
#define MAXR 8 /* HD / 32 rounded up, at most */


/* the tensor-core kernels for the head dims they take: mma.sync (cuda_attention_mma.cu)
 * first, then WMMA (cuda_attention_tc.cu) */
int cuda_attention_mma_supported(int HD);
void cuda_attention_mma_fwd(moe_backend *be, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                            const bf16 *v, int B, int T, int NH, int NKV, int HD);
void cuda_attention_mma_bwd(moe_backend *be, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                            const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                            const float *D, int B, int T, int NH, int NKV, int HD);
int cuda_attention_tc_supported(int HD);

/* cuDNN's fused flash attention first (where cuDNN loads and takes the shape), then
 * moekit's kernels: mma.sync, WMMA, SIMT. runtime.attention=mma|wmma|simt starts the
 * search lower (to test and time the fallbacks against the default); read at each call,
 * so a test can switch between cases (set_run_opts) */
static moe_rt_attention attention_family(moe_backend *be, int HD)
{
    moe_rt_attention want = CTX(be)->attention;
    if (want <= MOE_RT_ATTN_MMA && cuda_attention_mma_supported(HD))
        return MOE_RT_ATTN_MMA;
    if (want != MOE_RT_ATTN_SIMT && cuda_attention_tc_supported(HD))
        return MOE_RT_ATTN_WMMA;
    return MOE_RT_ATTN_SIMT;
}
void cuda_attention_tc_fwd(moe_backend *be, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                           const bf16 *v, int B, int T, int NH, int NKV, int HD);
void cuda_attention_tc_bwd(moe_backend *be, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                           const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                           const float *D, int B, int T, int NH, int NKV, int HD);

/* the largest score bias cuDNN is given for packed rows: 256 MiB is B x T^2
 * = 2^27 bf16 values (one row of 11,585 tokens, or two of 8,192) */
#define SEGMENT_BIAS_MAX_BYTES ((size_t)256 << 20)

/* bias[b, 0, i, j] = 0 where key j is in query i's sequence or after i (the
 * causal mask takes those), -inf before its sequence's first token */
__global__ void segment_bias_kernel(bf16 *bias, const int32_t *pos, int T, size_t n)
{
    for (size_t x = blockIdx.x * (size_t)blockDim.x + threadIdx.x; x < n;
         x += (size_t)gridDim.x * blockDim.x) {
        size_t j = x % T, bi = x / T, i = bi % T, b = bi / T;
        int first = (int)i - pos[b * T + i];
        bias[x] = __float2bfloat16((int)j < first ? -INFINITY : 0.f);
    }
}

/* the score bias of these packed rows in its scratch, or NULL (too large, or
 * the scratch could not be had: the SIMT kernels then take the rows) */
static const bf16 *segment_bias(moe_backend *be, const moe_segments *seg, int B, int T)
{
    size_t n = (size_t)B * T * T;
    if (n * sizeof(bf16) > SEGMENT_BIAS_MAX_BYTES)
        return NULL;
    bf16 *bias = (bf16 *)cuda_scratch(be, CUDA_SCRATCH_SEGMENT_BIAS, n * sizeof(bf16));
    if (!bias)
        return NULL;
    segment_bias_kernel<<<cuda_blocks(n, 256) < 65536 ? cuda_blocks(n, 256) : 65536, 256, 0,
                          CTX(be)->stream>>>(bias, seg->pos, T, n);
    LAUNCHED(be, "segment_bias");
    return bias;
}

static size_t attn_smem(int HD) { return sizeof(float) * ((size_t)WARPS * HD * 2 + (size_t)TILE * (HD + 1) * 2); }

/* the first key query t of row b sees: its sequence's first token */
__device__ __forceinline__ int first_key(const int32_t *pos, int b, int T, int t)
{
    return pos && t < T ? t - pos[(size_t)b * T + t] : 0;
}

__global__ void attn_fwd_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                int T, int NH, int NKV, int HD, float scale, const int32_t *pos)
{
    extern __shared__ float sm[];
    float *q_s = sm;                              /* [WARPS][HD] */
    float *k_s = q_s + WARPS * HD * 2;            /* [TILE][HD+1] */
    float *v_s = k_s + TILE * (HD + 1);           /* [TILE][HD+1] */
    int b = blockIdx.z, h = blockIdx.y, kh = h / (NH / NKV);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int t = blockIdx.x * WARPS + w;
    int t_last = min(T - 1, (int)blockIdx.x * WARPS + WARPS - 1);
    int lo = first_key(pos, b, T, t);
    if (t < T)
        for (int d = lane; d < HD; d += 32)
            q_s[w * HD + d] = __bfloat162float(q[(((size_t)b * T + t) * NH + h) * HD + d]) * scale;
    float m = -INFINITY, l = 0, o[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; r++)
        o[r] = 0;
    for (int s0 = 0; s0 <= t_last; s0 += TILE) {
        __syncthreads();
        for (int i = threadIdx.x; i < TILE * HD; i += blockDim.x) {
            int j = i / HD, d = i % HD, s = s0 + j;
            float kv = 0, vv = 0;
            if (s < T) {
                size_t idx = (((size_t)b * T + s) * NKV + kh) * HD + d;
                kv = __bfloat162float(k[idx]);
                vv = __bfloat162float(v[idx]);
            }
            k_s[j * (HD + 1) + d] = kv;
            v_s[j * (HD + 1) + d] = vv;
        }
        __syncthreads();
        if (t >= T || s0 > t || s0 + TILE <= lo)
            continue;
        int s = s0 + lane;
        float sc = -INFINITY;
        if (s >= lo && s <= t) {
            sc = 0;
            for (int d = 0; d < HD; d++)
                sc += q_s[w * HD + d] * k_s[lane * (HD + 1) + d];
        }
        float m_new = fmaxf(m, warp_max(sc));
        float p = s >= lo && s <= t ? __expf(sc - m_new) : 0.f;
        float corr = m == -INFINITY ? 0.f : __expf(m - m_new);
        l = l * corr + warp_sum(p);
        int n = min(TILE, t - s0 + 1);
#pragma unroll
        for (int r = 0; r < MAXR; r++)
            o[r] *= corr;
        for (int j = 0; j < n; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
            for (int r = 0; r < MAXR; r++) {
                int d = lane + 32 * r;
                if (d < HD)
                    o[r] += pj * v_s[j * (HD + 1) + d];
            }
        }
        m = m_new;
    }
    if (t >= T)
        return;
    float inv = 1.f / l;
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HD)
            out[(((size_t)b * T + t) * NH + h) * HD + d] = __float2bfloat16(o[r] * inv);
    }
    if (lane == 0)
        lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

static void attention_fwd(moe_backend *be, act *out, real *lse, const act *q, const act *k,
                          const act *v, int B, int T, int NH, int NKV, int HD,
                          const moe_segments *seg)
{
    if (HD > 32 * MAXR) {
        cuda_note(be, "attention_fwd", "head_dim above 256 is not supported");
        return;
    }
    /* packed rows: cuDNN with a score bias, else the SIMT kernels */
    moe_rt_attention want = CTX(be)->attention;
    moe_rt_attention fam = seg ? MOE_RT_ATTN_SIMT : attention_family(be, HD);
    const bf16 *bias = seg && want == MOE_RT_ATTN_CUDNN ? segment_bias(be, seg, B, T) : NULL;
    if (want == MOE_RT_ATTN_CUDNN && (!seg || bias) &&
        !cuda_attention_cudnn_fwd(be, (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                                  (const bf16 *)v, B, T, NH, NKV, HD, bias))
        return;
    if (fam == MOE_RT_ATTN_MMA) {
        cuda_attention_mma_fwd(be, (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                               (const bf16 *)v, B, T, NH, NKV, HD);
        return;
    }
    if (fam == MOE_RT_ATTN_WMMA) {
        cuda_attention_tc_fwd(be, (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                              (const bf16 *)v, B, T, NH, NKV, HD);
        return;
    }
    size_t smem = attn_smem(HD);
    cudaFuncSetAttribute(attn_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 grid((T + WARPS - 1) / WARPS, NH, B);
    attn_fwd_kernel<<<grid, WARPS * 32, smem, CTX(be)->stream>>>(
        (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, T, NH, NKV, HD,
        (float)(1.0 / sqrt((double)HD)), seg ? seg->pos : NULL);
    LAUNCHED(be, "attention_fwd");
}

/* D[b,h,t] = dout . out, the softmax backward's row term */
__global__ void attn_delta_kernel(float *D, const bf16 *dout, const bf16 *out, int T, int NH, int HD,
                                  size_t rows)
{
    size_t row = blockIdx.x * (size_t)WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const bf16 *a = dout + row * HD, *c = out + row * HD;
    float s = 0;
    for (int d = lane; d < HD; d += 32)
        s += __bfloat162float(a[d]) * __bfloat162float(c[d]);
    s = warp_sum(s);
    /* row = (b*T + t)*NH + h -> D index (b*NH + h)*T + t */
    size_t h = row % NH, bt = row / NH, t = bt % T, b = bt / T;
    if (lane == 0)
        D[(b * NH + h) * T + t] = s;
}

/* dQ: a warp per query, over key tiles (like the forward) */
__global__ void attn_dq_kernel(bf16 *dq, const bf16 *q, const bf16 *k, const bf16 *v,
                               const bf16 *dout, const float *lse, const float *D, int T, int NH,
                               int NKV, int HD, float scale, const int32_t *pos)
{
    extern __shared__ float sm[];
    float *q_s = sm, *do_s = sm + WARPS * HD;
    float *k_s = sm + WARPS * HD * 2, *v_s = k_s + TILE * (HD + 1);
    int b = blockIdx.z, h = blockIdx.y, kh = h / (NH / NKV);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int t = blockIdx.x * WARPS + w;
    int t_last = min(T - 1, (int)blockIdx.x * WARPS + WARPS - 1);
    size_t qrow = (((size_t)b * T + t) * NH + h) * HD;
    int lo = first_key(pos, b, T, t);
    float L = 0, Dt = 0;
    if (t < T) {
        for (int d = lane; d < HD; d += 32) {
            q_s[w * HD + d] = __bfloat162float(q[qrow + d]) * scale;
            do_s[w * HD + d] = __bfloat162float(dout[qrow + d]);
        }
        L = lse[((size_t)b * NH + h) * T + t];
        Dt = D[((size_t)b * NH + h) * T + t];
    }
    float g[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; r++)
        g[r] = 0;
    for (int s0 = 0; s0 <= t_last; s0 += TILE) {
        __syncthreads();
        for (int i = threadIdx.x; i < TILE * HD; i += blockDim.x) {
            int j = i / HD, d = i % HD, s = s0 + j;
            float kv = 0, vv = 0;
            if (s < T) {
                size_t idx = (((size_t)b * T + s) * NKV + kh) * HD + d;
                kv = __bfloat162float(k[idx]);
                vv = __bfloat162float(v[idx]);
            }
            k_s[j * (HD + 1) + d] = kv;
            v_s[j * (HD + 1) + d] = vv;
        }
        __syncthreads();
        if (t >= T || s0 > t || s0 + TILE <= lo)
            continue;
        int s = s0 + lane;
        float ds = 0;
        if (s >= lo && s <= t) {
            float sc = 0, dp = 0;
            for (int d = 0; d < HD; d++) {
                sc += q_s[w * HD + d] * k_s[lane * (HD + 1) + d];
                dp += do_s[w * HD + d] * v_s[lane * (HD + 1) + d];
            }
            float p = __expf(sc - L);
            ds = p * (dp - Dt);
        }
        int n = min(TILE, t - s0 + 1);
        for (int j = 0; j < n; j++) {
            float dj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
            for (int r = 0; r < MAXR; r++) {
                int d = lane + 32 * r;
                if (d < HD)
                    g[r] += dj * k_s[j * (HD + 1) + d];
            }
        }
    }
    if (t >= T)
        return;
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HD)
            dq[qrow + d] = __float2bfloat16(g[r] * scale);
    }
}

/* dK, dV: a warp per key, over query tiles of every query head of its group */
__global__ void attn_dkv_kernel(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                                const bf16 *dout, const float *lse, const float *D, int T, int NH,
                                int NKV, int HD, float scale, const int32_t *pos)
{
    extern __shared__ float sm[];
    float *k_s = sm, *v_s = sm + WARPS * HD;                       /* this block's keys */
    float *q_s = sm + WARPS * HD * 2, *do_s = q_s + TILE * (HD + 1); /* a query tile */
    __shared__ float L_s[TILE], D_s[TILE];
    int b = blockIdx.z, kh = blockIdx.y, group = NH / NKV;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int s = blockIdx.x * WARPS + w;
    int s_first = blockIdx.x * WARPS;
    size_t krow = (((size_t)b * T + s) * NKV + kh) * HD;
    if (s < T)
        for (int d = lane; d < HD; d += 32) {
            k_s[w * HD + d] = __bfloat162float(k[krow + d]);
            v_s[w * HD + d] = __bfloat162float(v[krow + d]);
        }
    float gk[MAXR], gv[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; r++)
        gk[r] = gv[r] = 0;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int t0 = s_first; t0 < T; t0 += TILE) {
            __syncthreads();
            for (int i = threadIdx.x; i < TILE * HD; i += blockDim.x) {
                int j = i / HD, d = i % HD, t = t0 + j;
                float qv = 0, dv_ = 0;
                if (t < T) {
                    size_t idx = (((size_t)b * T + t) * NH + h) * HD + d;
                    qv = __bfloat162float(q[idx]) * scale;
                    dv_ = __bfloat162float(dout[idx]);
                }
                q_s[j * (HD + 1) + d] = qv;
                do_s[j * (HD + 1) + d] = dv_;
            }
            if (threadIdx.x < TILE) {
                int t = t0 + threadIdx.x;
                L_s[threadIdx.x] = t < T ? lse[((size_t)b * NH + h) * T + t] : 0.f;
                D_s[threadIdx.x] = t < T ? D[((size_t)b * NH + h) * T + t] : 0.f;
            }
            __syncthreads();
            if (s >= T)
                continue;
            int t = t0 + lane;
            float p = 0, ds = 0;
            if (t < T && t >= s && first_key(pos, b, T, t) <= s) {
                float sc = 0, dp = 0;
                for (int d = 0; d < HD; d++) {
                    sc += q_s[lane * (HD + 1) + d] * k_s[w * HD + d];
                    dp += do_s[lane * (HD + 1) + d] * v_s[w * HD + d];
                }
                p = __expf(sc - L_s[lane]);
                ds = p * (dp - D_s[lane]);
            }
            for (int j = 0; j < TILE; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j), dj = __shfl_sync(0xffffffffu, ds, j);
                if (pj == 0.f && dj == 0.f)
                    continue; /* masked (or exactly zero) rows add nothing */
#pragma unroll
                for (int r = 0; r < MAXR; r++) {
                    int d = lane + 32 * r;
                    if (d < HD) {
                        gv[r] += pj * do_s[j * (HD + 1) + d];
                        gk[r] += dj * q_s[j * (HD + 1) + d];
                    }
                }
            }
        }
    }
    if (s >= T)
        return;
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        int d = lane + 32 * r;
        if (d < HD) {
            /* q_s holds scale * q, which is exactly d score / d k */
            dk[krow + d] = __float2bfloat16(gk[r]);
            dv[krow + d] = __float2bfloat16(gv[r]);
        }
    }
}

static void attention_bwd(moe_backend *be, act *dq, act *dk, act *dv, const act *dout,
                          const act *q, const act *k, const act *v, const act *out,
                          const real *lse, int B, int T, int NH, int NKV, int HD,
                          const moe_segments *seg)
{
    if (HD > 32 * MAXR) {
        cuda_note(be, "attention_bwd", "head_dim above 256 is not supported");
        return;
    }
    moe_rt_attention want = CTX(be)->attention;
    moe_rt_attention fam = seg ? MOE_RT_ATTN_SIMT : attention_family(be, HD);
    /* the forward's bias again (its scratch may have been taken since) */
    const bf16 *bias = seg && want == MOE_RT_ATTN_CUDNN ? segment_bias(be, seg, B, T) : NULL;
    if (want == MOE_RT_ATTN_CUDNN && (!seg || bias) &&
        !cuda_attention_cudnn_bwd(be, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout,
                                  (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
                                  (const bf16 *)out, lse, B, T, NH, NKV, HD, bias))
        return;
    cudaStream_t st = CTX(be)->stream;
    size_t rows = (size_t)B * T * NH;
    float *D = (float *)cuda_scratch(be, 2, cuda_attn_delta_bytes((size_t)B, (size_t)T, (size_t)NH));
    if (!D)
        return;
    float scale = (float)(1.0 / sqrt((double)HD));
    attn_delta_kernel<<<cuda_blocks(rows, WARPS), WARPS * 32, 0, st>>>(
        D, (const bf16 *)dout, (const bf16 *)out, T, NH, HD, rows);
    if (fam == MOE_RT_ATTN_MMA) {
        cuda_attention_mma_bwd(be, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout,
                               (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, lse, D, B, T,
                               NH, NKV, HD);
        return;
    }
    if (fam == MOE_RT_ATTN_WMMA) {
        cuda_attention_tc_bwd(be, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout,
                              (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, lse, D, B, T, NH,
                              NKV, HD);
        return;
    }
    size_t smem = attn_smem(HD);
    cudaFuncSetAttribute(attn_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute(attn_dkv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 gq((T + WARPS - 1) / WARPS, NH, B), gk((T + WARPS - 1) / WARPS, NKV, B);
    attn_dq_kernel<<<gq, WARPS * 32, smem, st>>>((bf16 *)dq, (const bf16 *)q, (const bf16 *)k,
                                                 (const bf16 *)v, (const bf16 *)dout, lse, D, T,
                                                 NH, NKV, HD, scale, seg ? seg->pos : NULL);
    attn_dkv_kernel<<<gk, WARPS * 32, smem, st>>>((bf16 *)dk, (bf16 *)dv, (const bf16 *)q,
                                                  (const bf16 *)k, (const bf16 *)v,
                                                  (const bf16 *)dout, lse, D, T, NH, NKV, HD,
                                                  scale, seg ? seg->pos : NULL);
    LAUNCHED(be, "attention_bwd");
}

void cuda_fill_attention_ops(moe_backend *be)
{
    be->attention_fwd = attention_fwd;
    be->attention_bwd = attention_bwd;
}

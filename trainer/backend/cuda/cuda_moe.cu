/* moekit CUDA backend: router, dispatch plan, grouped expert FFN, combine.
 *
 * The expert FFN is a loop of cuBLAS GEMMs over the local experts, sized by
 * the per-expert counts that route_plan copies to the host once per layer
 * (measured faster on the H200 than cuBLAS's grouped-batched GEMM). The
 * SwiGLU applies the router probability before the down projection; it and
 * the down projection, and the whole backward, take an expert's rows
 * runtime.expert_chunk_rows at a time, so their [rows, I] buffers are a
 * chunk's (scratch) however long the sequence and however the router
 * spreads it. The router's statistics are added in a fixed order: the same
 * bits every run. */
#include <math.h>
#include <string.h>

#include "../../lowp/fp8_blk_device.cuh"
#include "../../lowp/fp8_scalar.h"
#include "../route_plan.h"
#include "cuda_internal.h"
#include "cuda_reduce.cuh"

#define B16(p) ((bf16 *)(p))
#define CB16(p) ((const bf16 *)(p))
#define MAX_E 256

/* ---- router ---- */

/* probs holds the fp32 logits on entry; softmax, top-k, renormalise */
__global__ void router_softmax_topk_kernel(float *probs, int32_t *topk_idx, float *topk_w,
                                           int N, int E, int K)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N)
        return;
    float *p = probs + (size_t)n * E;
    float mx = p[0];
    for (int e = 1; e < E; e++)
        mx = fmaxf(mx, p[e]);
    float sum = 0;
    for (int e = 0; e < E; e++) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    float inv = 1.f / sum;
    for (int e = 0; e < E; e++)
        p[e] *= inv;
    unsigned long long taken[MAX_E / 64] = {0};
    float wsum = 0;
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!(taken[e >> 6] >> (e & 63) & 1) && (best < 0 || p[e] > p[best]))
                best = e;
        taken[best >> 6] |= 1ull << (best & 63);
        topk_idx[(size_t)n * K + j] = best;
        topk_w[(size_t)n * K + j] = p[best];
        wsum += p[best];
    }
    for (int j = 0; j < K; j++)
        topk_w[(size_t)n * K + j] /= wsum;
}

/* prob_sum[e] = sum over tokens of probs[n, e], a block per expert adding
 * in a fixed order (the same bits every run, which atomics would not give) */
__global__ void router_prob_sum_kernel(float *prob_sum, const float *probs, int N, int E)
{
    __shared__ float part[CUDA_THREADS];
    const int e = blockIdx.x;
    float s = 0;
    for (int n = threadIdx.x; n < N; n += blockDim.x)
        s += probs[(size_t)n * E + e];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        prob_sum[e] = part[0];
}

static void router_fwd(moe_backend *be, real *probs, int32_t *topk_idx, real *topk_w,
                       real *prob_sum, const act *x, const act *wg, int N, int C, int E, int K)
{
    if (E > MAX_E) {
        cuda_note(be, "router_fwd", "more than 256 experts are not supported");
        return;
    }
    cuda_gemm_xwT(be, probs, 1, CB16(x), CB16(wg), N, C, E, 0.f);
    router_softmax_topk_kernel<<<cuda_blocks(N, 128), 128, 0, CTX(be)->stream>>>(
        probs, topk_idx, topk_w, N, E, K);
    router_prob_sum_kernel<<<E, CUDA_THREADS, 0, CTX(be)->stream>>>(prob_sum, probs, N, E);
    LAUNCHED(be, "router_fwd");
}

/* The plan is built on the host from the routed indices, stable in token
 * order like the CPU reference: one small copy each way per layer. */
static int route_plan(moe_backend *be, moe_route_plan *plan, const int32_t *topk_idx, int N, int K,
                      int E, moe_err *e)
{
    cuda_ctx *c = CTX(be);
    size_t nk = (size_t)N * K;
    if (c->h_cap < nk) {
        cudaFreeHost(c->h_idx);
        cudaFreeHost(c->h_rows);
        cudaFreeHost(c->h_slots);
        c->h_idx = c->h_rows = c->h_slots = NULL;
        if (cudaMallocHost(&c->h_idx, nk * 4) != cudaSuccess ||
            cudaMallocHost(&c->h_rows, nk * 4) != cudaSuccess ||
            cudaMallocHost(&c->h_slots, nk * 4) != cudaSuccess) {
            c->h_cap = 0;
            return moe_errf(e, "cuda route plan: cannot allocate %zu pinned entries", nk);
        }
        c->h_cap = nk;
    }
    CU(be, "route_plan", cuda_to_host(be, c->h_idx, topk_idx, nk * 4, "route counts"));
    if (cuda_check(be, e))
        return -1;
    if (route_plan_build(c->h_idx, N, K, E, plan->expert_count, plan->expert_offset, c->h_rows,
                         c->h_slots, e))
        return -1;
    const int64_t *off = plan->expert_offset;
    int32_t off32[MAX_E + 1];
    for (int x = 0; x <= E; x++)
        off32[x] = (int32_t)off[x];
    CU(be, "route_plan",
       cuda_from_host(be, plan->row_token, c->h_rows, nk * 4));
    CU(be, "route_plan",
       cuda_from_host(be, plan->slot_row, c->h_slots, nk * 4));
    CU(be, "route_plan", cuda_from_host(be, plan->expert_offset_dev, off32,
                                        sizeof(int32_t) * (E + 1)));
    plan->n_tokens = N;
    plan->top_k = K;
    plan->n_experts = E;
    plan->n_rows = (int)nk;
    return cuda_check(be, e);
}

__global__ void permute_kernel(bf16 *x_perm, float *p_perm, const bf16 *x, const float *topk_w,
                               const int32_t *slot_row, int K, int C)
{
    int i = blockIdx.x; /* (token, slot) */
    int row = slot_row[i];
    const bf16 *src = x + (size_t)(i / K) * C;
    bf16 *dst = x_perm + (size_t)row * C;
    if (rows_vec8(C, src, dst, src, dst))
        copy_row8((bf16x8 *)dst, (const bf16x8 *)src, C / 8);
    else
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            dst[c] = src[c];
    if (threadIdx.x == 0)
        p_perm[row] = topk_w[i];
}

static void permute(moe_backend *be, act *x_perm, real *p_perm, const act *x, const real *topk_w,
                    const moe_route_plan *plan, int C)
{
    int nk = plan->n_tokens * plan->top_k;
    if (nk == 0)
        return;
    permute_kernel<<<nk, 128, 0, CTX(be)->stream>>>(B16(x_perm), p_perm, CB16(x), topk_w,
                                                    plan->slot_row, plan->top_k, C);
    LAUNCHED(be, "permute");
}

/* ---- SwiGLU x probability ---- */

__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + __expf(-x)); }

/* The SwiGLU kernels are memory-bound: a block per row (its probability read
 * once), eight bf16 a load where the row allows (I a multiple of 8 and the
 * buffers 16-byte aligned: every real model), one at a time otherwise. */

__device__ __forceinline__ float swiglu_prob_elem(float g, float u, float p) { return p * (g * sigm(g)) * u; }

/* Reading h1 / h3 (cuda_swiglu_in): bf16, or fp8_block's E4M3 codes with
 * their row's 1x128 scale, each value rounded to bf16 (what a dequantiser
 * would have written; no bf16 copy is made). Eight at a time needs rows of
 * multiples of 8 and 16-byte aligned bf16 / 8-byte aligned codes. */
__device__ __forceinline__ int swiglu_in_vec8(cuda_swiglu_in v, int I)
{
    return I % 8 == 0 && (v.q ? ((uintptr_t)v.q & 7) == 0 : ((uintptr_t)v.h & 15) == 0);
}

__device__ __forceinline__ bf16 bf16_from_bits(uint16_t b)
{
    __nv_bfloat16_raw r;
    r.x = b;
    return bf16(r);
}

__device__ __forceinline__ bf16x8 swiglu_in_load8(cuda_swiglu_in v, size_t row, int I, int i)
{
    if (!v.q)
        return ((const bf16x8 *)(v.h + row * I))[i];
    const float s = v.s[(size_t)(i >> 4) * v.ld + row]; /* 16 groups of 8 in a 128-block */
    const uint2 w = *(const uint2 *)(v.q + row * I + (size_t)i * 8);
    bf16x8 o;
    for (int k = 0; k < 4; k++) {
        const uint32_t word = k < 2 ? w.x : w.y, sh = (k & 1) * 16;
        o.v[k] = __halves2bfloat162(
            bf16_from_bits(lowp_f32_to_bf16(lowp_fp8blk_dequant((uint8_t)(word >> sh), s))),
            bf16_from_bits(lowp_f32_to_bf16(lowp_fp8blk_dequant((uint8_t)(word >> (sh + 8)), s))));
    }
    return o;
}

__device__ __forceinline__ float swiglu_in_load1(cuda_swiglu_in v, size_t row, int I, int i)
{
    if (!v.q)
        return __bfloat162float(v.h[row * I + i]);
    const float s = v.s[(size_t)(i / 128) * v.ld + row];
    return lowp_bf16_to_f32(lowp_f32_to_bf16(lowp_fp8blk_dequant(v.q[row * I + i], s)));
}

__global__ void swiglu_prob_kernel(bf16 *a, const cuda_swiglu_in h1, const cuda_swiglu_in h3,
                                   const float *p_perm, int I)
{
    const size_t row = blockIdx.x, base = row * I;
    float p = p_perm[row];
    if (rows_vec8(I, a, a, a, a) && swiglu_in_vec8(h1, I) && swiglu_in_vec8(h3, I)) {
        bf16x8 *a8 = (bf16x8 *)(a + base);
        for (int i = threadIdx.x; i < I / 8; i += blockDim.x) {
            bf16x8 g = swiglu_in_load8(h1, row, I, i), u = swiglu_in_load8(h3, row, I, i), o;
            for (int k = 0; k < 4; k++) {
                float2 gf = __bfloat1622float2(g.v[k]), uf = __bfloat1622float2(u.v[k]);
                o.v[k] = __floats2bfloat162_rn(swiglu_prob_elem(gf.x, uf.x, p),
                                               swiglu_prob_elem(gf.y, uf.y, p));
            }
            a8[i] = o;
        }
        return;
    }
    for (int i = threadIdx.x; i < I; i += blockDim.x)
        a[base + i] = __float2bfloat16(swiglu_prob_elem(swiglu_in_load1(h1, row, I, i),
                                                        swiglu_in_load1(h3, row, I, i), p));
}

void cuda_swiglu_prob_in(moe_backend *be, bf16 *a, cuda_swiglu_in h1, cuda_swiglu_in h3,
                         const float *p, size_t rows, int I)
{
    if (rows == 0 || I == 0)
        return;
    swiglu_prob_kernel<<<(unsigned)rows, CUDA_THREADS, 0, CTX(be)->stream>>>(a, h1, h3, p, I);
    LAUNCHED(be, "swiglu_prob");
}

/* The 1x128 E4M3 codes of this lane's eight values v of a 128-block that
 * sixteen consecutive lanes hold (i: the group of eight in the row); the
 * block's first lane writes its scale. Every lane of the warp must call it. */
__device__ __forceinline__ void save_e4m3_8(const cuda_fp8_save o, size_t row, int I, int i,
                                            const bf16x8 v)
{
    const uint32_t *w = (const uint32_t *)&v;
    uint32_t am = 0;
    for (int k = 0; k < 4; k++)
        am = max(am, max(w[k] & 0x7FFFu, (w[k] >> 16) & 0x7FFFu));
    am = lanes_umax_down<16>(am);
    const blk_scale b = blk_scale_of(am << 16);
    *(uint2 *)(o.q + row * I + (size_t)i * 8) =
        make_uint2(blk_quant4(w[0], w[1], b), blk_quant4(w[2], w[3], b));
    if ((i & 15) == 0)
        o.s[(size_t)(i >> 4) * o.ld + row] = b.s0;
}

/* swiglu_prob_kernel's vector path, quantising h1 and h3 on the way (I a
 * multiple of 256: a warp's lanes are all in or all out of an iteration) */
__global__ void swiglu_prob_save8_kernel(bf16 *a, const bf16 *h1, const bf16 *h3,
                                         const float *p_perm, int I, cuda_fp8_save s1,
                                         cuda_fp8_save s3)
{
    const size_t row = blockIdx.x, base = row * I;
    const float p = p_perm[row];
    const bf16x8 *g8 = (const bf16x8 *)(h1 + base), *u8 = (const bf16x8 *)(h3 + base);
    bf16x8 *a8 = (bf16x8 *)(a + base);
    for (int i = threadIdx.x; i < I / 8; i += blockDim.x) {
        bf16x8 g = g8[i], u = u8[i], o;
        for (int k = 0; k < 4; k++) {
            float2 gf = __bfloat1622float2(g.v[k]), uf = __bfloat1622float2(u.v[k]);
            o.v[k] = __floats2bfloat162_rn(swiglu_prob_elem(gf.x, uf.x, p),
                                           swiglu_prob_elem(gf.y, uf.y, p));
        }
        a8[i] = o;
        save_e4m3_8(s1, row, I, i, g);
        save_e4m3_8(s3, row, I, i, u);
    }
}

int cuda_swiglu_prob_save8(moe_backend *be, bf16 *a, const bf16 *h1, const bf16 *h3,
                           const float *p, size_t rows, int I, cuda_fp8_save s1, cuda_fp8_save s3)
{
    if (rows == 0 || I == 0)
        return 0;
    if (I % 256 || ((uintptr_t)a | (uintptr_t)h1 | (uintptr_t)h3) & 15 ||
        ((uintptr_t)s1.q | (uintptr_t)s3.q) & 7 || ((uintptr_t)s1.s | (uintptr_t)s3.s) & 3)
        return 1;
    swiglu_prob_save8_kernel<<<(unsigned)rows, CUDA_THREADS, 0, CTX(be)->stream>>>(a, h1, h3, p,
                                                                                  I, s1, s3);
    LAUNCHED(be, "swiglu_prob (with h kept in E4M3)");
    return 0;
}

void cuda_swiglu_prob(moe_backend *be, bf16 *a, const bf16 *h1, const bf16 *h3, const float *p,
                      size_t rows, int I)
{
    cuda_swiglu_in g = {h1, NULL, NULL, 0}, u = {h3, NULL, NULL, 0};
    cuda_swiglu_prob_in(be, a, g, u, p, rows, I);
}

static void experts_fwd(moe_backend *be, act *y_perm, act *h1, act *h3, act *a, const act *x_perm,
                        const real *p_perm, const act *w1, const act *w3, const act *w2,
                        const moe_route_plan *plan, int C, int I)
{
    if (CTX(be)->expert_recipe->gemms == MOE_GEMMS_E4M3) {
        cuda_experts_fwd_fp8(be, y_perm, h1, h3, a, x_perm, p_perm, w1, w3, w2, plan, C, I);
        return;
    }
    if (CTX(be)->expert_recipe->gemms == MOE_GEMMS_E4M3_EMULATED) {
        cuda_experts_fwd_mxemu(be, y_perm, h1, h3, a, x_perm, p_perm, w1, w3, w2, plan, C, I);
        return;
    }
    (void)a; /* the model gives none (cuda_expert_swiglu_rows): a chunk of it lives in scratch */
    for (int x = 0; x < plan->n_experts; x++) {
        int64_t r0 = plan->expert_offset[x], rows = plan->expert_count[x];
        if (rows == 0)
            continue; /* an idle expert costs nothing */
        const bf16 *X = CB16(x_perm) + r0 * C;
        cuda_gemm_xwT(be, B16(h1) + r0 * I, 0, X, CB16(w1) + (size_t)x * I * C, (int)rows, C, I, 0.f);
        cuda_gemm_xwT(be, B16(h3) + r0 * I, 0, X, CB16(w3) + (size_t)x * I * C, (int)rows, C, I, 0.f);
    }
    /* the SwiGLU output a chunk at a time, straight into the down projection */
    bf16 *A = cuda_expert_swiglu_scratch(be, plan, I);
    if (!A)
        return;
    const int64_t ch = CTX(be)->expert_chunk_rows;
    for (int x = 0; x < plan->n_experts; x++)
        for (int64_t c0 = 0; c0 < plan->expert_count[x]; c0 += ch) {
            const int64_t r0 = plan->expert_offset[x] + c0;
            const int rows = (int)cuda_chunk_len(plan->expert_count[x], c0, ch);
            cuda_swiglu_prob(be, A, CB16(h1) + r0 * I, CB16(h3) + r0 * I, p_perm + r0, (size_t)rows, I);
            cuda_gemm_xwT(be, B16(y_perm) + r0 * C, 0, A, CB16(w2) + (size_t)x * C * I, rows, I, C,
                          0.f);
        }
}

__global__ void combine_kernel(bf16 *out, const bf16 *y_perm, const int32_t *slot_row, int K, int C)
{
    int t = blockIdx.x;
    if (rows_vec8(C, y_perm, out, y_perm, out)) {
        for (int c = threadIdx.x; c < C / 8; c += blockDim.x) {
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, f[8];
            for (int j = 0; j < K; j++) {
                bf16x8_unpack(((const bf16x8 *)(y_perm + (size_t)slot_row[t * K + j] * C))[c], f);
#pragma unroll
                for (int k = 0; k < 8; k++)
                    s[k] += f[k];
            }
            ((bf16x8 *)(out + (size_t)t * C))[c] = bf16x8_pack(s);
        }
        return;
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0;
        for (int j = 0; j < K; j++)
            s += __bfloat162float(y_perm[(size_t)slot_row[t * K + j] * C + c]);
        out[(size_t)t * C + c] = __float2bfloat16(s);
    }
}

static void combine(moe_backend *be, act *out, const act *y_perm, const moe_route_plan *plan, int C)
{
    if (plan->n_tokens == 0)
        return;
    combine_kernel<<<plan->n_tokens, 128, 0, CTX(be)->stream>>>(B16(out), CB16(y_perm),
                                                                plan->slot_row, plan->top_k, C);
    LAUNCHED(be, "combine");
}

__global__ void combine_bwd_kernel(bf16 *dy_perm, const bf16 *dout, const int32_t *row_token, int C)
{
    int row = blockIdx.x;
    const bf16 *src = dout + (size_t)row_token[row] * C;
    bf16 *dst = dy_perm + (size_t)row * C;
    if (rows_vec8(C, src, dst, src, dst))
        copy_row8((bf16x8 *)dst, (const bf16x8 *)src, C / 8);
    else
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            dst[c] = src[c];
}

static void combine_bwd(moe_backend *be, act *dy_perm, const act *dout, const moe_route_plan *plan,
                        int C)
{
    if (plan->n_rows == 0)
        return;
    combine_bwd_kernel<<<plan->n_rows, 128, 0, CTX(be)->stream>>>(B16(dy_perm), CB16(dout),
                                                                  plan->row_token, C);
    LAUNCHED(be, "combine_bwd");
}

/* per row: dp = sum_i dA * silu(h1) * h3; dh3 = dA p silu(h1); dh1 = dA p h3 silu'(h1) */
__device__ __forceinline__ void swiglu_prob_bwd_elem(float g, float u, float da, float p,
                                                     float *dp, float *dh1, float *dh3)
{
    float s = sigm(g), silu = g * s;
    *dp += da * silu * u;
    *dh3 = da * p * silu;
    *dh1 = da * p * u * (s * (1.f + g * (1.f - s)));
}

/* dh1, dh3 may be h1, h3 (bf16): each element is read before it is written */
__global__ void swiglu_prob_bwd_kernel(bf16 *dh1, bf16 *dh3, float *dp_perm, const bf16 *dA,
                                       const cuda_swiglu_in h1, const cuda_swiglu_in h3,
                                       const float *p_perm, int I)
{
    size_t row = blockIdx.x, base = row * I;
    float p = p_perm[row], dp = 0;
    if (rows_vec8(I, dh1, dh3, dA, dA) && swiglu_in_vec8(h1, I) && swiglu_in_vec8(h3, I)) {
        const bf16x8 *d8 = (const bf16x8 *)(dA + base);
        bf16x8 *o1 = (bf16x8 *)(dh1 + base), *o3 = (bf16x8 *)(dh3 + base);
        for (int i = threadIdx.x; i < I / 8; i += blockDim.x) {
            bf16x8 g = swiglu_in_load8(h1, row, I, i), u = swiglu_in_load8(h3, row, I, i);
            bf16x8 d = d8[i], r1, r3;
            for (int k = 0; k < 4; k++) {
                float2 gf = __bfloat1622float2(g.v[k]), uf = __bfloat1622float2(u.v[k]);
                float2 df = __bfloat1622float2(d.v[k]);
                float a1, a3, b1, b3;
                swiglu_prob_bwd_elem(gf.x, uf.x, df.x, p, &dp, &a1, &a3);
                swiglu_prob_bwd_elem(gf.y, uf.y, df.y, p, &dp, &b1, &b3);
                r1.v[k] = __floats2bfloat162_rn(a1, b1);
                r3.v[k] = __floats2bfloat162_rn(a3, b3);
            }
            o1[i] = r1;
            o3[i] = r3;
        }
    } else {
        for (int i = threadIdx.x; i < I; i += blockDim.x) {
            float d1, d3;
            swiglu_prob_bwd_elem(swiglu_in_load1(h1, row, I, i), swiglu_in_load1(h3, row, I, i),
                                 __bfloat162float(dA[base + i]), p, &dp, &d1, &d3);
            dh3[base + i] = __float2bfloat16(d3);
            dh1[base + i] = __float2bfloat16(d1);
        }
    }
    const float s = block_sum_to_thread0<32>(dp, (int)(blockDim.x >> 5));
    if (threadIdx.x == 0)
        dp_perm[row] = s;
}

void cuda_swiglu_prob_bwd_in(moe_backend *be, bf16 *dh1, bf16 *dh3, float *dp, const bf16 *da,
                             cuda_swiglu_in h1, cuda_swiglu_in h3, const float *p, size_t rows,
                             int I)
{
    if (rows == 0)
        return;
    swiglu_prob_bwd_kernel<<<(unsigned)rows, CUDA_THREADS, 0, CTX(be)->stream>>>(dh1, dh3, dp, da,
                                                                               h1, h3, p, I);
    LAUNCHED(be, "swiglu_prob_bwd");
}

void cuda_swiglu_prob_bwd(moe_backend *be, bf16 *dh1, bf16 *dh3, float *dp, const bf16 *da,
                          const bf16 *h1, const bf16 *h3, const float *p, size_t rows, int I)
{
    cuda_swiglu_in g = {h1, NULL, NULL, 0}, u = {h3, NULL, NULL, 0};
    cuda_swiglu_prob_bwd_in(be, dh1, dh3, dp, da, g, u, p, rows, I);
}

/* The rows the backward's [rows, I] scratch must hold: the busiest expert's,
 * at most one chunk (runtime.expert_chunk_rows) */
size_t cuda_expert_bwd_rows(moe_backend *be, const moe_route_plan *plan)
{
    int64_t most = 0;
    for (int x = 0; x < plan->n_experts; x++)
        most = plan->expert_count[x] > most ? plan->expert_count[x] : most;
    return (size_t)(most < CTX(be)->expert_chunk_rows ? most : CTX(be)->expert_chunk_rows);
}

/* The forward's SwiGLU output, one chunk of the busiest expert's rows: the
 * backward's `a` (the two never overlap). */
bf16 *cuda_expert_swiglu_scratch(moe_backend *be, const moe_route_plan *plan, int I)
{
    size_t rows = cuda_expert_bwd_rows(be, plan);
    return (bf16 *)cuda_scratch(be, 3, cuda_expert_bwd_slot_bytes(rows, I));
}

static size_t cuda_expert_swiglu_rows(moe_backend *be, size_t rows)
{
    (void)be, (void)rows;
    return 0;
}

/* The backward's [rows, I] scratch of every expert path, and a = p silu(h1)
 * h3 recomputed into it rather than kept from the forward. */
int cuda_expert_bwd_alloc(moe_backend *be, cuda_expert_bwd_bufs *b, size_t rows, int I)
{
    size_t bytes = cuda_expert_bwd_slot_bytes(rows, I);
    b->a = (bf16 *)cuda_scratch(be, 3, bytes), b->da = (bf16 *)cuda_scratch(be, 4, bytes);
    b->dh1 = (bf16 *)cuda_scratch(be, 5, bytes), b->dh3 = (bf16 *)cuda_scratch(be, 6, bytes);
    return b->a && b->da && b->dh1 && b->dh3 ? 0 : -1;
}

int cuda_expert_bwd_prepare(moe_backend *be, cuda_expert_bwd_bufs *b, const act *h1,
                            const act *h3, const real *p_perm, size_t rows, int I)
{
    if (cuda_expert_bwd_alloc(be, b, rows, I))
        return -1;
    cuda_swiglu_prob(be, b->a, CB16(h1), CB16(h3), p_perm, rows, I);
    return 0;
}

void cuda_zero_idle_expert_dw(moe_backend *be, float *dw1, float *dw3, float *dw2,
                              const moe_route_plan *plan, int C, int I)
{
    size_t per = (size_t)I * C;
    for (int x = 0; x < plan->n_experts; x++)
        if (plan->expert_count[x] == 0)
            for (int k = 0; k < 3; k++)
                CU(be, "experts_bwd", cudaMemsetAsync((k == 0 ? dw1 : k == 1 ? dw3 : dw2) + x * per, 0,
                                                      sizeof(float) * per, CTX(be)->stream));
}

static void experts_bwd(moe_backend *be, act *dx_perm, real *dp_perm, real *dw1, real *dw3,
                        real *dw2, const act *dy_perm, const act *x_perm, const act *h1,
                        const act *h3, const real *p_perm, const act *w1, const act *w3,
                        const act *w2, const moe_route_plan *plan, int C, int I,
                        int dw_overwrite)
{
    if (dw_overwrite == MOE_DW_OVERWRITE)
        cuda_zero_idle_expert_dw(be, dw1, dw3, dw2, plan, C, I);
    if (CTX(be)->expert_recipe->gemms == MOE_GEMMS_E4M3) {
        cuda_experts_bwd_fp8(be, dx_perm, dp_perm, dw1, dw3, dw2, dy_perm, x_perm, h1, h3, p_perm,
                             w1, w3, w2, plan, C, I, dw_overwrite);
        return;
    }
    if (CTX(be)->expert_recipe->gemms == MOE_GEMMS_E4M3_EMULATED) {
        cuda_experts_bwd_mxemu(be, dx_perm, dp_perm, dw1, dw3, dw2, dy_perm, x_perm, h1, h3,
                               p_perm, w1, w3, w2, plan, C, I, dw_overwrite);
        return;
    }
    /* one expert at a time, its rows expert_chunk_rows at a time: a, da, dh1,
     * dh3 for one chunk only, so the [rows, I] scratch is bounded however the
     * router spreads the tokens; a chunk after an expert's first adds to its dw */
    const float wb = dw_overwrite ? 0.f : 1.f;
    const int64_t ch = CTX(be)->expert_chunk_rows;
    cuda_expert_bwd_bufs b;
    size_t most = cuda_expert_bwd_rows(be, plan);
    if (most == 0 || cuda_expert_bwd_alloc(be, &b, most, I))
        return;
    for (int x = 0; x < plan->n_experts; x++)
        for (int64_t c0 = 0; c0 < plan->expert_count[x]; c0 += ch) {
            const int64_t r0 = plan->expert_offset[x] + c0;
            const int rows = (int)cuda_chunk_len(plan->expert_count[x], c0, ch);
            const float wbc = c0 ? 1.f : wb;
            const bf16 *H1 = CB16(h1) + r0 * I, *H3 = CB16(h3) + r0 * I, *DY = CB16(dy_perm) + r0 * C;
            const float *P = p_perm + r0;
            cuda_swiglu_prob(be, b.a, H1, H3, P, (size_t)rows, I);
            cuda_gemm_dyTx(be, dw2 + (size_t)x * C * I, DY, b.a, rows, I, C, wbc);
            cuda_gemm_dyw(be, b.da, DY, CB16(w2) + (size_t)x * C * I, rows, I, C, 0.f);
            cuda_swiglu_prob_bwd(be, b.dh1, b.dh3, dp_perm + r0, b.da, H1, H3, P, (size_t)rows, I);
            const bf16 *X = CB16(x_perm) + r0 * C;
            cuda_gemm_dyTx(be, dw1 + (size_t)x * I * C, b.dh1, X, rows, C, I, wbc);
            cuda_gemm_dyTx(be, dw3 + (size_t)x * I * C, b.dh3, X, rows, C, I, wbc);
            bf16 *DX = B16(dx_perm) + r0 * C;
            cuda_gemm_dyw(be, DX, b.dh1, CB16(w1) + (size_t)x * I * C, rows, C, I, 0.f);
            cuda_gemm_dyw(be, DX, b.dh3, CB16(w3) + (size_t)x * I * C, rows, C, I, 1.f);
        }
}

__global__ void permute_bwd_kernel(bf16 *dx, float *dtopk_w, const bf16 *dx_perm,
                                   const float *dp_perm, const int32_t *slot_row, int K, int C)
{
    int t = blockIdx.x;
    if (rows_vec8(C, dx_perm, dx, dx_perm, dx)) {
        for (int c = threadIdx.x; c < C / 8; c += blockDim.x) {
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, f[8];
            for (int j = 0; j < K; j++) {
                bf16x8_unpack(((const bf16x8 *)(dx_perm + (size_t)slot_row[t * K + j] * C))[c], f);
#pragma unroll
                for (int k = 0; k < 8; k++)
                    s[k] += f[k];
            }
            ((bf16x8 *)(dx + (size_t)t * C))[c] = bf16x8_pack(s);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float s = 0;
            for (int j = 0; j < K; j++)
                s += __bfloat162float(dx_perm[(size_t)slot_row[t * K + j] * C + c]);
            dx[(size_t)t * C + c] = __float2bfloat16(s);
        }
    }
    if (threadIdx.x < K)
        dtopk_w[t * K + threadIdx.x] = dp_perm[slot_row[t * K + threadIdx.x]];
}

static void permute_bwd(moe_backend *be, act *dx, real *dtopk_w, const act *dx_perm,
                        const real *dp_perm, const moe_route_plan *plan, int C)
{
    if (plan->n_tokens == 0)
        return;
    permute_bwd_kernel<<<plan->n_tokens, 128, 0, CTX(be)->stream>>>(
        B16(dx), dtopk_w, CB16(dx_perm), dp_perm, plan->slot_row, plan->top_k, C);
    LAUNCHED(be, "permute_bwd");
}

__global__ void router_bwd_kernel(bf16 *dlogits, const float *dtopk_w, const float *aux_dprob,
                                  const float *probs, const int32_t *topk_idx, const float *topk_w,
                                  int N, int E, int K)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N)
        return;
    const float *p = probs + (size_t)n * E;
    float dl[MAX_E];
    for (int e = 0; e < E; e++)
        dl[e] = aux_dprob ? aux_dprob[e] : 0.f;
    float S = 0, wdw = 0;
    for (int j = 0; j < K; j++) {
        S += p[topk_idx[(size_t)n * K + j]];
        wdw += topk_w[(size_t)n * K + j] * dtopk_w[(size_t)n * K + j];
    }
    for (int j = 0; j < K; j++)
        dl[topk_idx[(size_t)n * K + j]] += (dtopk_w[(size_t)n * K + j] - wdw) / S;
    float dot = 0;
    for (int e = 0; e < E; e++)
        dot += p[e] * dl[e];
    for (int e = 0; e < E; e++)
        dlogits[(size_t)n * E + e] = __float2bfloat16(p[e] * (dl[e] - dot));
}

static void router_bwd(moe_backend *be, act *dx, real *dwg, const real *dtopk_w,
                       const real *aux_dprob, const act *x, const act *wg, const real *probs,
                       const int32_t *topk_idx, const real *topk_w, int N, int C, int E, int K)
{
    bf16 *dlogits = (bf16 *)cuda_scratch(be, 1, cuda_router_dlogits_bytes((size_t)N, E));
    if (!dlogits)
        return;
    router_bwd_kernel<<<cuda_blocks(N, 128), 128, 0, CTX(be)->stream>>>(
        dlogits, dtopk_w, aux_dprob, probs, topk_idx, topk_w, N, E, K);
    LAUNCHED(be, "router_bwd");
    cuda_gemm_dyw(be, B16(dx), dlogits, CB16(wg), N, C, E, 1.f);
    cuda_gemm_dyTx(be, dwg, dlogits, CB16(x), N, C, E, 1.f);
}

void cuda_fill_moe_ops(moe_backend *be)
{
    be->router_fwd = router_fwd;
    be->route_plan = route_plan;
    be->permute = permute;
    be->experts_fwd = experts_fwd;
    be->combine = combine;
    be->combine_bwd = combine_bwd;
    be->experts_bwd = experts_bwd;
    be->permute_bwd = permute_bwd;
    be->router_bwd = router_bwd;
    be->set_expert_precision = cuda_set_expert_precision;
    be->set_linear_lowp = cuda_set_linear_lowp;
    be->set_fp8_saved_activations = cuda_set_fp8_saved_activations;
    be->expert_saved_bytes = cuda_expert_saved_bytes;
    be->expert_swiglu_rows = cuda_expert_swiglu_rows;
}

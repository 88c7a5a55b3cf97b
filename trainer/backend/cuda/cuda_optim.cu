/* moekit CUDA backend: gradient norm and the fused multi-tensor AdamW. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_reduce.cuh"
#include "cuda_fp8_weight_cache.h"
#include "../split_master.h"
#include "../../numerics/init_normal.h"

#define NORM_BLOCKS 1024

/* a block's part of a sum of squares, to partial[blockIdx.x] */
__device__ void sumsq_block_total(double s, double *partial)
{
    const double t = block_sum_to_thread0<CUDA_THREADS / 32>(s, CUDA_THREADS / 32);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = t;
}

/* this thread's share of x[0..n), four floats a load where the pointer allows */
__device__ __forceinline__ double sumsq_share(const float *x, size_t n)
{
    double s = 0;
    size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    size_t n4 = ((uintptr_t)x & 15) == 0 ? n / 4 : 0;
    const float4 *x4 = (const float4 *)x;
    for (size_t i = tid; i < n4; i += stride) {
        float4 q = x4[i];
        s += (double)q.x * q.x + (double)q.y * q.y + (double)q.z * q.z + (double)q.w * q.w;
    }
    for (size_t i = 4 * n4 + tid; i < n; i += stride)
        s += (double)x[i] * x[i];
    return s;
}

/* Sum of squares in double: it reads the whole gradient (12.6 GB at 3.2B
 * parameters) every step. */
__global__ void sumsq_kernel(double *partial, const float *x, size_t n)
{
    sumsq_block_total(sumsq_share(x, n), partial);
}

/* the same over ranges of x, one after the other */
__global__ void sumsq_ranges_kernel(double *partial, const float *x, const moe_range *r, int nr)
{
    double s = 0;
    for (int j = 0; j < nr; j++)
        s += sumsq_share(x + r[j].offset, r[j].n);
    sumsq_block_total(s, partial);
}

/* ranges to the device, into one of two buffers (0: AdamW's zero ranges,
 * 1: the sum of squares' ranges), grown as needed; NULL when none */
static const moe_range *ranges_to_device(moe_backend *be, int which, const moe_range *r, int n)
{
    cuda_ctx *c = CTX(be);
    if (n <= 0)
        return NULL;
    if (c->ranges_cap[which] < n) {
        if (c->d_ranges[which])
            cudaFree(c->d_ranges[which]);
        c->d_ranges[which] = NULL;
        c->ranges_cap[which] = 0;
        CU(be, "gradient ranges", cudaMalloc(&c->d_ranges[which], sizeof(moe_range) * n));
        if (!c->d_ranges[which])
            return NULL;
        c->ranges_cap[which] = n;
    }
    CU(be, "gradient ranges",
       cuda_from_host(be, c->d_ranges[which], r, sizeof(moe_range) * n));
    return c->error[0] ? NULL : c->d_ranges[which];
}

static int partials_ready(moe_backend *be)
{
    cuda_ctx *c = CTX(be);
    if (!c->d_partial) {
        if (cudaMalloc(&c->d_partial, sizeof(double) * NORM_BLOCKS) != cudaSuccess ||
            cudaMallocHost(&c->h_partial, sizeof(double) * NORM_BLOCKS) != cudaSuccess) {
            cuda_note(be, "sum_squares", "cannot allocate partial sums");
            return 0;
        }
    }
    return 1;
}

static double partials_total(moe_backend *be)
{
    cuda_ctx *c = CTX(be);
    CU(be, "sum_squares", cuda_to_host(be, c->h_partial, c->d_partial,
                                         sizeof(double) * NORM_BLOCKS, "gradient norm"));
    if (c->error[0])
        return NAN; /* the trainer stops on a non-finite norm; the error says why */
    double t = 0;
    for (int i = 0; i < NORM_BLOCKS; i++)
        t += c->h_partial[i];
    return t;
}

static double sum_squares(moe_backend *be, const real *x, size_t n)
{
    if (!partials_ready(be))
        return NAN;
    sumsq_kernel<<<NORM_BLOCKS, CUDA_THREADS, 0, CTX(be)->stream>>>(CTX(be)->d_partial, x, n);
    LAUNCHED(be, "sum_squares");
    return partials_total(be);
}

static double sum_squares_ranges(moe_backend *be, const real *x, const moe_range *r, int n_ranges)
{
    if (n_ranges <= 0)
        return 0;
    const moe_range *dr = ranges_to_device(be, 1, r, n_ranges);
    if (!dr || !partials_ready(be))
        return NAN;
    sumsq_ranges_kernel<<<NORM_BLOCKS, CUDA_THREADS, 0, CTX(be)->stream>>>(CTX(be)->d_partial, x, dr,
                                                                          n_ranges);
    LAUNCHED(be, "sum_squares");
    return partials_total(be);
}

/* The parameter spans cut into chunks; a block updates one chunk. The
 * table is built once per span layout (the model's never changes). */
typedef struct {
    unsigned long long offset;
    unsigned int n;
    int decay;
} adam_chunk;

#define ADAM_CHUNK 16384

typedef struct {
    float lr, b1, b2, eps, wd, bc1, bc2, scale;
    const moe_range *zero; /* device: gradient ranges that count as zeros (sorted) */
    int n_zero;
} adam_args;

/* How a chunk meets the zero ranges: 0 not at all, 1 inside one (no
 * gradient read), 2 partly (element by element) */
__device__ int chunk_zero_mode(const adam_chunk &ch, const adam_args &a)
{
    int lo = 0, hi = a.n_zero; /* the first range ending after the chunk's start */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a.zero[mid].offset + a.zero[mid].n <= ch.offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == a.n_zero || a.zero[lo].offset >= ch.offset + ch.n)
        return 0;
    return a.zero[lo].offset <= ch.offset && a.zero[lo].offset + a.zero[lo].n >= ch.offset + ch.n ? 1 : 2;
}

__device__ int elem_in_zero(size_t k, const adam_args &a)
{
    int lo = 0, hi = a.n_zero;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a.zero[mid].offset + a.zero[mid].n <= k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < a.n_zero && a.zero[lo].offset <= k;
}

/* element k's gradient under the chunk's zero mode */
__device__ __forceinline__ float grad_at(const float *grad, size_t k, int zm, const adam_args &a)
{
    return zm == 1 || (zm == 2 && elem_in_zero(k, a)) ? 0.f : grad[k];
}

/* The moments' storage: fp32, or bf16 rounded to nearest even on store.
 * The update reads back what it stores, so a step sees the same moments as
 * the next one (and as the cpu reference). */
__device__ __forceinline__ float mom_round(float x, const float *) { return x; }
__device__ __forceinline__ float mom_round(float x, const bf16 *)
{
    return __bfloat162float(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float mom_ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float mom_ld(const bf16 *p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void mom_st(float *p, size_t i, float x) { p[i] = x; }
__device__ __forceinline__ void mom_st(bf16 *p, size_t i, float x) { p[i] = __float2bfloat16_rn(x); }
__device__ __forceinline__ float4 mom_ld4(const float *p, size_t i) { return ((const float4 *)p)[i]; }
__device__ __forceinline__ float4 mom_ld4(const bf16 *p, size_t i)
{
    uint2 w = ((const uint2 *)p)[i];
    float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&w.x);
    float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&w.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void mom_st4(float *p, size_t i, float4 x) { ((float4 *)p)[i] = x; }
__device__ __forceinline__ void mom_st4(bf16 *p, size_t i, float4 x)
{
    __nv_bfloat162 a = __floats2bfloat162_rn(x.x, x.y), b = __floats2bfloat162_rn(x.z, x.w);
    uint2 w;
    w.x = *(unsigned *)&a;
    w.y = *(unsigned *)&b;
    ((uint2 *)p)[i] = w;
}

/* One element: the moments (loaded into *m, *v) updated in place, the new
 * master returned. MT: the moments' storage type. */
template <typename MT>
__device__ __forceinline__ float adam_elem(float p, float g, float *m, float *v, float decay,
                                           const adam_args &a)
{
    g *= a.scale;
    float mk = mom_round(a.b1 * *m + (1.f - a.b1) * g, (const MT *)0);
    float vk = mom_round(a.b2 * *v + (1.f - a.b2) * g * g, (const MT *)0);
    *m = mk;
    *v = vk;
    return p * decay - a.lr * (mk / a.bc1) / (sqrtf(vk / a.bc2) + a.eps);
}

/* A chunk goes four elements a thread where its offset and length allow
 * (every tensor of a real model), one at a time otherwise. */
__device__ __forceinline__ int chunk_vec4(const adam_chunk &ch) { return (ch.offset % 4) == 0 && (ch.n % 4) == 0; }

template <typename MT>
__global__ void adamw_kernel(float *master, bf16 *wc, const float *grad, MT *m, MT *v,
                             const adam_chunk *chunks, adam_args a)
{
    adam_chunk ch = chunks[blockIdx.x];
    float decay = ch.decay ? 1.f - a.lr * a.wd : 1.f;
    int zm = a.n_zero ? chunk_zero_mode(ch, a) : 0;
    if (chunk_vec4(ch) && zm != 2) {
        size_t b = ch.offset / 4;
        for (unsigned i = threadIdx.x; i < ch.n / 4; i += blockDim.x) {
            float4 p = ((float4 *)master)[b + i];
            float4 g = zm ? make_float4(0.f, 0.f, 0.f, 0.f) : ((const float4 *)grad)[b + i];
            float4 mk = mom_ld4(m, b + i), vk = mom_ld4(v, b + i);
            p.x = adam_elem<MT>(p.x, g.x, &mk.x, &vk.x, decay, a);
            p.y = adam_elem<MT>(p.y, g.y, &mk.y, &vk.y, decay, a);
            p.z = adam_elem<MT>(p.z, g.z, &mk.z, &vk.z, decay, a);
            p.w = adam_elem<MT>(p.w, g.w, &mk.w, &vk.w, decay, a);
            ((float4 *)master)[b + i] = p;
            mom_st4(m, b + i, mk);
            mom_st4(v, b + i, vk);
            __nv_bfloat162 lo2 = __floats2bfloat162_rn(p.x, p.y), hi2 = __floats2bfloat162_rn(p.z, p.w);
            uint2 w;
            w.x = *(unsigned *)&lo2;
            w.y = *(unsigned *)&hi2;
            ((uint2 *)wc)[b + i] = w;
        }
        return;
    }
    for (unsigned i = threadIdx.x; i < ch.n; i += blockDim.x) {
        size_t k = ch.offset + i;
        float mk = mom_ld(m, k), vk = mom_ld(v, k);
        float p = adam_elem<MT>(master[k], grad_at(grad, k, zm, a), &mk, &vk, decay, a);
        mom_st(m, k, mk);
        mom_st(v, k, vk);
        master[k] = p;
        wc[k] = __float2bfloat16(p);
    }
}

/* The same on split masters (split_master.h): the master is rebuilt from the
 * compute copy (its high half) and the stored low half, updated, split again.
 * 28 bytes a parameter instead of 30, and 2 bytes less of storage. */
__device__ __forceinline__ float split_get(unsigned short hi, unsigned short lo)
{
    return __uint_as_float(split_master_decode(hi, lo));
}

__device__ __forceinline__ void split_put(float p, unsigned short *hi, unsigned short *lo)
{
    uint16_t h, l;
    split_master_encode(__float_as_uint(p), &h, &l);
    *hi = h;
    *lo = l;
}

template <typename MT>
__global__ void adamw_split_kernel(unsigned short *lo, unsigned short *hi, const float *grad, MT *m,
                                   MT *v, const adam_chunk *chunks, adam_args a)
{
    adam_chunk ch = chunks[blockIdx.x];
    float decay = ch.decay ? 1.f - a.lr * a.wd : 1.f;
    int zm = a.n_zero ? chunk_zero_mode(ch, a) : 0;
    if (chunk_vec4(ch) && zm != 2) {
        size_t b = ch.offset / 4;
        for (unsigned i = threadIdx.x; i < ch.n / 4; i += blockDim.x) {
            ushort4 h = ((ushort4 *)hi)[b + i], l = ((ushort4 *)lo)[b + i];
            float4 g = zm ? make_float4(0.f, 0.f, 0.f, 0.f) : ((const float4 *)grad)[b + i];
            float4 mk = mom_ld4(m, b + i), vk = mom_ld4(v, b + i);
            split_put(adam_elem<MT>(split_get(h.x, l.x), g.x, &mk.x, &vk.x, decay, a), &h.x, &l.x);
            split_put(adam_elem<MT>(split_get(h.y, l.y), g.y, &mk.y, &vk.y, decay, a), &h.y, &l.y);
            split_put(adam_elem<MT>(split_get(h.z, l.z), g.z, &mk.z, &vk.z, decay, a), &h.z, &l.z);
            split_put(adam_elem<MT>(split_get(h.w, l.w), g.w, &mk.w, &vk.w, decay, a), &h.w, &l.w);
            ((ushort4 *)hi)[b + i] = h;
            ((ushort4 *)lo)[b + i] = l;
            mom_st4(m, b + i, mk);
            mom_st4(v, b + i, vk);
        }
        return;
    }
    for (unsigned i = threadIdx.x; i < ch.n; i += blockDim.x) {
        size_t k = ch.offset + i;
        float mk = mom_ld(m, k), vk = mom_ld(v, k);
        float p = adam_elem<MT>(split_get(hi[k], lo[k]), grad_at(grad, k, zm, a), &mk, &vk, decay, a);
        mom_st(m, k, mk);
        mom_st(v, k, vk);
        split_put(p, &hi[k], &lo[k]);
    }
}

/* A chunk of the distributed optimizer's shard: the gradient and compute
 * copy at `flat`, the low halves and moments at `state`. */
typedef struct {
    unsigned long long flat, state;
    unsigned int n;
    int decay;
} shard_chunk;

template <typename MT>
__global__ void adamw_shard_kernel(unsigned short *lo, unsigned short *hi, const float *grad, MT *m,
                                   MT *v, const shard_chunk *chunks, adam_args a)
{
    shard_chunk ch = chunks[blockIdx.x];
    float decay = ch.decay ? 1.f - a.lr * a.wd : 1.f;
    for (unsigned i = threadIdx.x; i < ch.n; i += blockDim.x) {
        size_t k = ch.flat + i, s = ch.state + i;
        float mk = mom_ld(m, s), vk = mom_ld(v, s);
        float p = adam_elem<MT>(split_get(hi[k], lo[s]), grad[k], &mk, &vk, decay, a);
        mom_st(m, s, mk);
        mom_st(v, s, vk);
        split_put(p, &hi[k], &lo[s]);
    }
}

__global__ void split_from_f32_kernel(unsigned short *lo, unsigned short *hi, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        split_put(src[i], &hi[i], &lo[i]);
}

__global__ void split_to_f32_kernel(float *dst, const unsigned short *lo, const unsigned short *hi, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = split_get(hi[i], lo[i]);
}

/* Masters move between the host and the device in pieces through one
 * staging buffer, so a 3.2B-parameter model needs 64 MiB, not 12.6 GB. */

/* One direction per call: host fp32 -> (lo, wc), or back. */
static int masters_move(moe_backend *be, uint16_t *lo, act *wc, real *host, size_t n, int up,
                        moe_err *e)
{
    size_t piece = n < CUDA_SPLIT_STAGE_ELEMS ? n : CUDA_SPLIT_STAGE_ELEMS;
    float *stage = (float *)cuda_scratch(be, 7, cuda_split_stage_bytes(n));
    if (!stage)
        return cuda_check(be, e);
    for (size_t o = 0; o < n; o += piece) {
        size_t k = n - o < piece ? n - o : piece;
        unsigned short *l = (unsigned short *)lo + o, *h = (unsigned short *)wc + o;
        if (up) {
            if (be->upload(be, stage, host + o, k * sizeof(float), e))
                return moe_err_prefix(e, "uploading the master weights");
            split_from_f32_kernel<<<cuda_grid(k), CUDA_THREADS, 0, CTX(be)->stream>>>(l, h, stage, k);
            LAUNCHED(be, "masters_upload");
        } else {
            split_to_f32_kernel<<<cuda_grid(k), CUDA_THREADS, 0, CTX(be)->stream>>>(stage, l, h, k);
            LAUNCHED(be, "masters_download");
            if (be->download(be, host + o, stage, k * sizeof(float), e))
                return moe_err_prefix(e, "downloading the master weights");
        }
    }
    return cuda_check(be, e);
}

static int masters_upload(moe_backend *be, uint16_t *lo, act *wc, const real *host, size_t n,
                          moe_err *e)
{
    return masters_move(be, lo, wc, (real *)host, n, 1, e); /* read only when up */
}

static int masters_download(moe_backend *be, real *host, const uint16_t *lo, const act *wc,
                            size_t n, moe_err *e)
{
    return masters_move(be, (uint16_t *)lo, (act *)wc, host, n, 0, e); /* read only when down */
}

/* values start .. start + n - 1 of the init stream (or `fill`) straight into
 * the split masters; a thread makes one Box-Muller pair, values 2q and
 * 2q + 1 of the stream, and keeps those inside the range */
__global__ void masters_init_kernel(unsigned short *lo, unsigned short *hi, size_t n,
                                    uint64_t start, int normal, uint64_t key, double std,
                                    float fill)
{
    uint64_t q0 = start / 2, n_pairs = (start + n + 1) / 2 - q0;
    for (uint64_t p = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; p < n_pairs;
         p += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t j = 2 * (q0 + p);
        float v[2] = {fill, fill};
        if (normal)
            init_weights(v, key, j, 2, std);
        for (int i = 0; i < 2; i++)
            if (j + i >= start && j + i < start + n)
                split_put(v[i], &hi[j + i - start], &lo[j + i - start]);
    }
}

static int masters_init(moe_backend *be, uint16_t *lo, act *wc, size_t n, uint64_t start,
                        int normal, uint64_t key, double std, float fill, moe_err *e)
{
    if (n == 0)
        return 0;
    cuda_wcache_weights_changed(be);
    masters_init_kernel<<<cuda_grid((n + 3) / 2), CUDA_THREADS, 0, CTX(be)->stream>>>(
        (unsigned short *)lo, (unsigned short *)wc, n, start, normal, key, std, fill);
    LAUNCHED(be, "masters_init");
    return cuda_check(be, e);
}

static int same_layout(const moe_param_span *a, int na, const moe_param_span *b, int nb)
{
    if (na != nb)
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i].offset != b[i].offset || a[i].n != b[i].n || a[i].decay != b[i].decay)
            return 0;
    return 1;
}

/* The device chunk table of a span layout (its slot's chunks), built the
 * first time the layout is seen; NULL on failure, noted. */
static const adam_chunk *adam_chunks_for(moe_backend *be, const moe_param_span *spans, int n_spans,
                                         int *n_chunks_out)
{
    cuda_ctx *c = CTX(be);
    for (int i = 0; i < CUDA_ADAM_LAYOUTS; i++)
        if (c->adam[i].chunks && same_layout(c->adam[i].spans, c->adam[i].n_spans, spans, n_spans)) {
            *n_chunks_out = c->adam[i].n_chunks;
            return (const adam_chunk *)c->adam[i].chunks;
        }
    size_t n_chunks = 0;
    for (int s = 0; s < n_spans; s++)
        n_chunks += (spans[s].n + ADAM_CHUNK - 1) / ADAM_CHUNK;
    if (n_chunks == 0)
        return NULL; /* nothing to update */
    if (n_chunks > 0x7fffffff) {
        cuda_note(be, "adamw", "more chunks than one grid holds");
        return NULL;
    }
    adam_chunk *table = (adam_chunk *)malloc(sizeof(adam_chunk) * n_chunks);
    moe_param_span *copy = (moe_param_span *)malloc(sizeof(moe_param_span) * n_spans);
    if (!table || !copy) {
        free(table);
        free(copy);
        cuda_note(be, "adamw", "out of host memory for the chunk table");
        return NULL;
    }
    memcpy(copy, spans, sizeof(moe_param_span) * n_spans);
    size_t k = 0;
    for (int s = 0; s < n_spans; s++)
        for (size_t o = 0; o < spans[s].n; o += ADAM_CHUNK) {
            table[k].offset = spans[s].offset + o;
            table[k].n = (unsigned)(spans[s].n - o < ADAM_CHUNK ? spans[s].n - o : ADAM_CHUNK);
            table[k].decay = spans[s].decay;
            k++;
        }
    int slot = c->adam_next;
    c->adam_next = (slot + 1) % CUDA_ADAM_LAYOUTS;
    if (c->adam[slot].chunks)
        cudaFree(c->adam[slot].chunks);
    free(c->adam[slot].spans);
    c->adam[slot].chunks = NULL;
    c->adam[slot].spans = copy;
    c->adam[slot].n_spans = n_spans;
    CU(be, "adamw", cudaMalloc(&c->adam[slot].chunks, sizeof(adam_chunk) * n_chunks));
    if (c->adam[slot].chunks)
        CU(be, "adamw", cuda_from_host(be, c->adam[slot].chunks, table,
                                       sizeof(adam_chunk) * n_chunks));
    free(table);
    if (!c->adam[slot].chunks || c->error[0]) {
        if (c->adam[slot].chunks)
            cudaFree(c->adam[slot].chunks);
        c->adam[slot].chunks = NULL;
        return NULL;
    }
    c->adam[slot].n_chunks = (int)n_chunks;
    *n_chunks_out = (int)n_chunks;
    return (const adam_chunk *)c->adam[slot].chunks;
}

/* the kernel's arguments; zero ranges go to the device first (0: failed, noted) */
static int adam_args_of(moe_backend *be, const moe_adamw_hyper *h, adam_args *a)
{
    *a = {h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, h->bias_corr1, h->bias_corr2,
          h->grad_scale, NULL, 0};
    if (h->n_zero_grads > 0) {
        a->zero = ranges_to_device(be, 0, h->zero_grads, h->n_zero_grads);
        if (!a->zero)
            return 0;
        a->n_zero = h->n_zero_grads;
    }
    return 1;
}

static void adamw(moe_backend *be, real *master, act *wc, const real *grad, void *m, void *v,
                  const moe_param_span *spans, int n_spans, const moe_adamw_hyper *h)
{
    cuda_wcache_weights_changed(be); /* the weights' FP8 copies are made again at their next use */
    int n_chunks = 0;
    const adam_chunk *chunks = adam_chunks_for(be, spans, n_spans, &n_chunks);
    adam_args a;
    if (!chunks || !adam_args_of(be, h, &a))
        return;
    if (h->moments_bf16)
        adamw_kernel<<<n_chunks, CUDA_THREADS, 0, CTX(be)->stream>>>(
            master, (bf16 *)wc, grad, (bf16 *)m, (bf16 *)v, chunks, a);
    else
        adamw_kernel<<<n_chunks, CUDA_THREADS, 0, CTX(be)->stream>>>(
            master, (bf16 *)wc, grad, (float *)m, (float *)v, chunks, a);
    LAUNCHED(be, "adamw");
}

static void adamw_split(moe_backend *be, uint16_t *lo, act *wc, const real *grad, void *m, void *v,
                        const moe_param_span *spans, int n_spans, const moe_adamw_hyper *h)
{
    cuda_wcache_weights_changed(be);
    int n_chunks = 0;
    const adam_chunk *chunks = adam_chunks_for(be, spans, n_spans, &n_chunks);
    adam_args a;
    if (!chunks || !adam_args_of(be, h, &a))
        return;
    if (h->moments_bf16)
        adamw_split_kernel<<<n_chunks, CUDA_THREADS, 0, CTX(be)->stream>>>(
            (unsigned short *)lo, (unsigned short *)wc, grad, (bf16 *)m, (bf16 *)v, chunks, a);
    else
        adamw_split_kernel<<<n_chunks, CUDA_THREADS, 0, CTX(be)->stream>>>(
            (unsigned short *)lo, (unsigned short *)wc, grad, (float *)m, (float *)v, chunks, a);
    LAUNCHED(be, "adamw_split");
}

static int same_pieces(const moe_shard_piece *a, int na, const moe_shard_piece *b, int nb)
{
    if (na != nb || !a)
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i].flat != b[i].flat || a[i].state != b[i].state || a[i].n != b[i].n ||
            a[i].decay != b[i].decay)
            return 0;
    return 1;
}

/* The device chunk table of a shard layout, rebuilt only when it changes
 * (a run has one); NULL on failure, noted. */
static const shard_chunk *shard_chunks_for(moe_backend *be, const moe_shard_piece *pieces, int np,
                                           int *n_chunks_out)
{
    cuda_ctx *c = CTX(be);
    if (same_pieces(c->shard_pieces, c->n_shard_pieces, pieces, np)) {
        *n_chunks_out = c->n_shard_chunks;
        return (const shard_chunk *)c->shard_chunks;
    }
    size_t n_chunks = 0;
    for (int i = 0; i < np; i++)
        n_chunks += (pieces[i].n + ADAM_CHUNK - 1) / ADAM_CHUNK;
    if (n_chunks == 0 || n_chunks > 0x7fffffff) {
        if (n_chunks)
            cuda_note(be, "adamw_shard", "more chunks than one grid holds");
        return NULL;
    }
    shard_chunk *table = (shard_chunk *)malloc(sizeof(shard_chunk) * n_chunks);
    moe_shard_piece *copy = (moe_shard_piece *)malloc(sizeof(moe_shard_piece) * np);
    if (!table || !copy) {
        free(table);
        free(copy);
        cuda_note(be, "adamw_shard", "out of host memory for the chunk table");
        return NULL;
    }
    memcpy(copy, pieces, sizeof(moe_shard_piece) * np);
    size_t k = 0;
    for (int i = 0; i < np; i++)
        for (size_t o = 0; o < pieces[i].n; o += ADAM_CHUNK) {
            table[k].flat = pieces[i].flat + o;
            table[k].state = pieces[i].state + o;
            table[k].n = (unsigned)(pieces[i].n - o < ADAM_CHUNK ? pieces[i].n - o : ADAM_CHUNK);
            table[k].decay = pieces[i].decay;
            k++;
        }
    if (c->shard_chunks)
        cudaFree(c->shard_chunks);
    free(c->shard_pieces);
    c->shard_chunks = NULL;
    c->shard_pieces = NULL;
    c->n_shard_pieces = 0;
    CU(be, "adamw_shard", cudaMalloc(&c->shard_chunks, sizeof(shard_chunk) * n_chunks));
    if (c->shard_chunks)
        CU(be, "adamw_shard", cuda_from_host(be, c->shard_chunks, table,
                                             sizeof(shard_chunk) * n_chunks));
    free(table);
    if (!c->shard_chunks || c->error[0]) {
        free(copy);
        return NULL;
    }
    c->shard_pieces = copy;
    c->n_shard_pieces = np;
    c->n_shard_chunks = (int)n_chunks;
    *n_chunks_out = (int)n_chunks;
    return (const shard_chunk *)c->shard_chunks;
}

static void adamw_shard(moe_backend *be, const real *grad, act *wc, uint16_t *lo, void *m, void *v,
                        const moe_shard_piece *pieces, int n_pieces, const moe_adamw_hyper *h)
{
    cuda_wcache_weights_changed(be); /* and the all-gather that follows writes the rest */
    if (!lo) {
        cuda_note(be, "adamw_shard", "the bf16 compute copy needs the masters' low halves");
        return;
    }
    int n_chunks = 0;
    const shard_chunk *chunks = shard_chunks_for(be, pieces, n_pieces, &n_chunks);
    moe_adamw_hyper hz = *h;
    hz.n_zero_grads = 0;
    adam_args a;
    if (!chunks || !adam_args_of(be, &hz, &a))
        return;
    unsigned short *l = (unsigned short *)lo, *hi = (unsigned short *)wc;
    if (h->moments_bf16)
        adamw_shard_kernel<<<n_chunks, CUDA_THREADS, 0, CTX(be)->stream>>>(
            l, hi, grad, (bf16 *)m, (bf16 *)v, chunks, a);
    else
        adamw_shard_kernel<<<n_chunks, CUDA_THREADS, 0, CTX(be)->stream>>>(
            l, hi, grad, (float *)m, (float *)v, chunks, a);
    LAUNCHED(be, "adamw_shard");
}

__global__ void accumulate_kernel(float *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

static int accumulate_on(moe_backend *be, moe_queue *q, real *dst, const real *src, size_t n,
                         moe_err *e)
{
    if (n == 0)
        return 0;
    cudaStream_t st = q ? (cudaStream_t)q : CTX(be)->stream;
    accumulate_kernel<<<cuda_grid(n), CUDA_THREADS, 0, st>>>(dst, src, n);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return moe_errf(e, "cuda accumulate of %zu values: %s", n, cudaGetErrorString(err));
    return 0;
}

static void accumulate(moe_backend *be, real *dst, const real *src, size_t n)
{
    moe_err e = {{0}};
    if (accumulate_on(be, NULL, dst, src, n, &e))
        cuda_note(be, "accumulate", e.msg);
}

void cuda_fill_optim_ops(moe_backend *be)
{
    be->sum_squares = sum_squares;
    be->sum_squares_ranges = sum_squares_ranges;
    be->adamw = adamw;
    be->adamw_split = adamw_split;
    be->adamw_shard = adamw_shard;
    be->accumulate = accumulate;
    be->accumulate_on = accumulate_on;
    be->masters_upload = masters_upload;
    be->masters_download = masters_download;
    be->masters_init = masters_init;
}

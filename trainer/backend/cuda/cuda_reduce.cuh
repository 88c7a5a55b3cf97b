/* moekit CUDA backend: the warp and block reductions every kernel of this
 * folder uses. Trees by __shfl_xor_sync over the full warp mask, so every
 * lane of a group ends with the group's result. A floating-point sum's order
 * is part of its result (and the GPU tests compare bits), so each order in
 * use is a function of its own:
 *   lanes_*_down<N>  offsets N/2, N/4, ..., 1: groups of N consecutive lanes
 *                    (warp_*: N = 32, the whole warp)
 *   lanes_*_up<N>    offsets 1, 2, ..., N/2: the rows of an MMA fragment,
 *                    held by N = 2 (WMMA) or 4 (mma.sync) lanes
 *   block_sum / block_max   every warp's tree, then warp 0's lanes tree the
 *                    warps' results: the total in every thread
 *   block_sum_to_thread0    every warp's tree, then thread 0 adds the warps'
 *                    results in warp order: the total in thread 0 only
 * max is exact whatever the order; its variants keep the order all the same
 * (fmaxf's NaN rule picks the other operand). */
#ifndef MOE_CUDA_REDUCE_CUH
#define MOE_CUDA_REDUCE_CUH

#include <math.h>
#include <stdint.h>

#define CUDA_FULL_MASK 0xffffffffu

template <int N, typename T> __device__ __forceinline__ T lanes_sum_down(T v)
{
    for (int o = N / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(CUDA_FULL_MASK, v, o);
    return v;
}

template <int N> __device__ __forceinline__ float lanes_max_down(float v)
{
    for (int o = N / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(CUDA_FULL_MASK, v, o));
    return v;
}

/* the largest of unsigned values: an absmax of fp32 / bf16 bit patterns
 * with the sign cleared (integers order non-negative floats) */
template <int N> __device__ __forceinline__ uint32_t lanes_umax_down(uint32_t v)
{
    for (int o = N / 2; o > 0; o >>= 1)
        v = max(v, __shfl_xor_sync(CUDA_FULL_MASK, v, o));
    return v;
}

template <int N> __device__ __forceinline__ float lanes_sum_up(float v)
{
    for (int o = 1; o < N; o <<= 1)
        v += __shfl_xor_sync(CUDA_FULL_MASK, v, o);
    return v;
}

template <int N> __device__ __forceinline__ float lanes_max_up(float v)
{
    for (int o = 1; o < N; o <<= 1)
        v = fmaxf(v, __shfl_xor_sync(CUDA_FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) { return lanes_sum_down<32>(v); }
__device__ __forceinline__ float warp_max(float v) { return lanes_max_down<32>(v); }

/* block-wide sum, result in every thread; blockDim.x a multiple of 32, <= 1024.
 * The leading __syncthreads lets a kernel call it again at once. */
static __device__ float block_sum(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        part[wid] = v;
    __syncthreads();
    float t = lane < nw ? part[lane] : 0.f;
    return warp_sum(t);
}

static __device__ float block_max(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        part[wid] = v;
    __syncthreads();
    float t = lane < nw ? part[lane] : -INFINITY;
    return warp_max(t);
}

/* the sum of v over the block's n_warps warps (blockDim.x = 32 n_warps,
 * n_warps <= MAX_WARPS <= 32), in thread 0; the other threads get an
 * unspecified value. Called once a kernel (its shared buffer is not guarded
 * for a second call). */
template <int MAX_WARPS, typename T> __device__ __forceinline__ T block_sum_to_thread0(T v, int n_warps)
{
    __shared__ T part[MAX_WARPS];
    v = lanes_sum_down<32>(v);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    T t = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < n_warps; w++)
            t += part[w];
    return t;
}

#endif

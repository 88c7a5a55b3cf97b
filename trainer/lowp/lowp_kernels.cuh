/* moekit CUDA low precision: what the quantiser kernels of this folder share
 * (mxfp8/, fp8_block/ and e4m3_check.cu): launch bookkeeping,
 * staged tile stores, four codes at a time, and the runner of the
 * exhaustive checks. Bit-identical to the C reference (trainer/lowp/fp8.h)
 * by construction: the per-element arithmetic is fp8_scalar.h's (mx_quant4
 * / blk_quant4 are lowp_mx_quant / lowp_fp8blk_quant four at a time), amaxes
 * are integer maxima of bit patterns, the only floating-point operations are
 * single __f*_rn roundings (these files are built with --fmad=false), the
 * FP8 block division is either IEEE's or a reciprocal with a correction
 * proven to give the same code on every pair it meets (LOWP_FAST_DIV), and
 * the E4M3 conversion is either the integer encoder or the cvt instruction
 * proven equal to it on every input (LOWP_HW_CVT in rules.mk). */
#ifndef MOE_LOWP_KERNELS_CUH
#define MOE_LOWP_KERNELS_CUH

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "fp8_scalar.h"
#include "fp8_blk_device.cuh"
#include "lowp_cuda.h"

/* ---- launch bookkeeping ------------------------------------------------------- */

static inline int launched(const char *fn, const char *kernel, moe_err *e)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return moe_errf(e, "%s: kernel %s: %s", fn, kernel, cudaGetErrorString(err));
    return 0;
}

static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static __host__ __device__ __forceinline__ size_t cdiv(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* ---- staged tiles out -------------------------------------------------------------- */

/* Write a tile of N rows x 128 bytes, staged in shared memory with row pitch
 * `sld`, to dst (row pitch ld) by all NT threads: whole 16-byte rows when the
 * tile is full and aligned (vec), else byte by byte within rows_left x
 * cols_left. */
template <int N, int NT>
__device__ __forceinline__ void stage_out(uint8_t *dst, size_t ld, const uint8_t *stage, int sld,
                                          size_t rows_left, size_t cols_left, bool vec)
{
    if (vec) {
        for (int i = threadIdx.x; i < N * 128 / 16; i += NT) {
            int r = i >> 3, v = i & 7;
            *(uint4 *)(dst + r * ld + v * 16) = *(const uint4 *)(stage + r * sld + v * 16);
        }
    } else {
        for (int i = threadIdx.x; i < N * 128; i += NT) {
            int r = i >> 7, c = i & 127;
            if (r < rows_left && c < cols_left)
                dst[r * ld + c] = stage[r * sld + c];
        }
    }
}

/* ---- four codes at a time ------------------------------------------------------------ */

/* lowp_mx_quant of the two bf16 in w (codes little-endian): a NaN block is
 * 0x7F codes, a zero block 0x00, else e4m3(v * 2^(127-x)). */
__device__ __forceinline__ uint32_t mx_quant2(uint32_t w, uint8_t x, uint32_t amax)
{
    if (x == LOWP_E8M0_NAN)
        return 0x7F7Fu;
    if (amax == 0)
        return 0;
    const float r = lowp_e8m0_rcp(x);
    return e4m3x2(LOWP_MUL(bf16_lo(w), r), LOWP_MUL(bf16_hi(w), r));
}

__device__ __forceinline__ uint32_t mx_quant4(uint32_t w0, uint32_t w1, uint8_t x, uint32_t amax)
{
    return mx_quant2(w0, x, amax) | mx_quant2(w1, x, amax) << 16;
}

/* sixteen values (two uint4 of bf16) -> sixteen codes */
__device__ __forceinline__ uint4 blk_quant16(uint4 a, uint4 c, const blk_scale b)
{
    return make_uint4(blk_quant4(a.x, a.y, b), blk_quant4(a.z, a.w, b), blk_quant4(c.x, c.y, b),
                      blk_quant4(c.z, c.w, b));
}

/* ---- exhaustive checks on the device --------------------------------------------- */

/* What a check kernel counts: two kinds of mismatch and the smallest input
 * of the first kind. */
typedef struct {
    unsigned long long n[2];
    unsigned int first;
} check_counts;

/* launch(d) on counters d zeroed on the device, then *h = d (synchronous). */
static inline int run_check(const char *fn, const char *kernel, void (*launch)(check_counts *),
                     check_counts *h, moe_err *e)
{
    check_counts *d = NULL;
    h->n[0] = h->n[1] = 0, h->first = 0xFFFFFFFFu;
    cudaError_t err;
    if ((err = cudaMalloc((void **)&d, sizeof *h)) != cudaSuccess)
        return moe_errf(e, "%s: cudaMalloc: %s", fn, cudaGetErrorString(err));
    int rc = 0;
    if ((err = cudaMemcpy(d, h, sizeof *h, cudaMemcpyHostToDevice)) != cudaSuccess) {
        rc = moe_errf(e, "%s: cudaMemcpy: %s", fn, cudaGetErrorString(err));
    } else {
        launch(d);
        if (launched(fn, kernel, e))
            rc = -1;
        else if ((err = cudaMemcpy(h, d, sizeof *h, cudaMemcpyDeviceToHost)) != cudaSuccess)
            rc = moe_errf(e, "%s: kernel %s: %s", fn, kernel, cudaGetErrorString(err));
    }
    cudaFree(d);
    return rc;
}

#endif

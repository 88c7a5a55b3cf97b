/* moekit CUDA low precision: the E4M3 conversion instruction (cvt.rn.satfinite)
 * against the integer encoder on all 2^32 fp32 inputs (lowp_cuda.h). */
#include "lowp_kernels.cuh"

/* ---- the hardware conversion, compared with ours ---------------------------------- */

__global__ void e4m3_hw_check_kernel(check_counts *c) /* n[0] non-NaN, n[1] NaN inputs */
{
#if __CUDA_ARCH__ >= 890
    const unsigned long long n = 1ull << 32;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float f = __uint_as_float((unsigned int)i);
        unsigned short pair;
        asm("{cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;}\n" : "=h"(pair) : "f"(f), "f"(0.0f));
        if ((uint8_t)(pair & 0xFFu) != lowp_e4m3_from_f32_int(f)) {
            if (f != f) {
                atomicAdd(&c->n[1], 1ull);
            } else {
                atomicAdd(&c->n[0], 1ull);
                atomicMin(&c->first, (unsigned int)i);
            }
        }
    }
#else
    if (blockIdx.x == 0 && threadIdx.x == 0)
        c->n[0] = ~0ull; /* not available on this architecture */
#endif
}

static void launch_hw_check(check_counts *d) { e4m3_hw_check_kernel<<<4096, 256>>>(d); }

extern "C" int lowp_cuda_e4m3_hw_check(unsigned long long *mismatch,
                                       unsigned long long *nan_mismatch, uint32_t *first,
                                       moe_err *e)
{
    static const char fn[] = "lowp_cuda_e4m3_hw_check";
    int dev, major = 0, minor = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess)
        return moe_errf(e, "%s: %s", fn, cudaGetErrorString(err));
    if (major * 10 + minor < 89)
        return moe_errf(e, "%s: compute capability %d.%d has no E4M3 conversion", fn, major, minor);
    check_counts h;
    if (run_check(fn, "e4m3_hw_check_kernel", launch_hw_check, &h, e))
        return -1;
    *mismatch = h.n[0], *nan_mismatch = h.n[1], *first = h.first;
    return 0;
}

extern "C" int lowp_cuda_uses_hw_cvt(void)
{
#ifdef LOWP_CUDA_HW_CVT
    return 1;
#else
    return 0;
#endif
}

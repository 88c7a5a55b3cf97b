/* moekit CUDA low precision, the fused SwiGLU quantiser (lowp_cuda.h):
 * silu(gate) * up * router probability, quantised to MXFP8 in the same pass
 * (the down projection's operand), with silu looked up in a table of every
 * bf16 gate; and the check of its division against IEEE's. fp8_block's
 * fused SwiGLU (the saved h1, h3) is the CUDA backend's (cuda_moe.cu, with
 * fp8_blk_device.cuh). */
#include "mx_tile.cuh"

/* silu of every bf16 gate (silu_bf16's bits, lowp_silu's): the SwiGLU ->
 * MXFP8 kernel looks silu up instead of computing it. The exact exp and
 * division are ~40 instructions a value and made that kernel ALU-bound at a
 * third of a copy's bandwidth; a layer's gates span a few thousand patterns,
 * whose entries stay in L1. Filled ahead of each use (silu_table_on). */
__device__ float silu_table[65536];

__global__ void silu_table_kernel(void)
{
    const uint32_t gate = blockIdx.x * blockDim.x + threadIdx.x;
    if (gate <= 0xFFFFu)
        silu_table[gate] = silu_bf16((uint16_t)gate);
}

__global__ void __launch_bounds__(MX_THREADS) swiglu_mxfp8_kernel(const mx_params p)
{
    mx_tile(p, 1);
}

/* ---- the silu table ---- */

static int silu_lookup = 1; /* lowp_cuda_set_silu_lookup */

extern "C" void lowp_cuda_set_silu_lookup(int on) { silu_lookup = on; }

/* silu_table filled on `stream` ahead of the kernel that reads it, at every
 * call: 65536 values, a few microseconds, against ~0.3 ms of SwiGLU saved
 * on a chunk; no state to go stale (a device reset, several streams), and
 * concurrent fills store the same bits. *table: its device address. */
static int silu_table_on(const char *fn, cudaStream_t stream, const float **table, moe_err *e)
{
    void *addr = NULL;
    cudaError_t err = cudaGetSymbolAddress(&addr, silu_table);
    if (err != cudaSuccess)
        return moe_errf(e, "%s: the silu table: %s", fn, cudaGetErrorString(err));
    *table = (const float *)addr;
    silu_table_kernel<<<256, 256, 0, stream>>>();
    return launched(fn, "silu_table_kernel", e);
}

extern "C" int lowp_cuda_silu_table(float *host, cudaStream_t stream, moe_err *e)
{
    const float *table = NULL;
    if (silu_table_on("lowp_cuda_silu_table", stream, &table, e))
        return -1;
    cudaError_t err = cudaStreamSynchronize(stream);
    if (err == cudaSuccess)
        err = cudaMemcpy(host, table, 65536 * sizeof(float), cudaMemcpyDeviceToHost);
    if (err != cudaSuccess)
        return moe_errf(e, "lowp_cuda_silu_table: filling or copying it: %s",
                        cudaGetErrorString(err));
    return 0;
}

extern "C" int lowp_cuda_swiglu_mxfp8(const uint16_t *gate, const uint16_t *up, const float *prob,
                                      size_t rows, size_t f, uint16_t *y, const lowp_mx_out *out,
                                      cudaStream_t stream, moe_err *e)
{
    static const char fn[] = "lowp_cuda_swiglu_mxfp8";
    mx_params p = {};
    p.gate = gate, p.up = up, p.prob = prob, p.y = y, p.rows = rows, p.cols = f;
    if (rows && f && silu_lookup && silu_table_on(fn, stream, &p.silu, e))
        return -1;
    dim3 grid;
    int rc = mx_setup(fn, &p, out, 1, &grid, e);
    if (rc)
        return rc < 0 ? -1 : 0;
    swiglu_mxfp8_kernel<<<grid, MX_THREADS, 0, stream>>>(p);
    return launched(fn, "swiglu_mxfp8_kernel", e);
}

/* ---- SwiGLU's division, compared with IEEE's ------------------------------------ */

/* Thread i takes the bf16 gate with pattern i: silu_bf16 against lowp_silu
 * (the same steps with __fdiv_rn), as fp32 bit patterns. */
__global__ void silu_check_kernel(check_counts *c) /* n[0] mismatches, n[1] NaN gates */
{
    const uint32_t gate = blockIdx.x * blockDim.x + threadIdx.x;
    if (gate > 0xFFFFu)
        return;
    const float ref = lowp_silu((uint16_t)gate);
    const float fast = silu_bf16((uint16_t)gate);
    if (ref != ref) { /* NaN gates: NaN either way, payloads aside */
        if (fast == fast)
            atomicAdd(&c->n[0], 1ull), atomicMin(&c->first, gate);
        atomicAdd(&c->n[1], 1ull);
    } else if (__float_as_uint(ref) != __float_as_uint(fast)) {
        atomicAdd(&c->n[0], 1ull);
        atomicMin(&c->first, gate);
    }
}

static void launch_silu_check(check_counts *d) { silu_check_kernel<<<256, 256>>>(d); }

extern "C" int lowp_cuda_silu_check(unsigned long long *mismatch, uint32_t *first, moe_err *e)
{
    check_counts h;
    if (run_check("lowp_cuda_silu_check", "silu_check_kernel", launch_silu_check, &h, e))
        return -1;
    *mismatch = h.n[0], *first = h.first;
    return 0;
}

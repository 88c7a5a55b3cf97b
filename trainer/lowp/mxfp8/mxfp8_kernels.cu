/* moekit CUDA low precision, MXFP8 (lowp_cuda.h): the rowwise + columnwise
 * quantiser (mx_tile.cuh), the columnwise copy made K-major, and the
 * emulation that feeds mxfp8_emulated (dequantised MXFP8 in bf16). */
#include "mx_tile.cuh"

__global__ void __launch_bounds__(MX_THREADS) mxfp8_rowcol_kernel(const mx_params p)
{
    mx_tile(p, 0);
}

extern "C" int lowp_cuda_mxfp8(const uint16_t *x, size_t rows, size_t cols, const lowp_mx_out *out,
                               cudaStream_t stream, moe_err *e)
{
    static const char fn[] = "lowp_cuda_mxfp8";
    mx_params p = {};
    p.x = x, p.rows = rows, p.cols = cols;
    dim3 grid;
    int rc = mx_setup(fn, &p, out, 0, &grid, e);
    if (rc)
        return rc < 0 ? -1 : 0;
    mxfp8_rowcol_kernel<<<grid, MX_THREADS, 0, stream>>>(p);
    return launched(fn, "mxfp8_rowcol_kernel", e);
}

/* ---- MXFP8 emulation ------------------------------------------------------------ */

/* One thread per 32-value block (lowp_mx_fake_block): consecutive threads
 * take consecutive columns in the columnwise case (coalesced), consecutive
 * blocks of a row in the rowwise one. Not tuned: it feeds the emulated
 * precision, whose job is accuracy, not speed. */
__global__ void mxfp8_fake_kernel(const uint16_t *x, uint16_t *y, size_t rows, size_t cols,
                                  int colwise)
{
    const size_t nbc = cdiv(cols, 32), total = colwise ? cdiv(rows, 32) * cols : rows * nbc;
    for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < total;
         b += (size_t)gridDim.x * blockDim.x) {
        if (colwise) {
            size_t r0 = b / cols * 32, c = b % cols, n = rows - r0 < 32 ? rows - r0 : 32;
            lowp_mx_fake_block(x + r0 * cols + c, cols, n, y + r0 * cols + c);
        } else {
            size_t r = b / nbc, c0 = b % nbc * 32, n = cols - c0 < 32 ? cols - c0 : 32;
            lowp_mx_fake_block(x + r * cols + c0, 1, n, y + r * cols + c0);
        }
    }
}

extern "C" int lowp_cuda_mxfp8_fake_bf16(const uint16_t *x, size_t rows, size_t cols, int colwise,
                                         uint16_t *y, cudaStream_t stream, moe_err *e)
{
    static const char fn[] = "lowp_cuda_mxfp8_fake_bf16";
    if (rows == 0 || cols == 0)
        return 0;
    size_t total = colwise ? cdiv(rows, 32) * cols : rows * cdiv(cols, 32);
    size_t grid = cdiv(total, 256);
    mxfp8_fake_kernel<<<(unsigned)(grid < 65536 ? grid : 65536), 256, 0, stream>>>(x, y, rows, cols,
                                                                                colwise);
    return launched(fn, "mxfp8_fake_kernel", e);
}

/* ---- E4M3 codes transposed ----------------------------------------------------- */

/* MXFP8's columnwise copy made K-major (Hopper and Blackwell FP8 GEMMs take
 * only K-major operands). 64 x 64 byte tiles through shared memory, 32-bit
 * loads and stores: each thread moves 4 words in and 4 words out. */
#define TT 64
__global__ void __launch_bounds__(256) fp8_transpose_kernel(const uint8_t *in, uint8_t *out,
                                                            size_t rows, size_t cols)
{
    __shared__ uint8_t tile[TT][TT + 4];
    const size_t r0 = (size_t)blockIdx.y * TT, c0 = (size_t)blockIdx.x * TT;
    const int tid = threadIdx.x;
    for (int i = tid; i < TT * (TT / 4); i += 256) {
        int r = i / (TT / 4), w = i % (TT / 4);
        size_t gr = r0 + r, gc = c0 + 4 * w;
        uint32_t v = gr < rows && gc < cols ? *(const uint32_t *)(in + gr * cols + gc) : 0;
        *(uint32_t *)&tile[r][4 * w] = v;
    }
    __syncthreads();
    for (int i = tid; i < TT * (TT / 4); i += 256) {
        int c = i / (TT / 4), w = i % (TT / 4); /* out row c (an input column), rows 4w..4w+3 */
        size_t gc = c0 + c, gr = r0 + 4 * w;
        if (gc >= cols || gr >= rows)
            continue;
        uint32_t v = tile[4 * w][c] | (uint32_t)tile[4 * w + 1][c] << 8 |
                     (uint32_t)tile[4 * w + 2][c] << 16 | (uint32_t)tile[4 * w + 3][c] << 24;
        *(uint32_t *)(out + gc * rows + gr) = v;
    }
}

extern "C" int lowp_cuda_transpose_u8(const uint8_t *in, size_t rows, size_t cols, uint8_t *out,
                                      cudaStream_t stream, moe_err *e)
{
    static const char fn[] = "lowp_cuda_transpose_u8";
    if (rows == 0 || cols == 0)
        return 0;
    if (rows % 4 || cols % 4 || ((uintptr_t)in | (uintptr_t)out) % 4)
        return moe_errf(e, "%s: %zu x %zu: rows and columns must be multiples of 4 and the bytes "
                           "4-byte aligned",
                        fn, rows, cols);
    if (cdiv(rows, TT) > 65535)
        return moe_errf(e, "%s: %zu rows are too many for one launch", fn, rows);
    dim3 grid((unsigned)cdiv(cols, TT), (unsigned)cdiv(rows, TT));
    fp8_transpose_kernel<<<grid, 256, 0, stream>>>(in, out, rows, cols);
    return launched(fn, "fp8_transpose_kernel", e);
}

#undef TT

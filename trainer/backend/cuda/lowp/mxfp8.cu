/* moekit low precision: the CUDA quantisers (lowp_cuda.h). Bit-identical to
 * the C reference (fp8.h) by construction: the per-element arithmetic is
 * fp8_scalar.h's (mx_quant4 / blk_quant4 below are lowp_mx_quant /
 * lowp_fp8blk_quant four at a time), amaxes are integer maxima of bit
 * patterns, the only floating-point operations are single __f*_rn roundings
 * (this file is also built with --fmad=false), the FP8 block division is
 * either IEEE's or a reciprocal with a correction proven to give the same
 * code on every pair it meets (LOWP_FAST_DIV), and the E4M3 conversion is
 * either the integer encoder or the cvt instruction proven equal to it on
 * every input (LOWP_HW_CVT in rules.mk).
 *
 * MXFP8: one CTA per 32 x 128 tile (128 threads). The tile is read once into
 * shared memory (coalesced 16-byte loads); then each thread quantises one
 * 1x32 row block (rowwise copy) and one 32x1 column (columnwise copy). Row
 * codes go straight out (32 contiguous bytes per thread), column codes are
 * staged in shared memory and written back as 16-byte rows. The grid spans
 * round_up(rows, 128) rows so the CTAs past the end write the zero padding
 * of the swizzled scale buffers; together they write every byte of them.
 *
 * FP8 blocks: one CTA per 128 x 128 tile (256 threads), read once into
 * shared memory (all of a thread's loads in flight at once). Rowwise codes:
 * eight lanes a row, sixteen values and one 16-byte store a lane (1x128:
 * the row's amax over those eight lanes). Transposed codes (1x128 down the
 * columns, or 128x128 for the dgrad weight w^T): two threads a column,
 * staged in shared memory and written out as 128-byte rows of x^T.
 * 128x128: the block's amax taken while loading. The division by a block's scale is a reciprocal
 * multiply with one exact-remainder correction (blk_div). */
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "lowp_cuda.h"
#include "fp8_scalar.h"
#include "fp8_blk_device.cuh"

/* ---- launch bookkeeping ------------------------------------------------------- */

static int launched(const char *fn, const char *kernel, moe_err *e)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return moe_errf(e, "%s: kernel %s: %s", fn, kernel, cudaGetErrorString(err));
    return 0;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

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

/* ---- MXFP8 row + column kernel ---------------------------------------------------- */

#define MX_TR 32  /* tile rows: one column block */
#define MX_TC 128 /* tile columns: four row blocks */
#define MX_THREADS 128
/* bf16 per shared row (272 bytes): the row pass's 16-byte reads of a warp
 * then spread over all banks */
#define MX_LD (MX_TC + 8)
#define MX_CLD (MX_TC + 16) /* bytes per staged column-code row, 16-byte aligned */

typedef struct {
    const uint16_t *x;         /* plain input, or */
    const uint16_t *gate, *up; /* the SwiGLU inputs */
    const float *prob;
    const float *silu; /* silu_table, or NULL: computed */
    uint16_t *y;       /* optional bf16 SwiGLU output */
    size_t rows, cols;
    uint8_t *rc, *rs, *rz, *cc, *cs, *cz;
    int vec_in;  /* 16-byte loads (and y stores) allowed */
    int vec_out; /* 16-byte code stores allowed */
} mx_params;

/* silu(g) = g / (1 + exp(-g)) of a bf16 gate, as lowp_swiglu_prob computes
 * it (fp8_scalar.h), with the division as a reciprocal and one
 * exact-remainder correction (blk_div's) where LOWP_FAST_DIV is on and the
 * operands keep that exact: a finite gate not tiny (the remainder stays
 * normal), a denominator under 2^126 (its reciprocal stays normal). A
 * function of the 16-bit gate alone: lowp_cuda_silu_check compares it with
 * __fdiv_rn's on all 65536 gates. */
__device__ __forceinline__ float silu_bf16(uint16_t gate)
{
    const float g = lowp_bf16_to_f32(gate);
    const float d = LOWP_ADD(1.0f, lowp_expf(-g));
#ifdef LOWP_CUDA_FAST_DIV
    const float a = fabsf(g);
    if (d < 0x1p126f && a >= 0x1p-90f && a < 0x1p127f) {
        const float r = __frcp_rn(d), q = __fmul_rn(g, r);
        return __fmaf_rn(__fmaf_rn(-q, d, g), r, q);
    }
#endif
    return LOWP_DIV(g, d);
}

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

/* lowp_swiglu_prob with silu from the table (or silu_bf16 without one):
 * the same bits */
__device__ __forceinline__ uint16_t swiglu_prob_dev(uint16_t gate, uint16_t up, float prob,
                                                    const float *silu)
{
    const float s = silu ? __ldg(silu + gate) : silu_bf16(gate);
    const float t = LOWP_MUL(s, lowp_bf16_to_f32(up));
    return lowp_f32_to_bf16(LOWP_MUL(t, prob));
}

__device__ __forceinline__ uint32_t swiglu_pair(uint32_t g, uint32_t u, float p, const float *silu)
{
    uint32_t lo = swiglu_prob_dev((uint16_t)(g & 0xFFFFu), (uint16_t)(u & 0xFFFFu), p, silu);
    uint32_t hi = swiglu_prob_dev((uint16_t)(g >> 16), (uint16_t)(u >> 16), p, silu);
    return lo | (hi << 16);
}

__device__ __forceinline__ uint16_t mx_element(const mx_params p, size_t i, size_t row, int swiglu)
{
    if (!swiglu)
        return p.x[i];
    uint16_t v = swiglu_prob_dev(p.gate[i], p.up[i], p.prob[row], p.silu);
    if (p.y)
        p.y[i] = v;
    return v;
}

__device__ __forceinline__ void mx_tile(const mx_params p, const int swiglu)
{
    __shared__ __align__(16) uint16_t tile[MX_TR * MX_LD];
    __shared__ __align__(16) uint8_t stage[MX_TR * MX_CLD];
    const size_t rows = p.rows, cols = p.cols;
    const size_t rt = blockIdx.x, ct = blockIdx.y;
    const size_t row0 = rt * MX_TR, col0 = ct * MX_TC;
    const size_t nkb = cdiv(cols, 32), nrb = cdiv(rows, 32);
    const int tid = threadIdx.x;

    if (row0 >= rows) { /* past the end: only the swizzled padding */
        if (p.rz)
            p.rz[lowp_mx_swz(row0 + (tid >> 2), ct * 4 + (tid & 3), nkb)] = 0;
        if (p.cz)
            p.cz[lowp_mx_swz(col0 + tid, rt, nrb)] = 0;
        return;
    }
    const int full = row0 + MX_TR <= rows && col0 + MX_TC <= cols;

    /* 1. the tile into shared memory, zeros outside the matrix */
    if (full && p.vec_in) {
        /* every load of the thread in flight before the first use (the y
         * stores may alias the inputs as far as the compiler knows) */
        enum { NL = MX_TR * MX_TC / 8 / MX_THREADS };
        uint4 a[NL], b[NL];
        float pr[NL];
        for (int j = 0; j < NL; j++) {
            const int i = tid + j * MX_THREADS, r = i >> 4, v = i & 15;
            const size_t g = (row0 + r) * cols + col0 + v * 8;
            if (!swiglu) {
                a[j] = __ldg((const uint4 *)(p.x + g));
            } else {
                a[j] = __ldg((const uint4 *)(p.gate + g));
                b[j] = __ldg((const uint4 *)(p.up + g));
                pr[j] = __ldg(p.prob + row0 + r);
            }
        }
        for (int j = 0; j < NL; j++) {
            const int i = tid + j * MX_THREADS, r = i >> 4, v = i & 15;
            uint4 q = a[j];
            if (swiglu) {
                q.x = swiglu_pair(a[j].x, b[j].x, pr[j], p.silu);
                q.y = swiglu_pair(a[j].y, b[j].y, pr[j], p.silu);
                q.z = swiglu_pair(a[j].z, b[j].z, pr[j], p.silu);
                q.w = swiglu_pair(a[j].w, b[j].w, pr[j], p.silu);
                if (p.y)
                    *(uint4 *)(p.y + (row0 + r) * cols + col0 + v * 8) = q;
            }
            *(uint4 *)(tile + r * MX_LD + v * 8) = q;
        }
    } else {
        for (int i = tid; i < MX_TR * MX_TC; i += MX_THREADS) {
            int r = i >> 7, c = i & 127;
            size_t gr = row0 + r, gc = col0 + c;
            tile[r * MX_LD + c] =
                gr < rows && gc < cols ? mx_element(p, gr * cols + gc, gr, swiglu) : 0;
        }
    }
    __syncthreads();

    /* 2. rowwise: thread -> row r, block b (32 values) */
    {
        const int r = tid >> 2, b = tid & 3;
        const size_t gr = row0 + r, kb = ct * 4 + b;
        uint32_t w[16];
        const uint4 *src = (const uint4 *)(tile + r * MX_LD + b * 32);
        for (int j = 0; j < 4; j++) {
            uint4 q = src[j];
            w[4 * j] = q.x, w[4 * j + 1] = q.y, w[4 * j + 2] = q.z, w[4 * j + 3] = q.w;
        }
        uint32_t am = 0;
        for (int j = 0; j < 16; j++)
            am = max(am, max(w[j] & 0x7FFFu, (w[j] >> 16) & 0x7FFFu));
        const uint32_t amax = am << 16;
        const uint8_t s = lowp_mx_scale_from_amax_bits(amax);
        const int inside = gr < rows && kb < nkb;
        if (inside && p.rc) {
            uint32_t out[8];
            for (int j = 0; j < 8; j++)
                out[j] = mx_quant4(w[2 * j], w[2 * j + 1], s, amax);
            uint8_t *dst = p.rc + gr * cols + col0 + b * 32;
            if (full && p.vec_out) {
                ((uint4 *)dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
                ((uint4 *)dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
            } else {
                for (int k = 0; k < 32 && col0 + b * 32 + k < cols; k++)
                    dst[k] = (uint8_t)(out[k >> 2] >> (8 * (k & 3)));
            }
        }
        if (inside && p.rs)
            p.rs[gr * nkb + kb] = s;
        if (p.rz)
            p.rz[lowp_mx_swz(gr, kb, nkb)] = inside ? s : 0;
    }

    /* 3. columnwise: thread -> column c, 32 rows; codes staged */
    {
        const int c = tid;
        const size_t gc = col0 + c;
        uint32_t am = 0;
        for (int r = 0; r < MX_TR; r++)
            am = max(am, (uint32_t)(tile[r * MX_LD + c] & 0x7FFFu));
        const uint32_t amax = am << 16;
        const uint8_t s = lowp_mx_scale_from_amax_bits(amax);
        if (p.cc)
            for (int r = 0; r < MX_TR; r += 2) {
                /* rows r and r+1 of the column as one word, codes back to their rows */
                uint32_t pair = tile[r * MX_LD + c] | (uint32_t)tile[(r + 1) * MX_LD + c] << 16;
                uint32_t q = mx_quant2(pair, s, amax);
                stage[r * MX_CLD + c] = (uint8_t)q;
                stage[(r + 1) * MX_CLD + c] = (uint8_t)(q >> 8);
            }
        if (gc < cols && p.cs)
            p.cs[rt * cols + gc] = s;
        if (p.cz)
            p.cz[lowp_mx_swz(gc, rt, nrb)] = gc < cols ? s : 0;
    }
    if (!p.cc)
        return;
    __syncthreads();
    stage_out<MX_TR, MX_THREADS>(p.cc + row0 * cols + col0, cols, stage, MX_CLD, rows - row0,
                                 cols - col0, full && p.vec_out);
}

__global__ void __launch_bounds__(MX_THREADS) mxfp8_rowcol_kernel(const mx_params p)
{
    mx_tile(p, 0);
}

__global__ void __launch_bounds__(MX_THREADS) swiglu_mxfp8_kernel(const mx_params p)
{
    mx_tile(p, 1);
}

static int mx_launch(const char *fn, mx_params *p, const lowp_mx_out *out, int swiglu,
                     cudaStream_t stream, moe_err *e)
{
    if (p->rows == 0 || p->cols == 0)
        return 0;
    lowp_mx_out none = {0, 0, 0, 0, 0, 0};
    if (!out)
        out = &none;
    p->rc = out->row_codes, p->rs = out->row_scales, p->rz = out->row_swizzled;
    p->cc = out->col_codes, p->cs = out->col_scales, p->cz = out->col_swizzled;
    int in_ok = swiglu ? aligned16(p->gate) && aligned16(p->up) && (!p->y || aligned16(p->y))
                       : aligned16(p->x);
    p->vec_in = in_ok && p->cols % 8 == 0;
    p->vec_out = (!p->rc || aligned16(p->rc)) && (!p->cc || aligned16(p->cc)) && p->cols % 16 == 0;
    size_t gx = 4 * cdiv(p->rows, 128), gy = cdiv(p->cols, MX_TC);
    if (gx > 0x7FFFFFFFu || gy > 65535)
        return moe_errf(e, "%s: a %zu x %zu matrix is too large for one launch", fn, p->rows,
                        p->cols);
    dim3 grid((unsigned)gx, (unsigned)gy);
    if (swiglu) {
        swiglu_mxfp8_kernel<<<grid, MX_THREADS, 0, stream>>>(*p);
        return launched(fn, "swiglu_mxfp8_kernel", e);
    }
    mxfp8_rowcol_kernel<<<grid, MX_THREADS, 0, stream>>>(*p);
    return launched(fn, "mxfp8_rowcol_kernel", e);
}

extern "C" int lowp_cuda_mxfp8(const uint16_t *x, size_t rows, size_t cols, const lowp_mx_out *out,
                               cudaStream_t stream, moe_err *e)
{
    mx_params p = {};
    p.x = x, p.rows = rows, p.cols = cols;
    return mx_launch("lowp_cuda_mxfp8", &p, out, 0, stream, e);
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
    return mx_launch(fn, &p, out, 1, stream, e);
}

/* ---- FP8 block kernels -------------------------------------------------------------- */

#define BK 128
#define BK_THREADS 256
/* bytes per staged row of x^T codes: the 16-byte stores of a warp then
 * spread over the banks */
#define BK_SLD (BK + 16)

typedef struct {
    const uint16_t *x;
    size_t rows, cols;
    uint8_t *rc; /* codes [rows, cols] */
    float *rs;   /* 1x128 or 128x128 scales */
    uint8_t *tc; /* transposed codes [cols, rows] */
    float *ts;   /* their scales: 1x128 down the columns, or the 128x128 ones transposed */
    int vec_in, vec_rc, vec_tc;
} blk_params;

/* The 128 x 128 tile at (row0, col0) into shared memory, zeros outside;
 * returns the largest magnitude (15-bit pattern) of the values this thread
 * loaded, so a block-wide amax needs no second pass over the tile. */
__device__ __forceinline__ uint32_t abs_max2(uint32_t w)
{
    return max(w & 0x7FFFu, (w >> 16) & 0x7FFFu);
}

__device__ __forceinline__ uint32_t abs_max8(uint4 q)
{
    return max(max(abs_max2(q.x), abs_max2(q.y)), max(abs_max2(q.z), abs_max2(q.w)));
}

/* Per-column maxima, two 15-bit magnitudes a word (bf16 patterns with the
 * sign cleared order as their magnitudes, NaN above infinity, as the
 * reference's integer maxima do). */
__device__ __forceinline__ uint4 abs_max8_cols(uint4 m, uint4 q)
{
    const uint32_t k = 0x7FFF7FFFu;
    return make_uint4(__vmaxu2(m.x, q.x & k), __vmaxu2(m.y, q.y & k), __vmaxu2(m.z, q.z & k),
                      __vmaxu2(m.w, q.w & k));
}

/* The 128 x 128 tile at (row0, col0) into shared memory, zeros outside;
 * returns the largest magnitude (15-bit pattern) of the values this thread
 * loaded, so a block-wide amax needs no second pass over the tile. With
 * colmax (a full tile with 16-byte loads only), also the tile's column
 * maxima into colmax[warp][128]: a thread holds eight rows of the same eight
 * columns, the two lanes of a warp with those columns combine by a shuffle,
 * and the column passes then read eight words instead of 64 values. */
__device__ __forceinline__ uint32_t blk_load(const blk_params p, uint16_t *tile, size_t row0,
                                             size_t col0, int full, uint16_t *colmax)
{
    const int tid = threadIdx.x;
    uint32_t am = 0;
    if (full && p.vec_in) {
        uint4 q[BK * BK / 8 / BK_THREADS]; /* all eight loads in flight before the stores */
        for (int j = 0; j < BK * BK / 8 / BK_THREADS; j++) {
            int i = tid + j * BK_THREADS, r = i >> 4, v = i & 15;
            q[j] = __ldg((const uint4 *)(p.x + (row0 + r) * p.cols + col0 + v * 8));
        }
        uint4 cm = make_uint4(0, 0, 0, 0);
        for (int j = 0; j < BK * BK / 8 / BK_THREADS; j++) {
            int i = tid + j * BK_THREADS, r = i >> 4, v = i & 15;
            *(uint4 *)(tile + r * BK + v * 8) = q[j];
            am = max(am, abs_max8(q[j]));
            if (colmax)
                cm = abs_max8_cols(cm, q[j]);
        }
        if (colmax) {
            /* lanes l and l ^ 16 hold the same columns (v = tid & 15) */
            cm.x = __vmaxu2(cm.x, __shfl_xor_sync(0xFFFFFFFFu, cm.x, 16));
            cm.y = __vmaxu2(cm.y, __shfl_xor_sync(0xFFFFFFFFu, cm.y, 16));
            cm.z = __vmaxu2(cm.z, __shfl_xor_sync(0xFFFFFFFFu, cm.z, 16));
            cm.w = __vmaxu2(cm.w, __shfl_xor_sync(0xFFFFFFFFu, cm.w, 16));
            if ((tid & 31) < 16)
                *(uint4 *)(colmax + (tid >> 5) * BK + (tid & 15) * 8) = cm;
        }
    } else {
        for (int i = tid; i < BK * BK; i += BK_THREADS) {
            int r = i >> 7, c = i & 127;
            size_t gr = row0 + r, gc = col0 + c;
            uint16_t v = gr < p.rows && gc < p.cols ? p.x[gr * p.cols + gc] : 0;
            tile[i] = v;
            am = max(am, (uint32_t)(v & 0x7FFFu));
        }
    }
    return am;
}

/* Sixteen values of tile row r from column g*16, as two uint4: the half
 * that is read first alternates with g / 4 so that the eight threads of a
 * row hit distinct banks on each load. */
__device__ __forceinline__ void blk_row16(const uint16_t *tile, int r, int g, uint4 *lo, uint4 *hi)
{
    const uint4 *src = (const uint4 *)(tile + r * BK + g * 16);
    const int h = (g >> 2) & 1;
    uint4 first = src[h], second = src[h ^ 1];
    *lo = h ? second : first;
    *hi = h ? first : second;
}

/* Sixteen codes to the row codes at (gr, gc): one 16-byte store when the
 * tile is full and aligned, else byte by byte within the matrix. */
__device__ __forceinline__ void blk_row_store(const blk_params p, size_t gr, size_t gc, uint4 q,
                                              int full)
{
    uint8_t *dst = p.rc + gr * p.cols + gc;
    if (full && p.vec_rc) {
        *(uint4 *)dst = q;
        return;
    }
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    for (int j = 0; j < 16 && gc + j < p.cols; j++)
        dst[j] = (uint8_t)(w[j >> 2] >> (8 * (j & 3)));
}

/* The transposed codes of the tile, by all threads: column c = tid & 127,
 * rows h*64 .. h*64+63 (h = tid >> 7), quantised with the column's scale b;
 * staged in the tile's own memory once every thread has read it, written
 * out as 128-byte rows of x^T. */
__device__ __forceinline__ void blk_transposed_out(const blk_params p, uint16_t *tile, size_t row0,
                                                   size_t col0, const blk_scale b, int full)
{
    const int c = threadIdx.x & 127, h = threadIdx.x >> 7;
    uint32_t q[16];
    for (int j = 0; j < 16; j++) {
        const int r = h * 64 + j * 4;
        q[j] = blk_quant4(tile[r * BK + c] | (uint32_t)tile[(r + 1) * BK + c] << 16,
                          tile[(r + 2) * BK + c] | (uint32_t)tile[(r + 3) * BK + c] << 16, b);
    }
    __syncthreads(); /* everyone is done reading the tile: reuse it as the stage */
    uint8_t *stage = (uint8_t *)tile; /* [128 columns][BK_SLD], 18 KB of the 32 */
    for (int j = 0; j < 4; j++)
        *(uint4 *)(stage + c * BK_SLD + h * 64 + j * 16) =
            make_uint4(q[4 * j], q[4 * j + 1], q[4 * j + 2], q[4 * j + 3]);
    __syncthreads();
    stage_out<BK, BK_THREADS>(p.tc + col0 * p.rows + row0, p.rows, stage, BK_SLD, p.cols - col0,
                              p.rows - row0, full && p.vec_tc);
}

__global__ void __launch_bounds__(BK_THREADS) fp8blk_1x128_kernel(const blk_params p)
{
    __shared__ __align__(16) uint16_t tile[BK * BK];
    __shared__ uint32_t red[2][BK];
    __shared__ __align__(16) uint16_t colmax[BK_THREADS / 32][BK];
    const size_t rows = p.rows, cols = p.cols;
    const size_t row0 = (size_t)blockIdx.x * BK, col0 = (size_t)blockIdx.y * BK;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int full = row0 + BK <= rows && col0 + BK <= cols;
    const int cols_in_regs = full && p.vec_in && (p.tc || p.ts);
    blk_load(p, tile, row0, col0, full, cols_in_regs ? &colmax[0][0] : NULL);
    __syncthreads();

    /* rowwise: warp -> 16 rows, four at a time; eight lanes a row, sixteen
     * values a lane (the amax over the eight lanes by shuffles) */
    if (p.rc || p.rs) {
        const size_t ld = (rows + 3) / 4 * 4, kb = blockIdx.y;
        const int g = lane & 7;
        for (int k = 0; k < 4; k++) {
            const int r = warp * 16 + k * 4 + (lane >> 3);
            const size_t gr = row0 + r;
            if (row0 + warp * 16 + k * 4 >= ld)
                break; /* ld is a multiple of 4: the same for the whole warp */
            uint4 lo, hi;
            blk_row16(tile, r, g, &lo, &hi);
            uint32_t am = max(abs_max8(lo), abs_max8(hi));
            for (int o = 4; o > 0; o >>= 1)
                am = max(am, __shfl_xor_sync(0xFFFFFFFFu, am, o));
            const blk_scale b = blk_scale_of(am << 16);
            if (gr < rows && p.rc && col0 + g * 16 < cols)
                blk_row_store(p, gr, col0 + g * 16, blk_quant16(lo, hi, b), full);
            if (p.rs && g == 0)
                p.rs[kb * ld + gr] = gr < rows ? b.s0 : 0.0f;
        }
    }

    /* transposed: column c, rows h*64 .. h*64+63 per thread */
    if (p.tc || p.ts) {
        const int c = tid & 127, h = tid >> 7;
        const size_t gc = col0 + c, ld = (cols + 3) / 4 * 4, kb = blockIdx.x;
        uint32_t am = 0;
        if (cols_in_regs) {
            for (int w = 0; w < BK_THREADS / 32; w++)
                am = max(am, (uint32_t)colmax[w][c]);
        } else {
            for (int r = h * 64; r < h * 64 + 64; r++)
                am = max(am, (uint32_t)(tile[r * BK + c] & 0x7FFFu));
            red[h][c] = am;
            __syncthreads();
            am = max(red[0][c], red[1][c]);
        }
        const blk_scale b = blk_scale_of(am << 16);
        if (p.ts && h == 0 && gc < ld)
            p.ts[kb * ld + gc] = gc < cols ? b.s0 : 0.0f;
        if (p.tc)
            blk_transposed_out(p, tile, row0, col0, b, full);
    }
}

/* 128x128: one scale per tile; the codes rowwise, and/or transposed (the
 * operand x^T of the backward's dgrad, with the scales transposed too),
 * from one read of x. */
__global__ void __launch_bounds__(BK_THREADS) fp8blk_128x128_kernel(const blk_params p)
{
    __shared__ __align__(16) uint16_t tile[BK * BK];
    __shared__ uint32_t red[BK_THREADS / 32];
    const size_t rows = p.rows, cols = p.cols;
    const size_t row0 = (size_t)blockIdx.x * BK, col0 = (size_t)blockIdx.y * BK;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int full = row0 + BK <= rows && col0 + BK <= cols;
    uint32_t am = blk_load(p, tile, row0, col0, full, NULL);
    for (int o = 16; o > 0; o >>= 1)
        am = max(am, __shfl_xor_sync(0xFFFFFFFFu, am, o));
    if (lane == 0)
        red[warp] = am;
    __syncthreads(); /* the tile and the warps' maxima */
    am = 0;
    for (int w = 0; w < BK_THREADS / 32; w++)
        am = max(am, red[w]);
    const blk_scale b = blk_scale_of(am << 16);

    if (p.rc) {
        for (int i = tid; i < BK * BK / 16; i += BK_THREADS) {
            const int r = i >> 3, g = i & 7;
            const size_t gr = row0 + r, gc = col0 + g * 16;
            if (gr >= rows || gc >= cols)
                continue;
            uint4 lo, hi;
            blk_row16(tile, r, g, &lo, &hi);
            blk_row_store(p, gr, gc, blk_quant16(lo, hi, b), full);
        }
    }
    if (tid == 0) {
        const size_t nkb = cdiv(cols, BK), nrb = cdiv(rows, BK);
        const size_t ld = (nkb + 3) / 4 * 4, ldt = (nrb + 3) / 4 * 4;
        const size_t kb = blockIdx.y, rb = blockIdx.x;
        if (p.rs) {
            p.rs[rb * ld + kb] = b.s0;
            if (kb == nkb - 1)
                for (size_t k = nkb; k < ld; k++)
                    p.rs[rb * ld + k] = 0.0f;
        }
        if (p.ts) {
            p.ts[kb * ldt + rb] = b.s0;
            if (rb == nrb - 1)
                for (size_t k = nrb; k < ldt; k++)
                    p.ts[kb * ldt + k] = 0.0f;
        }
    }
    if (p.tc)
        blk_transposed_out(p, tile, row0, col0, b, full);
}

static int blk_grid(const char *fn, size_t rows, size_t cols, dim3 *grid, moe_err *e)
{
    size_t gx = cdiv(rows, BK), gy = cdiv(cols, BK);
    if (gx > 0x7FFFFFFFu || gy > 65535)
        return moe_errf(e, "%s: a %zu x %zu matrix is too large for one launch", fn, rows, cols);
    *grid = dim3((unsigned)gx, (unsigned)gy);
    return 0;
}

/* 16-byte code stores need the rows of codes 16-byte aligned */
static int vec_codes(const uint8_t *codes, size_t ld) { return codes && aligned16(codes) && ld % 16 == 0; }

extern "C" int lowp_cuda_fp8blk_1x128(const uint16_t *x, size_t rows, size_t cols, uint8_t *codes,
                                      float *scales, uint8_t *codes_t, float *scales_t,
                                      cudaStream_t stream, moe_err *e)
{
    static const char fn[] = "lowp_cuda_fp8blk_1x128";
    if (rows == 0 || cols == 0 || (!codes && !scales && !codes_t && !scales_t))
        return 0;
    blk_params p = {};
    p.x = x, p.rows = rows, p.cols = cols;
    p.rc = codes, p.rs = scales, p.tc = codes_t, p.ts = scales_t;
    p.vec_in = aligned16(x) && cols % 8 == 0;
    p.vec_rc = vec_codes(codes, cols);
    p.vec_tc = vec_codes(codes_t, rows);
    dim3 grid;
    if (blk_grid(fn, rows, cols, &grid, e))
        return -1;
    fp8blk_1x128_kernel<<<grid, BK_THREADS, 0, stream>>>(p);
    return launched(fn, "fp8blk_1x128_kernel", e);
}

extern "C" int lowp_cuda_fp8blk_128x128(const uint16_t *x, size_t rows, size_t cols, uint8_t *codes,
                                        float *scales, uint8_t *codes_t, float *scales_t,
                                        cudaStream_t stream, moe_err *e)
{
    static const char fn[] = "lowp_cuda_fp8blk_128x128";
    if (rows == 0 || cols == 0 || (!codes && !scales && !codes_t && !scales_t))
        return 0;
    blk_params p = {};
    p.x = x, p.rows = rows, p.cols = cols, p.rc = codes, p.rs = scales;
    p.tc = codes_t, p.ts = scales_t;
    p.vec_in = aligned16(x) && cols % 8 == 0;
    p.vec_rc = vec_codes(codes, cols);
    p.vec_tc = vec_codes(codes_t, rows);
    dim3 grid;
    if (blk_grid(fn, rows, cols, &grid, e))
        return -1;
    fp8blk_128x128_kernel<<<grid, BK_THREADS, 0, stream>>>(p);
    return launched(fn, "fp8blk_128x128_kernel", e);
}

/* ---- exhaustive checks on the device --------------------------------------------- */

/* What a check kernel counts: two kinds of mismatch and the smallest input
 * of the first kind. */
typedef struct {
    unsigned long long n[2];
    unsigned int first;
} check_counts;

/* launch(d) on counters d zeroed on the device, then *h = d (synchronous). */
static int run_check(const char *fn, const char *kernel, void (*launch)(check_counts *),
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

/* ---- the fast division, compared with IEEE's ------------------------------------- */

/* Block i takes the amax whose bf16 pattern is i + 1 (every positive
 * finite bf16, 0x0001 .. 0x7F7F), its threads every value v with |v| <=
 * amax, both signs: the pairs the quantisers divide. Counts those whose
 * E4M3 code from blk_div differs from that of __fdiv_rn (the fp32 quotients
 * that differ are counted for information). */
__global__ void fp8blk_div_check_kernel(check_counts *c) /* n[0] codes, n[1] quotients */
{
    const uint32_t a = blockIdx.x + 1u; /* bf16 magnitude pattern of the amax */
    const blk_scale b = blk_scale_of(a << 16);
    unsigned long long nc = 0, nq = 0;
    for (uint32_t m = threadIdx.x; m <= a; m += blockDim.x)
        for (uint32_t sign = 0; sign < 2; sign++) {
            const float v = __uint_as_float((m | sign << 15) << 16);
            const float exact = __fdiv_rn(v, b.s0), fast = blk_div(v, b);
            if (__float_as_uint(exact) != __float_as_uint(fast))
                nq++;
            if (lowp_e4m3_from_f32_int(exact) != lowp_e4m3_from_f32_int(fast)) {
                nc++;
                atomicMin(&c->first, a << 16 | (m | sign << 15));
            }
        }
    if (nc)
        atomicAdd(&c->n[0], nc);
    if (nq)
        atomicAdd(&c->n[1], nq);
}

static void launch_div_check(check_counts *d) { fp8blk_div_check_kernel<<<0x7F7F, 256>>>(d); }

extern "C" int lowp_cuda_fp8blk_div_check(unsigned long long *code_mismatch,
                                          unsigned long long *quotient_mismatch,
                                          uint32_t *first, moe_err *e)
{
    check_counts h;
    if (run_check("lowp_cuda_fp8blk_div_check", "fp8blk_div_check_kernel", launch_div_check, &h,
                  e))
        return -1;
    *code_mismatch = h.n[0], *quotient_mismatch = h.n[1], *first = h.first;
    return 0;
}

extern "C" int lowp_cuda_uses_fast_div(void)
{
#ifdef LOWP_CUDA_FAST_DIV
    return 1;
#else
    return 0;
#endif
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

/* moekit CUDA low precision, FP8 with block scales (lowp_cuda.h): 1x128
 * and 128x128 blocks, rowwise and transposed copies, and the check of the
 * fast division against IEEE's.
 *
 * One CTA per 128 x 128 tile (256 threads), read once into shared memory
 * (all of a thread's loads in flight at once). Rowwise codes: eight lanes a
 * row, sixteen values and one 16-byte store a lane (1x128: the row's amax
 * over those eight lanes). Transposed codes (1x128 down the columns, or
 * 128x128 for the dgrad weight w^T): two threads a column, staged in shared
 * memory and written out as 128-byte rows of x^T. 128x128: the block's amax
 * taken while loading. The division by a block's scale is a reciprocal
 * multiply with one exact-remainder correction (blk_div). */
#include "../lowp_kernels.cuh"

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

/* The parameters and grid of a quantiser's launch over x [rows, cols]: 0,
 * or 1 where there is nothing to write (no rows, or no output asked for),
 * or -1 where the matrix is too large for one launch. */
static int blk_setup(const char *fn, const uint16_t *x, size_t rows, size_t cols, uint8_t *codes,
                     float *scales, uint8_t *codes_t, float *scales_t, blk_params *p, dim3 *grid,
                     moe_err *e)
{
    if (rows == 0 || cols == 0 || (!codes && !scales && !codes_t && !scales_t))
        return 1;
    *p = blk_params{};
    p->x = x, p->rows = rows, p->cols = cols;
    p->rc = codes, p->rs = scales, p->tc = codes_t, p->ts = scales_t;
    p->vec_in = aligned16(x) && cols % 8 == 0;
    p->vec_rc = vec_codes(codes, cols);
    p->vec_tc = vec_codes(codes_t, rows);
    return blk_grid(fn, rows, cols, grid, e);
}

extern "C" int lowp_cuda_fp8blk_1x128(const uint16_t *x, size_t rows, size_t cols, uint8_t *codes,
                                      float *scales, uint8_t *codes_t, float *scales_t,
                                      cudaStream_t stream, moe_err *e)
{
    static const char fn[] = "lowp_cuda_fp8blk_1x128";
    blk_params p;
    dim3 grid;
    int rc = blk_setup(fn, x, rows, cols, codes, scales, codes_t, scales_t, &p, &grid, e);
    if (rc)
        return rc < 0 ? -1 : 0;
    fp8blk_1x128_kernel<<<grid, BK_THREADS, 0, stream>>>(p);
    return launched(fn, "fp8blk_1x128_kernel", e);
}

extern "C" int lowp_cuda_fp8blk_128x128(const uint16_t *x, size_t rows, size_t cols, uint8_t *codes,
                                        float *scales, uint8_t *codes_t, float *scales_t,
                                        cudaStream_t stream, moe_err *e)
{
    static const char fn[] = "lowp_cuda_fp8blk_128x128";
    blk_params p;
    dim3 grid;
    int rc = blk_setup(fn, x, rows, cols, codes, scales, codes_t, scales_t, &p, &grid, e);
    if (rc)
        return rc < 0 ? -1 : 0;
    fp8blk_128x128_kernel<<<grid, BK_THREADS, 0, stream>>>(p);
    return launched(fn, "fp8blk_128x128_kernel", e);
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

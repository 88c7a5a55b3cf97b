/* moekit CUDA low precision: the MXFP8 tile (rowwise and columnwise copies
 * of a 32 x 128 tile in one pass) that both the plain quantiser (mxfp8_kernels.cu)
 * and the fused SwiGLU x probability quantiser (swiglu.cu) run; the SwiGLU
 * element is lowp_swiglu_prob's bits (fp8_scalar.h).
 *
 * One CTA per 32 x 128 tile (128 threads). The tile is read once into
 * shared memory (coalesced 16-byte loads); then each thread quantises one
 * 1x32 row block (rowwise copy) and one 32x1 column (columnwise copy). Row
 * codes go straight out (32 contiguous bytes per thread), column codes are
 * staged in shared memory and written back as 16-byte rows. The grid spans
 * round_up(rows, 128) rows so the CTAs past the end write the zero padding
 * of the swizzled scale buffers; together they write every byte of them. */
#ifndef MOE_MX_TILE_CUH
#define MOE_MX_TILE_CUH

#include "../lowp_kernels.cuh"

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

/* 1. the tile into shared memory, zeros outside the matrix */
__device__ __forceinline__ void mx_load_tile(const mx_params p, const int swiglu, uint16_t *tile,
                                             size_t row0, size_t col0, int full)
{
    const size_t rows = p.rows, cols = p.cols;
    const int tid = threadIdx.x;
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
}

/* 2. rowwise: thread -> row r, block b (32 values) */
__device__ __forceinline__ void mx_rows(const mx_params p, const uint16_t *tile, size_t row0,
                                        size_t col0, size_t ct, size_t nkb, int full)
{
    const size_t rows = p.rows, cols = p.cols;
    const int tid = threadIdx.x;
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
__device__ __forceinline__ void mx_cols(const mx_params p, const uint16_t *tile, uint8_t *stage,
                                        size_t col0, size_t rt, size_t nrb)
{
    const size_t cols = p.cols;
    const int tid = threadIdx.x;
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

    mx_load_tile(p, swiglu, tile, row0, col0, full);
    __syncthreads();
    mx_rows(p, tile, row0, col0, ct, nkb, full);
    mx_cols(p, tile, stage, col0, rt, nrb);
    if (!p.cc)
        return;
    __syncthreads();
    stage_out<MX_TR, MX_THREADS>(p.cc + row0 * cols + col0, cols, stage, MX_CLD, rows - row0,
                                 cols - col0, full && p.vec_out);
}

/* p's outputs from `out`, its vector flags, and the grid: 0, 1 for an empty
 * matrix (nothing to launch), or -1 with e filled */
static inline int mx_setup(const char *fn, mx_params *p, const lowp_mx_out *out, int swiglu,
                           dim3 *grid, moe_err *e)
{
    if (p->rows == 0 || p->cols == 0)
        return 1;
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
    *grid = dim3((unsigned)gx, (unsigned)gy);
    return 0;
}

#endif

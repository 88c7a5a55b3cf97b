/* moekit CUDA backend: the building blocks of every FP8 GEMM path (the
 * expert FFN, cuda_moe_fp8.cu; the attention projections,
 * cuda_linear_lowp.cu): an operand quantised as the recipe wants it, one
 * block-scaled GEMM, and one linear layer's backward. fp8_ops.h says what
 * each takes. */
#include "../../lowp/fp8.h"
#include "../../lowp/fp8_gemm.h"
#include "../../lowp/lowp_cuda.h"
#include "cuda_fp8_ops.h"
#include "cuda_fp8_weight_cache.h"

#define U16(p) ((const uint16_t *)(p))

static const moe_recipe *recipe(moe_backend *be) { return CTX(be)->expert_recipe; }

const char *fp8_op_name(moe_backend *be, char *buf, size_t n, const char *op)
{
    snprintf(buf, n, "%s (%s)", op, precision_name(recipe(be)->precision));
    return buf;
}

int64_t fp8_rows(moe_backend *be, int64_t rows)
{
    return rows & ~(int64_t)(recipe(be)->align - 1);
}

static size_t fp8_row_scale_bytes(moe_backend *be, size_t outer, size_t k)
{
    return cuda_fp8_row_scale_bytes(recipe(be)->act_scales, outer, k);
}

static size_t fp8_weight_scale_bytes(moe_backend *be, size_t out, size_t in)
{
    return cuda_fp8_weight_scale_bytes(recipe(be)->weight_scales, out, in);
}

q8 fp8_act_scratch(moe_backend *be, int slot, size_t rows, size_t cols, int rowwise, int trans)
{
    q8 q = {NULL, NULL, NULL, NULL};
    if (rowwise) {
        q.codes = (uint8_t *)cuda_scratch(be, slot, rows * cols);
        q.scales = cuda_scratch(be, slot + 1, fp8_row_scale_bytes(be, rows, cols));
    }
    if (trans) {
        q.codes_t = (uint8_t *)cuda_scratch(be, slot + 2, rows * cols);
        q.scales_t = cuda_scratch(be, slot + 3, fp8_row_scale_bytes(be, cols, rows));
    }
    return q;
}

int fp8_q8_ok(const q8 *q, int rowwise, int trans)
{
    return (!rowwise || (q->codes && q->scales)) && (!trans || (q->codes_t && q->scales_t));
}

/* MXFP8 copies of x [rows, cols] (either may be NULL in q): blocked along
 * the rows into q->codes, down the columns then transposed into
 * q->codes_t; `tmp` holds the untransposed column codes */
static int mx_quant(moe_backend *be, const char *op, const q8 *q, uint8_t *tmp, const bf16 *x,
                    size_t rows, size_t cols)
{
    moe_err e = {{0}};
    lowp_mx_out o = {q->codes, NULL, (uint8_t *)q->scales, q->codes_t ? tmp : NULL, NULL,
                     (uint8_t *)q->scales_t};
    if (lowp_cuda_mxfp8(U16(x), rows, cols, &o, CTX(be)->stream, &e) ||
        (q->codes_t && lowp_cuda_transpose_u8(tmp, rows, cols, q->codes_t, CTX(be)->stream, &e))) {
        cuda_note(be, op, e.msg);
        return -1;
    }
    return 0;
}

int fp8_swiglu_mx(moe_backend *be, const char *op, const q8 *q, bf16 *a, const bf16 *h1,
                  const bf16 *h3, const float *p, size_t rows, int I)
{
    moe_err e = {{0}};
    lowp_mx_out o = {q->codes, NULL, (uint8_t *)q->scales, NULL, NULL, NULL};
    if (lowp_cuda_swiglu_mxfp8(U16(h1), U16(h3), p, rows, (size_t)I, (uint16_t *)a, &o,
                               CTX(be)->stream, &e)) {
        cuda_note(be, op, e.msg);
        return -1;
    }
    return 0;
}

/* the copies in q of x [rows, cols] bf16 (skipped copies NULL) */
int fp8_quant_act(moe_backend *be, const char *op, const q8 *q, const bf16 *x, size_t rows,
                  size_t cols)
{
    moe_err e = {{0}};
    if (recipe(be)->act_scales == MOE_SCALES_E8M0_1X32) {
        uint8_t *tmp = q->codes_t ? (uint8_t *)cuda_scratch(be, S_WT, rows * cols) : NULL;
        if (q->codes_t && !tmp)
            return -1;
        return mx_quant(be, op, q, tmp, x, rows, cols);
    }
    if (lowp_cuda_fp8blk_1x128(U16(x), rows, cols, q->codes, (float *)q->scales, q->codes_t,
                               (float *)q->scales_t, CTX(be)->stream, &e)) {
        cuda_note(be, op, e.msg);
        return -1;
    }
    return 0;
}

/* one expert's weight w [out, in] as the operand w (k = in) into slots dst,
 * dst + 1, or, transposed, w^T (k = out) into S_W, S_WS (mxfp8: S_WT holds
 * the untransposed codes on the way) */
static int fp8_quant_weight_into(moe_backend *be, const char *op, const bf16 *w, size_t out,
                                 size_t in, int transposed, int dst, uint8_t *to_codes,
                                 void *to_scales, lowp_fp8_operand *o);

int fp8_quant_weight(moe_backend *be, const char *op, const bf16 *w, size_t out, size_t in,
                     int transposed, int dst, lowp_fp8_operand *o)
{
    if (transposed)
        dst = S_W;
    if (cuda_wcache_find(be, w, out, in, transposed, o))
        return 0; /* quantised since the weights last changed */
    const size_t scale_bytes = transposed ? fp8_weight_scale_bytes(be, in, out)
                                          : fp8_weight_scale_bytes(be, out, in);
    void *kept_codes = NULL, *kept_scales = NULL;
    cuda_fp8_wcopy *kept = cuda_wcache_claim(be, w, out, in, transposed, out * in, scale_bytes,
                                             &kept_codes, &kept_scales);
    int rc = fp8_quant_weight_into(be, op, w, out, in, transposed, dst,
                                   kept ? (uint8_t *)kept_codes : NULL, kept_scales, o);
    if (rc == 0 && kept)
        cuda_wcache_keep(be, kept, o);
    return rc;
}

/* fp8_quant_weight's quantisation, into codes and scales (NULL: slots dst,
 * dst + 1) */
static int fp8_quant_weight_into(moe_backend *be, const char *op, const bf16 *w, size_t out,
                                 size_t in, int transposed, int dst, uint8_t *to_codes,
                                 void *to_scales, lowp_fp8_operand *o)
{
    cuda_ctx *c = CTX(be);
    moe_err e = {{0}};
    if (recipe(be)->weight_scales == MOE_SCALES_E8M0_1X32) {
        q8 q = {NULL, NULL, NULL, NULL};
        uint8_t *codes = to_codes ? to_codes : (uint8_t *)cuda_scratch(be, dst, out * in);
        void *scales = to_scales ? to_scales
                                 : cuda_scratch(be, dst + 1, transposed ? fp8_weight_scale_bytes(be, in, out)
                                                                        : fp8_weight_scale_bytes(be, out, in));
        uint8_t *tmp = transposed ? (uint8_t *)cuda_scratch(be, S_WT, out * in) : NULL;
        if (!codes || !scales || (transposed && !tmp))
            return -1;
        if (transposed)
            q.codes_t = codes, q.scales_t = scales;
        else
            q.codes = codes, q.scales = scales;
        if (mx_quant(be, op, &q, tmp, w, out, in))
            return -1;
        o->codes = codes, o->scales = scales, o->kind = recipe(be)->weight_scales;
        return 0;
    }
    /* fp8_block: w, or w^T's codes and scales straight from w in one pass */
    size_t n_scales = transposed ? lowp_fp8blk_128x128_scales(in, out)
                                 : lowp_fp8blk_128x128_scales(out, in);
    uint8_t *codes = to_codes ? to_codes : (uint8_t *)cuda_scratch(be, dst, out * in);
    float *scales = to_scales ? (float *)to_scales : (float *)cuda_scratch(be, dst + 1, 4 * n_scales);
    if (!codes || !scales)
        return -1;
    int rc = transposed ? lowp_cuda_fp8blk_128x128(U16(w), out, in, NULL, NULL, codes, scales,
                                                   c->stream, &e)
                        : lowp_cuda_fp8blk_128x128(U16(w), out, in, codes, scales, NULL, NULL,
                                                   c->stream, &e);
    if (rc) {
        cuda_note(be, op, e.msg);
        return -1;
    }
    o->codes = codes, o->scales = scales, o->kind = recipe(be)->weight_scales;
    return 0;
}

/* out = b . a^T with a quantised as ak, b an activation copy of this recipe */
void fp8_gemm8(moe_backend *be, const char *op, int m, int n, int k, const uint8_t *ac,
               const void *as, lowp_blk_kind ak, const uint8_t *bc, const void *bs, void *out,
               int out_fp32, float beta)
{
    cuda_ctx *c = CTX(be);
    lowp_fp8_operand a = {ac, as, ak}, b = {bc, bs, recipe(be)->act_scales};
    moe_err e = {{0}};
    if (lowp_fp8_gemm_run(c->fp8_gemm, c->stream, m, n, k, &a, &b, out,
                          out_fp32 ? LOWP_OUT_F32 : LOWP_OUT_BF16, 1.f, beta, &e))
        cuda_note(be, op, e.msg);
}

int64_t fp8_chunk_len(moe_backend *be, int64_t n8, int64_t c0)
{
    int64_t ch = CTX(be)->fp8_chunk_rows;
    return n8 - c0 < ch ? n8 - c0 : ch;
}

/* ---- one linear layer's backward ---- */

int fp8_proj_bwd(moe_backend *be, const char *op, bf16 *dx, float dx_beta, float *dw,
                 float dw_beta, const bf16 *dy, const bf16 *xin, const bf16 *w, const q8 *dyq,
                 const q8 *xq, int64_t rows, int64_t nd, int64_t nw, int in, int out,
                 int x_ready)
{
    if (!dx)
        nd = 0;
    const int64_t n8 = nd > nw ? nd : nw, ch = CTX(be)->fp8_chunk_rows;
    lowp_fp8_operand wt;
    if (nd && fp8_quant_weight(be, op, w, out, in, 1, S_W, &wt))
        return -1;
    for (int64_t c0 = 0; c0 < n8; c0 += ch) {
        int64_t cn = fp8_chunk_len(be, n8, c0);
        if (fp8_quant_act(be, op, dyq, dy + c0 * out, cn, out))
            return -1;
        if (nw && !(x_ready && n8 <= ch) && fp8_quant_act(be, op, xq, xin + c0 * in, cn, in))
            return -1;
        if (nd)
            fp8_gemm8(be, op, in, (int)cn, out, wt.codes, wt.scales, wt.kind, dyq->codes,
                      dyq->scales, dx + c0 * in, 0, dx_beta);
        if (nw)
            fp8_gemm8(be, op, in, out, (int)cn, xq->codes_t, xq->scales_t,
                      recipe(be)->act_scales, dyq->codes_t, dyq->scales_t,
                      dw, 1, c0 ? 1.f : dw_beta);
    }
    if (dx && rows > nd)
        cuda_gemm_dyw(be, dx + nd * in, dy + nd * out, w, (int)(rows - nd), in, out, dx_beta);
    if (rows > nw)
        cuda_gemm_dyTx(be, dw, dy + nw * out, xin + nw * in, (int)(rows - nw), in, out,
                       nw ? 1.f : dw_beta);
    return 0;
}


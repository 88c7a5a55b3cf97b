/* moekit low precision on the GPU: MXFP8 (rowwise + columnwise in one pass,
 * scales also in cuBLASLt's swizzled layout), the fused SwiGLU x router
 * probability -> MXFP8 kernel, and FP8 1x128 / 128x128 block quantisers.
 *
 * Every output byte equals what the C reference in fp8.h computes for the
 * same input (tests/gpu/test_lowp_cuda.c checks all of them): the kernels
 * share the scalar code of fp8_scalar.h and use only integer operations,
 * single correctly rounded fp32 operations and (LOWP_HW_CVT=1, the default)
 * the E4M3 conversion instruction, equal to the integer encoder on all 2^32
 * inputs.
 *
 * Inputs are bf16 (uint16 bit patterns) in device memory, row-major
 * [rows, cols]. Any output pointer may be NULL to skip that output. Calls
 * are asynchronous on `stream`; a launch failure returns -1 with a message
 * naming the function, the kernel and cudaGetErrorString (execution errors
 * surface at the caller's next synchronisation). Buffers 16-byte aligned
 * with cols a multiple of 16 take the vectorised paths; anything else is
 * still correct, only slower. */
#ifndef MOE_LOWP_CUDA_H
#define MOE_LOWP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "../../common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MXFP8 outputs for a [rows, cols] input, laid out as in fp8.h:
 *   row_codes [rows, cols], row_scales [rows, ceil(cols/32)],
 *   row_swizzled lowp_mx_swizzled_bytes(rows, ceil(cols/32)) bytes,
 *   col_codes [rows, cols], col_scales [ceil(rows/32), cols],
 *   col_swizzled lowp_mx_swizzled_bytes(cols, ceil(rows/32)) bytes;
 * the swizzled buffers are written whole, padding (0) included. */
typedef struct {
    uint8_t *row_codes, *row_scales, *row_swizzled;
    uint8_t *col_codes, *col_scales, *col_swizzled;
} lowp_mx_out;

/* x bf16 [rows, cols] -> both MXFP8 copies, one read of x. */
int lowp_cuda_mxfp8(const uint16_t *x, size_t rows, size_t cols, const lowp_mx_out *out,
                    cudaStream_t stream, moe_err *e);

/* y = bf16(silu(gate) * up * prob[row]) (lowp_swiglu_prob: computed in fp32,
 * rounded to bf16 FIRST), then y quantised to both MXFP8 copies in the same
 * pass. gate, up bf16 [rows, f]; prob fp32 [rows]; y (optional) bf16
 * [rows, f] receives the unquantised values. */
int lowp_cuda_swiglu_mxfp8(const uint16_t *gate, const uint16_t *up, const float *prob, size_t rows,
                           size_t f, uint16_t *y, const lowp_mx_out *out, cudaStream_t stream,
                           moe_err *e);

/* FP8 1x128 block scaling of x bf16 [rows, cols], one read of x:
 *   codes [rows, cols] + scales (lowp_fp8blk_1x128_scales(rows, cols) floats):
 *     128-blocks along the rows, the operand x (lowp_fp8blk_1x128);
 *   codes_t [cols, rows] + scales_t (lowp_fp8blk_1x128_scales(cols, rows)):
 *     128-blocks down the columns, written transposed, the operand x^T
 *     (lowp_fp8blk_1x128_t). Padding scale entries are written (0). */
int lowp_cuda_fp8blk_1x128(const uint16_t *x, size_t rows, size_t cols, uint8_t *codes,
                           float *scales, uint8_t *codes_t, float *scales_t, cudaStream_t stream,
                           moe_err *e);

/* FP8 128x128 block scaling of x bf16 [rows, cols], one read of x (either
 * pair may be NULL):
 *   codes [rows, cols] + scales (lowp_fp8blk_128x128_scales(rows, cols)
 *     floats): the operand x (lowp_fp8blk_128x128);
 *   codes_t [cols, rows] + scales_t (lowp_fp8blk_128x128_scales(cols, rows)):
 *     the operand x^T, byte for byte lowp_fp8blk_128x128 of x^T (a block has
 *     the same scale either way). */
int lowp_cuda_fp8blk_128x128(const uint16_t *x, size_t rows, size_t cols, uint8_t *codes,
                             float *scales, uint8_t *codes_t, float *scales_t, cudaStream_t stream,
                             moe_err *e);

/* MXFP8 quantise-dequantise, bf16 -> bf16 (lowp_mxfp8_fake_bf16); y may
 * be x. */
int lowp_cuda_mxfp8_fake_bf16(const uint16_t *x, size_t rows, size_t cols, int colwise,
                              uint16_t *y, cudaStream_t stream, moe_err *e);

/* out [cols, rows] = in [rows, cols] transposed, bytes (E4M3 codes); rows
 * and cols multiples of 4, pointers 4-byte aligned. */
int lowp_cuda_transpose_u8(const uint8_t *in, size_t rows, size_t cols, uint8_t *out,
                           cudaStream_t stream, moe_err *e);

/* Compare the integer E4M3 encoder (lowp_e4m3_from_f32_int) with the GPU's
 * cvt.rn.satfinite.e4m3x2.f32 over all 2^32 fp32 inputs (compute capability
 * 8.9+; returns -1 elsewhere). Synchronous. *mismatch counts disagreeing
 * non-NaN inputs (the smallest in *first), *nan_mismatch NaN inputs. */
int lowp_cuda_e4m3_hw_check(unsigned long long *mismatch, unsigned long long *nan_mismatch,
                            uint32_t *first, moe_err *e);

/* The FP8 block quantisers divide by a block's scale with a reciprocal and
 * one exact-remainder correction instead of an IEEE division (LOWP_FAST_DIV
 * in rules.mk). Compare the two over every pair they meet: each positive
 * finite bf16 amax with each bf16 value of at most its magnitude, both signs.
 * Synchronous. *code_mismatch counts pairs with different E4M3 codes (the
 * smallest as amax_bits << 16 | value_bits in *first), *quotient_mismatch
 * pairs with different fp32 quotients. */
int lowp_cuda_fp8blk_div_check(unsigned long long *code_mismatch,
                               unsigned long long *quotient_mismatch, uint32_t *first, moe_err *e);

/* The SwiGLU kernels' silu divides the same way (where its operands keep
 * the correction exact). Compare it with the IEEE division's on every bf16
 * gate. Synchronous. *mismatch counts gates with other fp32 results (NaN
 * gates must give NaN), the smallest pattern in *first. */
int lowp_cuda_silu_check(unsigned long long *mismatch, uint32_t *first, moe_err *e);

/* The SwiGLU -> MXFP8 kernel's silu table (see mxfp8/swiglu_mxfp8.cu) copied to
 * host: 65536 floats, silu of each bf16 gate pattern (filled on stream,
 * then copied: synchronous). The test compares it with lowp_silu on every
 * gate. */
int lowp_cuda_silu_table(float *host, cudaStream_t stream, moe_err *e);

/* 0: the SwiGLU -> MXFP8 kernel computes silu instead of looking it up (the
 * same bits; for the timing comparison). Default 1. Not thread-safe. */
void lowp_cuda_set_silu_lookup(int on);

/* 1 when the FP8 block quantisers use that division. */
int lowp_cuda_uses_fast_div(void);

/* 1 when the kernels convert to E4M3 with the cvt instruction (built with
 * LOWP_HW_CVT=1, the default), 0 when with the integer encoder. */
int lowp_cuda_uses_hw_cvt(void);

#ifdef __cplusplus
}
#endif

#endif

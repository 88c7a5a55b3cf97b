/* moekit CUDA backend: the sizes of the device memory it takes beside
 * be->alloc, each written once for the op that takes it and for the memory
 * plan (trainer/plan/plan_device.c), which links no CUDA: plain C, no CUDA
 * header. The scratch slots (cuda_internal.h) grow on first use to the
 * largest request and keep cuda_scratch_grown's head room. */
#ifndef MOE_CUDA_SCRATCH_SIZES_H
#define MOE_CUDA_SCRATCH_SIZES_H

#include <stddef.h>
#include <stdint.h>

#include "../../../common/precision.h"
#include "../../lowp/fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* a scratch slot asked for `bytes` allocates a quarter more, so later steps of
 * other shapes rarely regrow it */
static inline size_t cuda_scratch_grown(size_t bytes) { return bytes + bytes / 4; }

/* cuBLASLt's workspace for the bf16 GEMMs, and the FP8 GEMMs' own (each allocated once) */
#define CUDA_GEMM_WORKSPACE_BYTES ((size_t)32 << 20)
#define CUDA_FP8_GEMM_WORKSPACE_BYTES ((size_t)32 << 20)

/* slot 0: the lm head's logits, streamed in chunks of tokens that keep the block
 * at 256 MiB of bf16 */
static inline int cuda_logits_chunk_rows(int N, int V)
{
    size_t chunk = ((size_t)256 << 20) / ((size_t)V * 2);
    return chunk < 1 ? 1 : chunk > (size_t)N ? N : (int)chunk;
}
static inline size_t cuda_logits_bytes(int N, int V)
{
    return (size_t)cuda_logits_chunk_rows(N, V) * (size_t)V * 2;
}

/* slot 1: the router's bf16 logit gradients [N, E] */
static inline size_t cuda_router_dlogits_bytes(size_t N, int E) { return 2 * N * (size_t)E + 64; }

/* slot 2: the own attention kernels' backward row sums D [B, T, NH] (fp32) */
static inline size_t cuda_attn_delta_bytes(size_t B, size_t T, size_t NH) { return 4 * B * T * NH; }

/* slot 20: after cuDNN's own workspace, the backward's fp32 delta [B, NH, T]
 * and dQ accumulator [B, NH, T, HD], each from a 256-byte boundary */
static inline size_t cuda_align256(size_t n) { return (n + 255) & ~(size_t)255; }
static inline size_t cuda_cudnn_bwd_extra_bytes(size_t B, size_t NH, size_t T, size_t HD,
                                                size_t *delta_bytes)
{
    size_t d = cuda_align256(4 * B * NH * T);
    if (delta_bytes)
        *delta_bytes = d;
    return d + cuda_align256(4 * B * NH * T * HD);
}
static inline size_t cuda_cudnn_scratch_bytes(size_t workspace, size_t extra)
{
    return cuda_align256(workspace) + extra + 256;
}

/* slots 3-6: the experts' backward a, da, dh1, dh3, each [rows, I] bf16 for one
 * chunk of the busiest expert's rows (at most runtime.expert_chunk_rows) */
static inline size_t cuda_expert_bwd_slot_bytes(size_t rows, int I)
{
    return (rows ? rows : 1) * (size_t)I * 2;
}

/* slots 5, 6 in the FP8 forward with E4M3-saved h1, h3: their bf16 values for
 * every row of the pass before the saved copies are made */
static inline size_t cuda_fp8_h_bf16_bytes(size_t rows_all, int I) { return rows_all * (size_t)I * 2; }

/* Whether fp8_block's forward with E4M3-saved h1, h3 runs an expert's rows a
 * chunk at a time end to end (up projections, SwiGLU writing the kept codes,
 * down projection): where the SwiGLU kernel writes the codes itself
 * (runtime.fp8_fused_save, a width of a multiple of 256). Then slots 5, 6
 * hold one chunk of bf16 h1, h3 (as the backward's dh1, dh3 do), not the
 * pass's: at 64k tokens 2 x 3.8 GB become 2 x 0.23 GB, for a third weight
 * copy of one expert (its w2, 56 MiB at Mixtral's sizes). */
static inline int cuda_fp8_fwd_chunked(int saved8, int fused_save, int I)
{
    return saved8 && fused_save && I % 256 == 0;
}

/* slot 7: split masters moved between host fp32 and device halves this many
 * at a time (start-up, checkpoints) */
#define CUDA_SPLIT_STAGE_ELEMS ((size_t)16 << 20)
static inline size_t cuda_split_stage_bytes(size_t n)
{
    size_t piece = n < CUDA_SPLIT_STAGE_ELEMS ? n : CUDA_SPLIT_STAGE_ELEMS;
    return (piece ? piece : 1) * 4;
}

/* slot 21: RMSNorm's weight-gradient partial sums, [blocks, C] fp32; the
 * persistent grid is capped at CUDA_NORM_GRID_MAX blocks, the row-block
 * kernel takes one block per 16 rows */
#define CUDA_NORM_GRID_MAX 4096
#define CUDA_NORM_ROWS 16
static inline size_t cuda_norm_partials_bytes(size_t blocks, int C) { return 4 * blocks * (size_t)C; }
static inline size_t cuda_norm_blocks_max(size_t N)
{
    size_t rowwise = (N + CUDA_NORM_ROWS - 1) / CUDA_NORM_ROWS;
    size_t grid = N < CUDA_NORM_GRID_MAX ? N : CUDA_NORM_GRID_MAX;
    return rowwise > grid ? rowwise : grid;
}

/* the FP8 paths' scales of an operand [outer, k] quantised along k as a
 * recipe's activations are: fp32 1x128 blocks (fp8_block), E8M0 1x32
 * swizzled for cuBLASLt (mxfp8) */
static inline size_t cuda_fp8_row_scale_bytes(moe_scale_layout s, size_t outer, size_t k)
{
    return s == MOE_SCALES_E8M0_1X32 ? lowp_mx_swizzled_bytes(outer, lowp_ceil_div(k, LOWP_MX_BLOCK))
                                     : 4 * lowp_fp8blk_1x128_scales(outer, k);
}
/* a weight [out, in]'s scales as the recipe quantises weights: fp32 128x128
 * tiles (fp8_block), E8M0 1x32 like the activations (mxfp8) */
static inline size_t cuda_fp8_weight_scale_bytes(moe_scale_layout s, size_t out, size_t in)
{
    return s == MOE_SCALES_FP32_128X128 ? 4 * lowp_fp8blk_128x128_scales(out, in)
                                        : cuda_fp8_row_scale_bytes(s, out, in);
}

#ifdef __cplusplus
}
#endif

#endif

/* moekit: a GPU rank's memory beside be->alloc (plan_device.h). */
#include "plan_device.h"

#include <string.h>

#include "../backend/cuda/cuda_scratch_sizes.h"

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

size_t plan_cudnn_workspace_estimate(size_t B, size_t NH, size_t T, size_t HD)
{
    return 4 * B * NH * T * HD;
}
/* a slot asked for `bytes` at most holds this */
static size_t slot(size_t bytes) { return bytes ? cuda_scratch_grown(bytes) : 0; }

/* The FP8 paths' slots 8-19 (cuda_fp8_ops.h): copies of one chunk of
 * activations (rowwise and transposed: the gradient; transposed: the GEMM
 * input) and one weight operand with its transposed codes on the way. */
static size_t fp8_copies(const moe_config *c, const moe_recipe *r, size_t C, size_t I, size_t QD)
{
    size_t ch = (size_t)c->runtime.fp8_chunk_rows;
    size_t wide = max2(max2(C, I), QD);
    size_t codes = ch * wide;
    const moe_scale_layout as = r->act_scales, ws = r->weight_scales;
    size_t act = slot(codes) + slot(cuda_fp8_row_scale_bytes(as, ch, wide)) /* gradient, rows */
                 + slot(codes) + slot(cuda_fp8_row_scale_bytes(as, wide, ch)) /* and transposed */
                 + slot(codes) + slot(cuda_fp8_row_scale_bytes(as, wide, ch)); /* input, transposed */
    size_t w = max2(C * I, QD * C), wout = max2(C, QD), win = max2(I, C);
    size_t wscales = max2(cuda_fp8_weight_scale_bytes(ws, wout, win),
                          cuda_fp8_weight_scale_bytes(ws, win, wout));
    return act + slot(w) + slot(wscales) + slot(w);
}

/* one weight [out, in]'s FP8 copy in one orientation: codes and scales, as
 * the cache allocates them (cuda_fp8_weight_cache.cu: their exact sizes,
 * not grown like scratch) */
static size_t fp8_weight_copy(const moe_recipe *r, size_t out, size_t in)
{
    size_t scales = cuda_fp8_weight_scale_bytes(r->weight_scales, out, in);
    return out * in + (scales ? scales : 16);
}

/* runtime.fp8_weight_cache: every weight an FP8 GEMM reads, as w and as w^T
 * (the forward's and the data gradient's operands), kept for the step: the
 * local experts' w1, w3, w2 in every layer, and with precision.layers = all
 * the attention projections */
static size_t fp8_kept_weights(const moe_config *c, const moe_recipe *r, int ep, size_t C, size_t I, size_t QD)
{
    const moe_model_cfg *m = &c->model;
    size_t local = (size_t)(m->num_experts / (ep > 0 ? ep : 1));
    size_t HD = m->head_dim ? (size_t)m->head_dim : C / (size_t)m->num_heads;
    size_t KVD = (size_t)m->num_kv_heads * HD;
    size_t layer = local * (2 * (fp8_weight_copy(r, I, C) + fp8_weight_copy(r, C, I)) +
                            fp8_weight_copy(r, C, I) + fp8_weight_copy(r, I, C));
    if (c->precision.layers == MOE_LAYERS_ALL)
        layer += fp8_weight_copy(r, QD, C) + fp8_weight_copy(r, C, QD) +
                 2 * (fp8_weight_copy(r, KVD, C) + fp8_weight_copy(r, C, KVD)) +
                 fp8_weight_copy(r, C, QD) + fp8_weight_copy(r, QD, C);
    return (size_t)m->num_layers * layer;
}

void plan_device_rows(const moe_config *c, int ep, int dp, size_t cap_rows, size_t params_local,
                      size_t bytes[PLAN_DEV_ROWS])
{
    memset(bytes, 0, sizeof(size_t) * PLAN_DEV_ROWS);
    const moe_model_cfg *m = &c->model;
    size_t B = (size_t)c->train.micro_batch_size, T = (size_t)c->train.seq_length, N = B * T;
    size_t C = (size_t)m->hidden_size, I = (size_t)m->intermediate_size, E = (size_t)m->num_experts;
    size_t NH = (size_t)m->num_heads, HD = m->head_dim ? (size_t)m->head_dim : C / NH, QD = NH * HD;
    const moe_recipe *r = precision_recipe(c->precision.compute); /* NULL: auto */
    const int fp8 = r && r->gemms == MOE_GEMMS_E4M3;

    /* slots 3-6: one chunk of the busiest expert's rows, at most a pass's */
    size_t rows_bwd = cap_rows < (size_t)c->runtime.expert_chunk_rows
                          ? cap_rows : (size_t)c->runtime.expert_chunk_rows;
    size_t bwd = slot(cuda_expert_bwd_slot_bytes(rows_bwd, (int)I));
    bytes[PLAN_DEV_EXPERT_BWD] = 4 * bwd;
    /* slots 5, 6 again: fp8_block with E4M3-saved h1, h3 first holds them in bf16 for the pass */
    if (r && r->saves_e4m3_swiglu_in && c->precision.fp8_saved_activations) {
        if (cuda_fp8_fwd_chunked(1, c->runtime.fp8_fused_save, (int)I)) {
            /* a chunk's bf16 h1, h3 fit the backward's slots; one more weight copy (w2) */
            bytes[PLAN_DEV_FP8_H] = slot(C * I) + slot(4 * lowp_fp8blk_128x128_scales(C, I));
        } else {
            size_t h = slot(cuda_fp8_h_bf16_bytes(cap_rows, (int)I));
            bytes[PLAN_DEV_FP8_H] = h > bwd ? 2 * (h - bwd) : 0;
        }
    }
    if (fp8)
        bytes[PLAN_DEV_FP8_COPIES] = fp8_copies(c, r, C, I, QD);
    if (fp8 && c->runtime.fp8_weight_cache)
        bytes[PLAN_DEV_FP8_WEIGHTS] = fp8_kept_weights(c, r, ep, C, I, QD);
    else if (r && r->gemms == MOE_GEMMS_E4M3_EMULATED) /* four bf16 copies of a pass's rows, one weight */
        bytes[PLAN_DEV_FP8_COPIES] = 4 * slot(cap_rows * max2(C, I) * 2) + slot(C * I * 2);
    bytes[PLAN_DEV_ATTENTION] =
        c->runtime.attention == MOE_RT_ATTN_CUDNN
            ? slot(cuda_cudnn_scratch_bytes(plan_cudnn_workspace_estimate(B, NH, T, HD),
                                            cuda_cudnn_bwd_extra_bytes(B, NH, T, HD, NULL)))
            : slot(cuda_attn_delta_bytes(B, T, NH));
    bytes[PLAN_DEV_OTHER_SCRATCH] =
        slot(cuda_logits_bytes((int)N, m->vocab_size)) +
        slot(cuda_router_dlogits_bytes(N, (int)E)) +
        slot(cuda_norm_partials_bytes(cuda_norm_blocks_max(N), (int)C)) +
        slot(cuda_split_stage_bytes(params_local)) + 4 * N /* per-token losses */;
    bytes[PLAN_DEV_GEMM_WS] = (c->runtime.gemm == MOE_RT_GEMM_CUBLASLT ? CUDA_GEMM_WORKSPACE_BYTES : 0) +
                              (fp8 ? CUDA_FP8_GEMM_WORKSPACE_BYTES : 0);
    /* the EP group's all-to-all and ring; the world's and the DP group's rings */
    size_t ring = (size_t)PLAN_NCCL_RING_CHANNELS * PLAN_NCCL_CONNECTION_BYTES;
    int world = ep * dp;
    bytes[PLAN_DEV_NCCL] = (ep > 1 ? (size_t)(ep - 1) * PLAN_NCCL_P2P_PEER_BYTES + ring : 0) +
                           (world > 1 ? ring : 0) + (dp > 1 ? ring : 0);
    bytes[PLAN_DEV_CONTEXT] = PLAN_CUDA_CONTEXT_BYTES;
    bytes[PLAN_DEV_MARGIN] = PLAN_MARGIN_BYTES;
}

const char *plan_device_row_name(plan_dev_row r)
{
    static const char *const names[PLAN_DEV_ROWS] = {
        [PLAN_DEV_EXPERT_BWD] = "scratch: experts' backward chunks",
        [PLAN_DEV_FP8_H] = "scratch: FP8 forward's h1, h3 / w2",
        [PLAN_DEV_FP8_COPIES] = "scratch: FP8 quantised copies",
        [PLAN_DEV_FP8_WEIGHTS] = "FP8 weights kept for a step",
        [PLAN_DEV_ATTENTION] = "scratch: attention backward",
        [PLAN_DEV_OTHER_SCRATCH] = "scratch: logits, router, norms",
        [PLAN_DEV_GEMM_WS] = "cuBLASLt workspaces",
        [PLAN_DEV_NCCL] = "NCCL buffers",
        [PLAN_DEV_CONTEXT] = "CUDA context",
        [PLAN_DEV_MARGIN] = "margin",
    };
    return r < PLAN_DEV_ROWS ? names[r] : "?";
}

const char *plan_device_row_source(plan_dev_row r)
{
    static const char *const src[PLAN_DEV_ROWS] = {
        [PLAN_DEV_EXPERT_BWD] = "4 x min(rows, runtime.expert_chunk_rows) x I bf16 (cuda_scratch_sizes.h)",
        [PLAN_DEV_FP8_H] = "chunked: one expert's w2 in E4M3; else 2 x pass rows x I bf16 less the "
                           "backward's slots (cuda_scratch_sizes.h)",
        [PLAN_DEV_FP8_COPIES] = "runtime.fp8_chunk_rows of codes and scales, one weight (cuda_scratch_sizes.h)",
        [PLAN_DEV_FP8_WEIGHTS] = "runtime.fp8_weight_cache: layers x local experts x w1, w3, w2 as w and w^T "
                                 "(and the attention projections with precision.layers = all)",
        [PLAN_DEV_ATTENTION] = "fp32 delta + dQ [B, NH, T, HD] (cuda_scratch_sizes.h) + cuDNN's own, estimated",
        [PLAN_DEV_OTHER_SCRATCH] = "cuda_scratch_sizes.h",
        [PLAN_DEV_GEMM_WS] = "32 MiB each (cuda_scratch_sizes.h)",
        [PLAN_DEV_NCCL] = "derived: 10 MiB a connection x 32 ring channels, 447 MiB an all-to-all peer",
        [PLAN_DEV_CONTEXT] = "estimated constant, sm_90/sm_100",
        [PLAN_DEV_MARGIN] = "named margin: fragmentation, what no row sees",
    };
    return r < PLAN_DEV_ROWS ? src[r] : "?";
}

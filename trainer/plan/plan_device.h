/* moekit: what a GPU rank holds beside what be->alloc allocates.
 *
 * The memory plan counts be->alloc exactly (plan.h); a rank also holds the
 * cuda backend's scratch, grown on first use to the largest request of a
 * step (its sizes: trainer/backend/cuda/cuda_scratch_sizes.h, which the
 * backend's ops call too), the GEMM libraries' workspaces, NCCL's buffers
 * for the world, EP and DP communicators, and the CUDA context; and a run
 * needs a margin for what no formula sees (allocator fragmentation, cuDNN's
 * own workspace, chosen with its plan). One row each, with where its figure
 * comes from: computed from the config, derived from NCCL's defaults, or an
 * estimated constant, said as such. */
#ifndef MOE_PLAN_DEVICE_H
#define MOE_PLAN_DEVICE_H

#include <stddef.h>

#include "../config/config.h"

typedef enum {
    PLAN_DEV_EXPERT_BWD,    /* the experts' backward chunks a, da, dh1, dh3 */
    PLAN_DEV_FP8_H,         /* the FP8 forward's bf16 h1, h3 beyond the backward's slots */
    PLAN_DEV_FP8_COPIES,    /* the FP8 paths' quantised copies of activations and weights */
    PLAN_DEV_FP8_WEIGHTS,   /* the weights' FP8 copies kept for a step (runtime.fp8_weight_cache) */
    PLAN_DEV_ATTENTION,     /* the attention backward's fp32 delta and dQ accumulator */
    PLAN_DEV_OTHER_SCRATCH, /* LM-head logits chunk, router gradients, norm partials, staging */
    PLAN_DEV_GEMM_WS,       /* cuBLASLt's workspaces (bf16 and FP8 GEMMs) */
    PLAN_DEV_NCCL,          /* NCCL's buffers of the three communicators */
    PLAN_DEV_CONTEXT,       /* the CUDA context with its libraries' kernels */
    PLAN_DEV_MARGIN,        /* what no row sees */
    PLAN_DEV_ROWS
} plan_dev_row;

/* NCCL, per connection (a peer on one channel, buffers on the receiving
 * side): NCCL_BUFFSIZE 4 MiB (Simple) + the LL128 FIFO 4.69 MiB + the LL FIFO
 * 0.5 MiB = 9.19 MiB, allocated as 10 MiB (cuMem's 2 MiB granularity) */
#define PLAN_NCCL_CONNECTION_BYTES ((size_t)10 << 20)
/* channels of one ring collective: NCCL's default ceiling (NCCL_MAX_NCHANNELS 32) */
#define PLAN_NCCL_RING_CHANNELS 32
/* an all-to-all peer (ncclSend/ncclRecv): a published NCCL_DEBUG_SUBSYS=ALLOC
 * count of one all-to-all on 8 x H100 (32 channels a pair): 3.28 GB for 7
 * peers, 447 MiB each (not measured here) */
#define PLAN_NCCL_P2P_PEER_BYTES ((size_t)447 << 20)
/* the CUDA context of a process with cuBLAS, cuBLASLt, cuDNN and NCCL loaded:
 * estimated 0.5 GiB on sm_90 and sm_100 (H100 80GB: 1.9 GiB in use beyond the
 * allocations after an 8k step, of which 1.4 GiB the scratch rows above) */
#define PLAN_CUDA_CONTEXT_BYTES ((size_t)512 << 20)
/* cuDNN's own workspace for the flash-attention backward is its plan's
 * choice, known only on the GPU: estimated as one more fp32 [B, NH, T, HD]
 * (the one-H100 genomic runs' peaks beyond the other rows: 0.6 GiB at 32k,
 * 1.2 at 64k, 2.4 at 128k tokens, NH 32, HD 128) */
size_t plan_cudnn_workspace_estimate(size_t B, size_t NH, size_t T, size_t HD);
/* fragmentation of cudaMalloc'd buffers, what no row sees */
#define PLAN_MARGIN_BYTES ((size_t)1 << 30)

/* The rows of config c at EP x DP for one GPU rank whose capacity buffers
 * hold cap_rows expert rows and which holds params_local parameters.
 * bytes[PLAN_DEV_ROWS]. */
void plan_device_rows(const moe_config *c, int ep, int dp, size_t cap_rows, size_t params_local,
                      size_t bytes[PLAN_DEV_ROWS]);

const char *plan_device_row_name(plan_dev_row r);
/* where the row's figure comes from */
const char *plan_device_row_source(plan_dev_row r);

#endif

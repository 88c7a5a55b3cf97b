/* moekit CUDA backend: shared pieces of its op files.
 *
 * Activations and the weights' compute copy are bf16; masters, gradients,
 * moments and the small per-token tensors (rstd, lse, router probabilities)
 * are fp32. GEMMs go through cuBLAS with fp32 accumulation. Errors of CUDA
 * and cuBLAS calls inside void ops are kept (the first one wins) and
 * reported by the next op that can fail, naming the op and the call. */
#ifndef MOE_CUDA_INTERNAL_H
#define MOE_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../../../common/alloc_ledger.h"
#include "../backend.h"
#include "cuda_scratch_sizes.h"

typedef __nv_bfloat16 bf16;

/* slots 0-7: the bf16 ops; 8-19: the FP8 and emulated MXFP8 paths (cuda_fp8_ops.h,
 * cuda_moe_mxemu.cu), one precision at a time; 20: cuDNN attention's workspace;
 * 21: per-block partial sums that a second pass adds in a fixed order; 22: the
 * score bias that keeps cuDNN's attention within each packed sequence */
#define CUDA_SCRATCH_CUDNN 20
#define CUDA_SCRATCH_PARTIALS 21
#define CUDA_SCRATCH_SEGMENT_BIAS 22
#define CUDA_SCRATCH_SLOTS 23
/* the pinned staging ring of cuda_from_host */
#define CUDA_STAGE_SLOTS 8
#define CUDA_STAGE_BYTES ((size_t)1 << 20)
#define CUDA_ADAM_LAYOUTS 4
#define CUDA_GEMM_PLANS 1024
typedef struct cuda_gemm_plan cuda_gemm_plan; /* cuda_gemm.cu */
struct cuda_cudnn_attn; /* cuda_attention_cudnn.cu */
struct lowp_fp8_gemm;

typedef struct {
    cublasHandle_t blas;
    cudaStream_t stream;
    int device, sm_count, cc_major, cc_minor;
    char device_name[256];
    char error[MOE_ERR_LEN]; /* the first failure of a void op, "" if none */
    /* scratch, grown on first use and then reused: no allocation in a steady step */
    void *scratch[CUDA_SCRATCH_SLOTS];
    size_t scratch_bytes[CUDA_SCRATCH_SLOTS];
    /* cuda_from_host's pinned ring: slot i is free once stage_ev[i] is done */
    char *stage;
    cudaEvent_t stage_ev[CUDA_STAGE_SLOTS];
    int stage_next;
    /* route plan staging on the host (pinned) */
    int32_t *h_idx, *h_rows, *h_slots;
    size_t h_cap;
    /* AdamW chunk tables, built once per span layout (the model's, ZeRO's two
     * shard groups), found by the layout's contents, not its address */
    struct {
        moe_param_span *spans; /* host copy of the layout */
        int n_spans, n_chunks;
        void *chunks; /* device */
    } adam[CUDA_ADAM_LAYOUTS];
    int adam_next; /* the slot the next new layout replaces */
    /* the distributed optimizer's chunk table (adamw_shard), built once per shard layout */
    moe_shard_piece *shard_pieces;
    int n_shard_pieces, n_shard_chunks;
    void *shard_chunks; /* device */
    double *d_partial, *h_partial; /* sum of squares */
    moe_range *d_ranges[2];        /* gradient ranges: AdamW's zeros, the sum of squares' */
    int ranges_cap[2];
    float *d_loss, *h_loss;        /* per-row losses of one lm_head chunk */
    int *d_bad;                    /* first out-of-vocabulary target, 1-based */
    size_t loss_cap;
    /* precision of the expert FFN (cuda_set_expert_precision) */
    const moe_recipe *expert_recipe; /* bf16, fp8_block, mxfp8 or mxfp8_emulated's row */
    int fp8_gemms; /* which of fprop / dgrad / wgrad (bits 1, 2, 4) run in FP8 */
    int fp8_saved_on; /* fp8_block keeps h1, h3 in E4M3 (set_fp8_saved_activations) */
    int fp8_chunk_rows; /* an expert's FP8 rows go through the GEMMs this many at a time */
    int expert_chunk_rows; /* an expert's rows go through the SwiGLU, the down projection and
                              the backward this many at a time */
    int fp8_fused_save; /* the SwiGLU kernel writes fp8_block's saved h (runtime.fp8_fused_save) */
    moe_rt_attention attention; /* the attention kernels tried first (runtime.attention) */
    int linear_lowp;    /* the attention projections in expert_recipe too */
    struct lowp_fp8_gemm *fp8_gemm;
    struct cuda_fp8_wcache *wcache; /* the weights' FP8 copies (cuda_fp8_weight_cache.h) */
    /* the bf16 GEMMs through cuBLASLt (cuda_gemm.cu); lt NULL: cublasGemmEx */
    cublasLtHandle_t lt;
    void *gemm_ws;
    cuda_gemm_plan *gemm_plans; /* [CUDA_GEMM_PLANS], one algorithm per shape family */
    struct cuda_cudnn_attn *cudnn_attn; /* cuDNN's handle and attention plans, made on first use */
    /* be->alloc's live buffers, so be->free takes their bytes off be->mem_bytes */
    alloc_ledger live;
} cuda_ctx;

#define CTX(be) ((cuda_ctx *)(be)->ctx)

/* Record a failure once; later ones are dropped (the first is the cause). */
void cuda_note(moe_backend *be, const char *op, const char *what);
/* CUDA / cuBLAS status checks for void ops */
#define CU(be, op, call)                                                                           \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess)                                                                   \
            cuda_note((be), (op), cudaGetErrorString(err_));                                       \
    } while (0)
/* Copies between host and device memory on the backend's stream, counted
 * in be->host_bytes (the bytes a step moves over PCIe, printed per step):
 *   to the host: queued, then a named host wait until the bytes are there;
 *   from the host: through the pinned staging ring (cuda_backend.cu), so the
 *     host's buffer is free on return and the host does not wait for the
 *     device (only for a staging slot still in flight, itself a counted wait). */
cudaError_t cuda_to_host(moe_backend *be, void *dst, const void *src, size_t bytes,
                         const char *what);
cudaError_t cuda_from_host(moe_backend *be, void *dst, const void *src, size_t bytes);
/* The host waits for the backend's stream: polled (the watchdog sees it, a
 * stuck collective queued earlier cannot hang the host unseen), named. */
cudaError_t cuda_wait(moe_backend *be, const char *what);
#define CUBLAS(be, op, call)                                                                       \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
            cuda_note((be), (op), cublasGetStatusString(st_));                                     \
    } while (0)
/* after a kernel launch */
#define LAUNCHED(be, op) CU(be, op, cudaGetLastError())

/* Report a recorded failure as an error (and clear it). */
int cuda_check(moe_backend *be, moe_err *e);

/* Scratch buffer slot `i` of at least `bytes` (grown as needed). */
void *cuda_scratch(moe_backend *be, int i, size_t bytes);

/* cuBLASLt's handle, workspace and plan table (or none, by runtime.gemm) */
int cuda_gemm_init(moe_backend *be, moe_err *e);
void cuda_gemm_destroy(moe_backend *be);
/* Row-major GEMMs on bf16 operands with fp32 accumulation (cuda_gemm.cu):
 *   xwT: Y[rows, out] = beta Y + X[rows, in] W[out, in]^T       (Y bf16 or fp32)
 *   dyw: DX[rows, in] = beta DX + DY[rows, out] W[out, in]      (bf16)
 *   dyTx: DW[out, in] = beta DW + DY[rows, out]^T X[rows, in]   (DW fp32; rows 0, beta 0: zeros) */
void cuda_gemm_xwT(moe_backend *be, void *y, int y_fp32, const bf16 *x, const bf16 *w, int rows,
                   int in, int out, float beta);
void cuda_gemm_dyw(moe_backend *be, bf16 *dx, const bf16 *dy, const bf16 *w, int rows, int in,
                   int out, float beta);
void cuda_gemm_dyTx(moe_backend *be, float *dw, const bf16 *dy, const bf16 *x, int rows, int in,
                    int out, float beta);
/* experts_bwd's dw_overwrite: the gradients of the experts that got no rows are zero */
void cuda_zero_idle_expert_dw(moe_backend *be, float *dw1, float *dw3, float *dw2,
                              const moe_route_plan *plan, int C, int I);

/* Eight bf16 in one 16-byte load or store: the memory-bound kernels' unit
 * wherever rows are multiples of 8 and the buffers 16-byte aligned (every
 * real model's shapes); they keep a scalar path for the rest. */
typedef struct {
    __nv_bfloat162 v[4];
} bf16x8;

__device__ __forceinline__ int rows_vec8(int I, const void *a, const void *b, const void *c,
                                         const void *d)
{
    return (I % 8) == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & 15) == 0;
}

__device__ __forceinline__ void bf16x8_unpack(bf16x8 p, float f[8])
{
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 t = __bfloat1622float2(p.v[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

__device__ __forceinline__ bf16x8 bf16x8_pack(const float f[8])
{
    bf16x8 p;
#pragma unroll
    for (int k = 0; k < 4; k++)
        p.v[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    return p;
}

/* dst[0..n8) = src[0..n8) in 16-byte units by a block, four loads in flight
 * a thread before their stores (a row copy is otherwise one load at a time) */
__device__ __forceinline__ void copy_row8(bf16x8 *__restrict__ dst, const bf16x8 *__restrict__ src,
                                          int n8)
{
    for (int c0 = threadIdx.x; c0 < n8; c0 += 4 * blockDim.x) {
        bf16x8 t[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (c0 + u * (int)blockDim.x < n8)
                t[u] = src[c0 + u * blockDim.x];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (c0 + u * (int)blockDim.x < n8)
                dst[c0 + u * blockDim.x] = t[u];
    }
}

#define CUDA_THREADS 256
static inline unsigned cuda_blocks(size_t n, int per_block)
{
    size_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b > 0x7fffffff ? 0x7fffffff : (b ? b : 1));
}
/* blocks for a grid-stride elementwise kernel of n items: capped, the loop does the rest */
static inline unsigned cuda_grid(size_t n)
{
    unsigned b = cuda_blocks(n, CUDA_THREADS);
    return b > 65536 ? 65536 : b;
}

/* SwiGLU x router probability over all permuted rows, and its backward
 * (cuda_moe.cu; the fp8 expert path shares them) */
void cuda_swiglu_prob(moe_backend *be, bf16 *a, const bf16 *h1, const bf16 *h3, const float *p,
                      size_t rows, int I);
/* h1 or h3 as the SwiGLU kernels read it: bf16 h (q NULL), or E4M3 codes q
 * [rows, I] with 1x128 scales s at column stride ld (fp8_block's saved
 * copy, read as if dequantised to bf16) */
typedef struct {
    const bf16 *h;
    const uint8_t *q;
    const float *s;
    size_t ld;
} cuda_swiglu_in;
void cuda_swiglu_prob_in(moe_backend *be, bf16 *a, cuda_swiglu_in h1, cuda_swiglu_in h3,
                         const float *p, size_t rows, int I);
/* fp8_block's saved copy of h1 or h3 as the forward's SwiGLU writes it:
 * E4M3 codes q [rows, I] and 1x128 scales s at column stride ld */
typedef struct {
    uint8_t *q;
    float *s;
    size_t ld;
} cuda_fp8_save;
/* SwiGLU x probability from bf16 h1, h3 that also writes their saved E4M3
 * copies (the bytes of lowp_cuda_fp8blk_1x128's rowwise codes and scales,
 * padding scales not written), in the same pass. Returns 1, doing nothing,
 * where the shapes do not allow it (I a multiple of 256, the bf16 16-byte
 * and the codes 8-byte aligned): the caller quantises then. */
int cuda_swiglu_prob_save8(moe_backend *be, bf16 *a, const bf16 *h1, const bf16 *h3,
                           const float *p, size_t rows, int I, cuda_fp8_save s1, cuda_fp8_save s3);
void cuda_swiglu_prob_bwd_in(moe_backend *be, bf16 *dh1, bf16 *dh3, float *dp, const bf16 *da,
                             cuda_swiglu_in h1, cuda_swiglu_in h3, const float *p, size_t rows,
                             int I);
void cuda_swiglu_prob_bwd(moe_backend *be, bf16 *dh1, bf16 *dh3, float *dp, const bf16 *da,
                          const bf16 *h1, const bf16 *h3, const float *p, size_t rows, int I);
/* the backward's scratch of every expert path (slots 3-6): a recomputed
 * from h1, h3 and the probabilities, and room for da, dh1, dh3 */
typedef struct {
    bf16 *a, *da, *dh1, *dh3;
} cuda_expert_bwd_bufs;
size_t cuda_expert_bwd_rows(moe_backend *be, const moe_route_plan *plan);
/* rows of the chunk at c0 of an expert's `count` rows, in chunks of `ch` */
static inline int64_t cuda_chunk_len(int64_t count, int64_t c0, int64_t ch)
{
    return count - c0 < ch ? count - c0 : ch;
}
bf16 *cuda_expert_swiglu_scratch(moe_backend *be, const moe_route_plan *plan, int I);
int cuda_expert_bwd_alloc(moe_backend *be, cuda_expert_bwd_bufs *b, size_t rows, int I);
int cuda_expert_bwd_prepare(moe_backend *be, cuda_expert_bwd_bufs *b, const act *h1,
                            const act *h3, const real *p_perm, size_t rows, int I);
/* fp8_block with E4M3-saved h1, h3: their bytes for `rows` rows (codes
 * [rows, I], then from a 256-byte boundary the 1x128 scales) (cuda_moe_fp8.cu) */
int cuda_fp8_saved(moe_backend *be);
size_t cuda_expert_saved_bytes(moe_backend *be, size_t rows, int I);
void cuda_set_fp8_saved_activations(moe_backend *be, int on);
/* the expert FFN in FP8: the E4M3 recipes, by expert_recipe (cuda_moe_fp8.cu) */
void cuda_experts_fwd_fp8(moe_backend *be, act *y_perm, act *h1, act *h3, act *a,
                          const act *x_perm, const real *p_perm, const act *w1, const act *w3,
                          const act *w2, const moe_route_plan *plan, int C, int I);
void cuda_experts_bwd_fp8(moe_backend *be, act *dx_perm, real *dp_perm, real *dw1, real *dw3,
                          real *dw2, const act *dy_perm, const act *x_perm, const act *h1,
                          const act *h3, const real *p_perm, const act *w1, const act *w3,
                          const act *w2, const moe_route_plan *plan, int C, int I,
                          int dw_overwrite);
/* the expert FFN in emulated MXFP8 (cuda_moe_mxemu.cu) */
void cuda_experts_fwd_mxemu(moe_backend *be, act *y_perm, act *h1, act *h3, act *a,
                            const act *x_perm, const real *p_perm, const act *w1, const act *w3,
                            const act *w2, const moe_route_plan *plan, int C, int I);
void cuda_experts_bwd_mxemu(moe_backend *be, act *dx_perm, real *dp_perm, real *dw1, real *dw3,
                            real *dw2, const act *dy_perm, const act *x_perm, const act *h1,
                            const act *h3, const real *p_perm, const act *w1, const act *w3,
                            const act *w2, const moe_route_plan *plan, int C, int I,
                            int dw_overwrite);
/* the emulated MXFP8 copy of x [rows, cols] (blocked along the rows, or
 * down the columns) in scratch slot `slot`; NULL when it cannot be made
 * (noted). The emulated paths' slots: two rowwise copies, two columnwise
 * ones (A: cuda_mxemu_proj_bwd's dy), a weight (cuda_moe_mxemu.cu). */
enum { MXEMU_S_ROW = 8, MXEMU_S_COL_A, MXEMU_S_COL_B, MXEMU_S_ROW_B, MXEMU_S_W };
const bf16 *cuda_mxemu_fake(moe_backend *be, const char *op, int slot, const bf16 *x,
                            size_t rows, size_t cols, int colwise);
/* one linear layer's backward with every operand emulated: dx (+)= dy w
 * (skipped when dx is NULL), dw (+)= dy^T x (dy [rows, out], w [out, in];
 * dy_row: dy's rowwise copy, x_col: x's columnwise copy [rows, in]) */
int cuda_mxemu_proj_bwd(moe_backend *be, const char *op, bf16 *dx, float dx_beta, float *dw,
                        float dw_beta, const bf16 *dy_row, const bf16 *dy, const bf16 *x_col,
                        const bf16 *w, int64_t rows, int in, int out);
/* the attention projections (matmul_fwd / matmul_bwd) in the experts' low
 * precision, with precision.layers=all (cuda_linear_lowp.cu) */
void cuda_linear_fwd_lowp(moe_backend *be, act *out, const act *in, const act *w, int N, int IC,
                          int OC);
void cuda_linear_bwd_lowp(moe_backend *be, act *din, real *dw, const act *dout, const act *in,
                          const act *w, int N, int IC, int OC, int accumulate);
extern "C" int cuda_set_linear_lowp(moe_backend *be, int on, const int *widths, int n_widths,
                                    moe_err *e);
/* the expert FFN's precision: bf16, fp8_block, mxfp8 or mxfp8_emulated, when
 * this GPU can run it (cuda_lowp_select.cu) */
extern "C" int cuda_set_expert_precision(moe_backend *be, moe_precision p, int C, int I,
                                         moe_err *e);

/* causal GQA attention through cuDNN's fused flash attention (cuda_attention_cudnn.cu):
 * 1 where cuDNN is absent or does not take the shape (nothing done: the caller runs its
 * own kernels), else 0 (a failure noted). bias: NULL, or [B, 1, T, T] added to the
 * scaled scores (0 or -inf: packed sequences, cuda_attention.cu) */
int cuda_attention_cudnn_fwd(moe_backend *be, bf16 *out, float *lse, const bf16 *q,
                             const bf16 *k, const bf16 *v, int B, int T, int NH, int NKV, int HD,
                             const bf16 *bias);
int cuda_attention_cudnn_bwd(moe_backend *be, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                             const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *out,
                             const float *lse, int B, int T, int NH, int NKV, int HD,
                             const bf16 *bias);
void cuda_attention_cudnn_destroy(moe_backend *be);

void cuda_fill_dense_ops(moe_backend *be);
void cuda_fill_attention_ops(moe_backend *be);
void cuda_fill_moe_ops(moe_backend *be);
void cuda_fill_optim_ops(moe_backend *be);

#endif

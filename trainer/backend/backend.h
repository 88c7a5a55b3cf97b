/* moekit: the backend seam.
 *
 * The model and the training loop are backend-neutral: they own no numbers,
 * only pointers into the backend's memory, and call the operations in this
 * table in a fixed order. The CPU backend (fp32 or fp64 reference, OpenMP)
 * and the CUDA backend (bf16 storage, fp32 accumulation) each fill one table.
 *
 * Conventions:
 * - `act` buffers hold activations in the backend's activation type (real on
 *   the CPU, bf16 on CUDA); their size is elements, the backend sizes bytes.
 * - `real` buffers (fp32 masters, grads, optimizer moments, norms' rstd,
 *   router probabilities, attention log-sum-exp) are always the host real type.
 * - Weights are read from the backend's compute copy (`wc`, act type), which
 *   the optimizer refreshes from the masters.
 * - Matrices are row-major; a linear layer's weight is [out, in] as Hugging
 *   Face stores it, so y = x W^T.
 * - Backward ops ACCUMULATE into weight gradients (+=) so gradient
 *   accumulation over micro-batches is free (experts_bwd may overwrite
 *   instead); input gradients are written (=) unless the op says `accumulate`.
 * - Stream order (the contract every backend and communicator keeps):
 *   a backend queues its ops, in call order, on one queue it owns (cuda: a
 *   stream made non-blocking, never the legacy default stream, which would
 *   order it against every other stream of the process; cpu: the calling
 *   thread, so an op is done when it returns). Work on any other queue (a
 *   communicator's stream, another rank's) is ordered against it only by
 *   events, in both directions: a collective starts after an event recorded
 *   behind the kernels that wrote its inputs AND behind those still reading
 *   its outputs (read-after-write, write-after-read), and the kernels that
 *   read its outputs or overwrite its inputs are queued behind an event it
 *   records (comm.h). The host waits for the device only where it needs a
 *   value (download, sync, ops that return host values): each such wait is
 *   named and counted (common/host_wait.h), and watched.
 */
#ifndef MOE_BACKEND_H
#define MOE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../../common/err.h"
#include "../../common/precision.h"
#include "../config/config_enums.h"
#include "../config/runtime_defaults.h"

#ifdef MOE_REAL_DOUBLE
typedef double real; /* gradient-check builds of the CPU reference */
#else
typedef float real;
#endif

typedef void act; /* an activation/compute-weight element, type chosen by the backend */

/* The expert dispatch plan of one MoE layer: which token rows go to which
 * local expert, in expert-major order. Built by the dispatcher; the backend's
 * grouped expert ops read it. Device arrays are backend memory. */
typedef struct {
    int n_tokens;        /* tokens routed from this rank (N) */
    int top_k;
    int n_experts;       /* local experts */
    int n_rows;          /* rows in expert-major order (= N * top_k when EP = 1) */
    int32_t *row_token;  /* [n_rows] device: source token of each expert-major row */
    int32_t *slot_row;   /* [N * top_k] device: expert-major row of (token, slot) */
    int32_t *expert_offset_dev; /* [n_experts + 1] device: row offsets */
    int64_t *expert_count;      /* [n_experts] host copy of the counts (one sync per layer) */
    int64_t *expert_offset;     /* [n_experts + 1] host copy of the offsets */
} moe_route_plan;

typedef struct {
    size_t offset;  /* element offset in the flat parameter buffer */
    size_t n;       /* elements */
    int decay;      /* 1: apply weight decay */
} moe_param_span;

/* [offset, offset + n) of a flat buffer */
typedef struct {
    size_t offset, n;
} moe_range;

typedef struct {
    real lr, beta1, beta2, eps, weight_decay;
    real bias_corr1, bias_corr2; /* 1 - beta^t, computed by the caller */
    real grad_scale;             /* multiply grads by this first (clipping, averaging) */
    /* Ranges of the gradient that hold no value this step and count as zeros
     * (the weights of experts no token reached): never read. Sorted and
     * disjoint; NULL / 0: none. The update is the same bits as over zeros. */
    const moe_range *zero_grads;
    int n_zero_grads;
    /* The moments' storage: 0 fp32 (real), 1 bf16 (rounded to nearest even
     * on every store; optimizer.moments_dtype). The arithmetic is fp32. */
    int moments_bf16;
} moe_adamw_hyper;

/* One piece of a sharded optimizer's update (adamw_shard): n elements at
 * `flat` of the model's flat buffers (gradient, compute copy) whose state
 * (master remainder, moments) is at `state` of the shard's own buffers. */
typedef struct {
    size_t flat, state, n;
    int decay;
} moe_shard_piece;

/* experts_bwd's dw_overwrite */
enum {
    MOE_DW_ACCUMULATE = 0,     /* dW += */
    MOE_DW_OVERWRITE = 1,      /* dW =, the experts without rows' dW zeroed */
    MOE_DW_OVERWRITE_LAZY = 2  /* dW =, the experts without rows' dW left as they are: the
                                  caller counts them as zeros (moe_adamw_hyper.zero_grads) */
};

/* How a backend runs, not what it computes: the config's runtime.* keys that
 * the trainer hands over (set_run_opts). backend_opts_default gives the
 * values a backend starts with. */
typedef struct {
    int fp8_gemms;              /* MOE_FP8_* bits: the expert GEMMs fp8_block / mxfp8 run in FP8 */
    int fp8_chunk_rows;         /* an expert's FP8 rows go through the GEMMs this many at a time */
    int fp8_fused_save;         /* the SwiGLU kernel writes fp8_block's saved h1, h3 itself */
    int expert_chunk_rows;      /* an expert's rows go through the SwiGLU, the down projection
                                   and the backward this many at a time */
    moe_rt_gemm gemm;           /* runtime.gemm: the bf16 GEMMs through cuBLASLt or cublasGemmEx */
    moe_rt_attention attention; /* runtime.attention: the kernel family tried first */
    int fp8_weight_cache;       /* the weights' FP8 copies made once an optimizer step */
    const char *cudnn_lib;      /* the cuDNN library file to open ("" = the default sonames);
                                   read at the first attention that asks for cuDNN */
} moe_backend_opts;

static inline moe_backend_opts backend_opts_default(void)
{
    moe_backend_opts o = {MOE_FP8_FPROP | MOE_FP8_DGRAD | MOE_FP8_WGRAD,
                          MOE_DEFAULT_FP8_CHUNK_ROWS, 1, MOE_DEFAULT_EXPERT_CHUNK_ROWS,
                          MOE_RT_GEMM_CUBLASLT, MOE_RT_ATTN_CUDNN, 1, ""};
    return o;
}

/* Several sequences packed into one row (the THD layout of flash attention's
 * cu_seqlens and Hugging Face's position_ids): segments tile the batch's
 * B x T tokens in order, none crosses a row, and a token attends only to
 * the tokens of its own segment up to itself. NULL where an op takes one:
 * every row is one causal sequence, positions 0..T-1. Device memory. */
typedef struct {
    const int32_t *pos;         /* [B*T] each token's position in its segment (0 at its start) */
    const int32_t *cu_seqlens;  /* [n_seg + 1] the flat index of each segment's first token,
                                   then B*T */
    int n_seg, max_seqlen;
} moe_segments;

/* What an allocation is for: the memory plan (`moe-train --plan`) and the
 * start-up summary count bytes by kind. */
typedef enum {
    MOE_MEM_WORKSPACE,   /* the backward's scratch, tokens, small per-layer state (the default) */
    MOE_MEM_WEIGHTS,     /* the compute copy of the weights */
    MOE_MEM_MASTER,      /* what of the fp32 masters the compute copy does not hold */
    MOE_MEM_GRADS,       /* the gradient buffer */
    MOE_MEM_OPTIMIZER,   /* AdamW moments and the optimizer's shards */
    MOE_MEM_ACTIVATIONS, /* what the forward keeps for the backward, per layer */
    MOE_MEM_CAPACITY,    /* expert rows, sized by parallel.expert_capacity_factor */
    MOE_MEM_COMM,        /* communication buffers (the EP all-to-all's send and receive) */
    MOE_MEM_KINDS
} moe_mem_kind;

/* moe_backend.segments: packed windows not taken (one sequence per row
 * only), taken by slower kernels than the backend's best (data.pack =
 * packed asks for them, auto does not), or at the backend's full rate
 * (auto packs stores and blends). */
enum { MOE_SEGMENTS_NONE = 0, MOE_SEGMENTS_SLOW = 1, MOE_SEGMENTS_FAST = 2 };

typedef struct moe_backend moe_backend;
/* A queue of device work and an event between queues, both made by the
 * backend (on cuda a cudaStream_t and a cudaEvent_t, which the NCCL
 * communicator casts back). */
typedef struct moe_queue moe_queue;
typedef struct moe_event moe_event;

struct moe_backend {
    const char *name;        /* "cpu", "cuda" */
    moe_backend_choice kind; /* MOE_BACKEND_CPU or MOE_BACKEND_CUDA: what it runs on (the
                                counting backend: what it sizes buffers for) */
    const char *act_type;    /* "fp32", "fp64", "bf16" */
    void *ctx;

    /* ---- memory ---- */
    /* alloc adds its bytes to mem_bytes[mem_kind] (free takes them off on
     * the cuda backend); the owner of what follows (the model, the
     * dispatcher, the optimizer) sets mem_kind first. */
    int mem_kind;
    size_t mem_bytes[MOE_MEM_KINDS];
    /* 1 where the buffers are device memory across a host link (cuda), 0
     * where they are host memory (cpu) */
    int device_memory;
    /* how rope and attention take moe_segments (packed windows, data.pack):
     * MOE_SEGMENTS_* */
    int segments;
    /* the GPU's compute capability, which decides the recipe (precision_choice.h); -1 where
     * there is no GPU */
    int cc_major, cc_minor;
    /* the memory plan's counting backend: its buffers are counted, never used, so
     * nothing runs and the host-side tables of what they would hold need not be made */
    int counts_only;
    /* bytes the backend's copies moved over the host link since creation:
     * [0] host to device, [1] device to host (0 on host-memory backends) */
    uint64_t host_bytes[2];
    void *(*alloc)(moe_backend *be, size_t bytes, moe_err *e);
    void (*free)(moe_backend *be, void *p);
    size_t (*act_bytes)(moe_backend *be, size_t n_elems);
    int (*upload)(moe_backend *be, void *dst, const void *src, size_t bytes, moe_err *e);
    int (*download)(moe_backend *be, void *dst, const void *src, size_t bytes, moe_err *e);
    void (*memset0)(moe_backend *be, void *p, size_t bytes);
    /* Page-locked host memory for staging transfers (checkpoints), NULL where
     * plain host memory is as fast (cpu): callers then use malloc/free. */
    void *(*pinned_alloc)(moe_backend *be, size_t bytes, moe_err *e);
    void (*pinned_free)(moe_backend *be, void *p);
    /* bytes from src to dst, either in backend or host memory, in stream
     * order (the in-process communicator and the optimizer's shards) */
    int (*copy)(moe_backend *be, void *dst, const void *src, size_t bytes, moe_err *e);
    /* dst[n] += src[n], both backend memory (reductions between ranks) */
    void (*accumulate)(moe_backend *be, real *dst, const real *src, size_t n);
    /* act <-> real conversions between host real arrays and act buffers */
    int (*act_from_real)(moe_backend *be, act *dst, const real *src_host, size_t n, moe_err *e);
    int (*act_to_real)(moe_backend *be, real *dst_host, const act *src, size_t n, moe_err *e);
    /* refresh the compute copy of the weights from the masters */
    void (*weights_from_master)(moe_backend *be, act *wc, const real *master, size_t n);
    /* Split masters (split_master.h), NULL where a backend keeps whole fp32
     * masters (cpu): `lo` holds the low 16 bits of each master, the compute
     * copy `wc` is its high half. Upload writes both from host fp32 masters;
     * download rebuilds them exactly. */
    int (*masters_upload)(moe_backend *be, uint16_t *lo, act *wc, const real *host, size_t n,
                          moe_err *e);
    int (*masters_download)(moe_backend *be, real *host, const uint16_t *lo, const act *wc,
                            size_t n, moe_err *e);
    /* Split masters filled where they live: element i is value start + i of
     * the stream, init_weight(key, start + i, std) of numerics/init_normal.h
     * when `normal`, else `fill`; the same bits as the host's
     * initialisation. NULL where the host initialises. */
    int (*masters_init)(moe_backend *be, uint16_t *lo, act *wc, size_t n, uint64_t start,
                        int normal, uint64_t key, double std, float fill, moe_err *e);
    /* The host waits for everything queued (a named host wait, "sync"). */
    int (*sync)(moe_backend *be, moe_err *e);

    /* ---- queues and events (the contract above); NULL on cpu, where
     * every op is done when it returns and nothing needs ordering, unless
     * the in-process ranks asked for queues (cpu_backend_enable_queues) ---- */
    /* a further queue on this backend's device (a communicator's stream) */
    moe_queue *(*queue_create)(moe_backend *be, moe_err *e);
    void (*queue_destroy)(moe_backend *be, moe_queue *q);
    moe_event *(*event_create)(moe_backend *be, moe_err *e);
    void (*event_destroy)(moe_backend *be, moe_event *ev);
    /* ev completes once everything queued on q so far has (q NULL: the
     * backend's own queue); event_wait: work queued on q from now on starts
     * after ev. Neither waits on the host. */
    int (*event_record)(moe_backend *be, moe_queue *q, moe_event *ev, moe_err *e);
    int (*event_wait)(moe_backend *be, moe_queue *q, moe_event *ev, moe_err *e);
    /* copy and accumulate queued on q (device memory of this device) */
    int (*copy_on)(moe_backend *be, moe_queue *q, void *dst, const void *src, size_t bytes,
                   moe_err *e);
    int (*accumulate_on)(moe_backend *be, moe_queue *q, real *dst, const real *src, size_t n,
                         moe_err *e);
    /* 1 when p is this backend's device memory, 0 when it is host memory */
    int (*owns)(moe_backend *be, const void *p);
    /* a kernel that keeps q busy for about `us` microseconds: the test
     * harness stretches producers and collectives with it (comm_local.h) */
    int (*spin)(moe_backend *be, moe_queue *q, double us, moe_err *e);
    /* A failure the backend noted since the last check or sync (an op it
     * could not run: a scratch buffer it could not allocate, a library call
     * refused), without waiting for the device. NULL where ops fail at once. */
    int (*check)(moe_backend *be, moe_err *e);
    void (*destroy)(moe_backend *be);
    /* For the metrics: bytes of the device's memory in use now (the GPU's
     * whole use, cudaMemGetInfo; the process's resident set on the CPU), and
     * the device's dense peak in TFLOP/s for the recipe the run computes in
     * (device_peak.h), 0 when not known (the MFU is then not given). */
    size_t (*mem_in_use)(moe_backend *be);
    /* bytes of the device's memory free now (cudaMemGetInfo); NULL on the CPU */
    size_t (*mem_free)(moe_backend *be);
    double (*peak_tflops)(moe_backend *be, moe_precision p);

    /* ---- forward ---- */
    void (*embedding_fwd)(moe_backend *be, act *out, const int32_t *tokens, const act *wte,
                          int N, int C);
    /* out[N,C] = rmsnorm(in) * w; rstd[N] saved for backward */
    void (*rmsnorm_fwd)(moe_backend *be, act *out, real *rstd, const act *in, const act *w,
                        int N, int C, real eps);
    /* resid_out = resid_in + delta; norm_out = rmsnorm(resid_out) * w */
    void (*add_rmsnorm_fwd)(moe_backend *be, act *resid_out, act *norm_out, real *rstd,
                            const act *resid_in, const act *delta, const act *w, int N, int C,
                            real eps);
    void (*add)(moe_backend *be, act *out, const act *a, const act *b, size_t n);
    /* out[N,OC] = in[N,IC] W[OC,IC]^T */
    void (*matmul_fwd)(moe_backend *be, act *out, const act *in, const act *w, int N, int IC,
                       int OC);
    /* rotary embedding in place on q[B,T,NH,HD] and k[B,T,NKV,HD] (HF rotate-half layout)
     * at positions pos[B*T] (NULL: t in every row) */
    void (*rope_fwd)(moe_backend *be, act *q, act *k, int B, int T, int NH, int NKV, int HD,
                     real theta, const int32_t *pos);
    /* causal GQA attention within each segment (seg NULL: each row one sequence):
     * out[B,T,NH,HD]; lse[B,NH,T] saved for backward */
    void (*attention_fwd)(moe_backend *be, act *out, real *lse, const act *q, const act *k,
                          const act *v, int B, int T, int NH, int NKV, int HD,
                          const moe_segments *seg);
    /* router: logits = x Wg^T (fp32 softmax over E) -> probs[N,E]; top-k experts
     * topk_idx[N,K] and renormalised weights topk_w[N,K]; prob_sum[E] = sum over
     * tokens of probs (for the aux loss) */
    void (*router_fwd)(moe_backend *be, real *probs, int32_t *topk_idx, real *topk_w,
                       real *prob_sum, const act *x, const act *wg, int N, int C, int E, int K);
    /* Local dispatch: build the expert-major plan from topk_idx (stable in
     * token order within an expert). Fills the host counts (synchronises). */
    int (*route_plan)(moe_backend *be, moe_route_plan *plan, const int32_t *topk_idx, int N,
                      int K, int E, moe_err *e);
    /* x_perm[row] = x[row_token[row]]; p_perm[row] = topk_w of that (token, slot) */
    void (*permute)(moe_backend *be, act *x_perm, real *p_perm, const act *x, const real *topk_w,
                    const moe_route_plan *plan, int C);
    /* The grouped expert FFN over all local experts, for each row r of expert e:
     *   h1 = W1[e] x, h3 = W3[e] x, a = p * silu(h1) * h3, y = W2[e] a
     * W1, W3: [E, I, C]; W2: [E, C, I]. h1, h3 saved (act) for backward. */
    void (*experts_fwd)(moe_backend *be, act *y_perm, act *h1, act *h3, act *a,
                        const act *x_perm, const real *p_perm, const act *w1, const act *w3,
                        const act *w2, const moe_route_plan *plan, int C, int I);
    /* out[t] = sum over slots j of y_perm[slot_row[t, j]] */
    void (*combine)(moe_backend *be, act *out, const act *y_perm, const moe_route_plan *plan,
                    int C);
    /* logits[N,V] (real, host-visible through download) for evaluation and tests */
    void (*lm_head_logits)(moe_backend *be, real *logits, const act *x, const act *w, int N,
                           int C, int V);
    /* Fused LM head + cross-entropy. Targets < 0 are ignored. Returns, in
     * loss_sum_out (host), the sum of the per-token losses and in n_valid_out the
     * count of counted targets. If dx != NULL also backward with every token's
     * loss scaled by dloss: dx[N,C] written, dw[V,C] accumulated. No logits
     * tensor of N x V in fp32 is kept. */
    int (*lm_head_loss)(moe_backend *be, double *loss_sum_out, int64_t *n_valid_out, act *dx,
                        real *dw, const act *x, const act *w, const int32_t *targets, int N,
                        int C, int V, real dloss, moe_err *e);

    /* ---- backward ---- */
    /* dw[V,C] += scatter of dx rows by token, each row's sum in token order
     * (the same bits every run) */
    void (*embedding_bwd)(moe_backend *be, real *dwte, const act *dx, const int32_t *tokens, int N,
                          int C, int V);
    /* din (+= if accumulate) and dw += for out = rmsnorm(in) * w */
    void (*rmsnorm_bwd)(moe_backend *be, act *din, real *dw, const act *dout, const act *in,
                        const act *w, const real *rstd, int N, int C, int accumulate);
    /* din[N,IC] (= or += if accumulate) = dout W; dw[OC,IC] += dout^T in */
    void (*matmul_bwd)(moe_backend *be, act *din, real *dw, const act *dout, const act *in,
                       const act *w, int N, int IC, int OC, int accumulate);
    /* inverse rotation in place on dq, dk */
    void (*rope_bwd)(moe_backend *be, act *dq, act *dk, int B, int T, int NH, int NKV, int HD,
                     real theta, const int32_t *pos);
    void (*attention_bwd)(moe_backend *be, act *dq, act *dk, act *dv, const act *dout,
                          const act *q, const act *k, const act *v, const act *out,
                          const real *lse, int B, int T, int NH, int NKV, int HD,
                          const moe_segments *seg);
    /* dy_perm[row] = dout[row_token[row]] */
    void (*combine_bwd)(moe_backend *be, act *dy_perm, const act *dout, const moe_route_plan *plan,
                        int C);
    /* expert FFN backward: dx_perm written, dp_perm written, dW1/dW3/dW2 accumulated,
     * or written with dw_overwrite (MOE_DW_*): the first micro-batch of a step then
     * neither zeroes nor reads the expert gradients, ~90% of all of them */
    void (*experts_bwd)(moe_backend *be, act *dx_perm, real *dp_perm, real *dw1, real *dw3,
                        real *dw2, const act *dy_perm, const act *x_perm, const act *h1,
                        const act *h3, const real *p_perm, const act *w1, const act *w3,
                        const act *w2, const moe_route_plan *plan, int C, int I,
                        int dw_overwrite);
    /* dx[t] += sum_j dx_perm[slot_row[t,j]]; dtopk_w[t,j] = dp_perm[slot_row[t,j]] */
    void (*permute_bwd)(moe_backend *be, act *dx, real *dtopk_w, const act *dx_perm,
                        const real *dp_perm, const moe_route_plan *plan, int C);
    /* router backward: from dtopk_w through the renormalisation and the
     * softmax (plus the aux-loss gradient aux_dprob[E], added to every token's
     * dprob), dx += d x, dwg += . */
    void (*router_bwd)(moe_backend *be, act *dx, real *dwg, const real *dtopk_w,
                       const real *aux_dprob, const act *x, const act *wg, const real *probs,
                       const int32_t *topk_idx, const real *topk_w, int N, int C, int E, int K);

    /* ---- optimizer and reductions ---- */
    /* sum of squares of x[n] (host result, synchronises) */
    double (*sum_squares)(moe_backend *be, const real *x, size_t n);
    /* the same over the union of sorted, disjoint ranges of x, in one pass;
     * NULL where the caller should sum range by range (cpu) */
    double (*sum_squares_ranges)(moe_backend *be, const real *x, const moe_range *r, int n_ranges);
    /* AdamW with decoupled weight decay over the spans of one flat buffer;
     * updates the masters and writes the compute copy. */
    /* m, v: moments in h->moments_bf16's storage. */
    void (*adamw)(moe_backend *be, real *master, act *wc, const real *grad, void *m, void *v,
                  const moe_param_span *spans, int n_spans, const moe_adamw_hyper *h);
    /* The same update on split masters (lo, wc); NULL with masters_upload. */
    void (*adamw_split)(moe_backend *be, uint16_t *lo, act *wc, const real *grad, void *m, void *v,
                        const moe_param_span *spans, int n_spans, const moe_adamw_hyper *h);
    /* AdamW on a shard (a distributed optimizer): for each piece, the
     * gradient and compute copy at piece.flat of the model's buffers, the
     * master's low halves `lo` and the moments at piece.state of the
     * shard's. lo = NULL where the compute copy is the whole fp32 master
     * (cpu); split-master backends need it. h->zero_grads is not read. */
    void (*adamw_shard)(moe_backend *be, const real *grad, act *wc, uint16_t *lo, void *m, void *v,
                        const moe_shard_piece *pieces, int n_pieces, const moe_adamw_hyper *h);

    /* ---- precision ---- */
    /* The expert FFN's GEMMs in recipe p (hidden size C, expert intermediate
     * size I): 0 when this device runs it (and from now on does), else -1
     * with the reason (precision_gpu_can_run's rule, the shapes, a probe).
     * NULL where the backend has one precision (cpu). */
    int (*set_expert_precision)(moe_backend *be, moe_precision p, int C, int I, moe_err *e);
    /* precision.layers=all: matmul_fwd / matmul_bwd (the attention
     * projections) in the experts' low precision too (on), or in bf16.
     * Call after set_expert_precision; widths: every in / out width the
     * projections take. Refuses, with the reason, widths the recipe cannot
     * block or experts in bf16. NULL where the backend has one precision. */
    int (*set_linear_lowp)(moe_backend *be, int on, const int *widths, int n_widths, moe_err *e);
    /* The run options above; takes effect from the next op (the FP8 ones
     * from the next set_expert_precision). NULL where a backend has none
     * (cpu). Refuses, with the reason, a value it cannot take. */
    int (*set_run_opts)(moe_backend *be, const moe_backend_opts *o, moe_err *e);
    /* fp8_block: experts_fwd keeps h1, h3 for the backward as E4M3 codes with
     * 1x128 scales (on, the default) or in bf16 (off). NULL on cpu. */
    void (*set_fp8_saved_activations)(moe_backend *be, int on);
    /* Bytes of one of experts_fwd's saved h1 / h3 for `rows` rows at the
     * precision set now: act_bytes(rows * I), or less where the precision
     * keeps them smaller. NULL: act_bytes. Plan those buffers after the
     * precision is set, and do not change it while they live. */
    size_t (*expert_saved_bytes)(moe_backend *be, size_t rows, int I);
    /* Rows of experts_fwd's `a` (the SwiGLU output the down projection
     * reads) the caller provides for `rows` expert rows. NULL: all of them.
     * 0: the backend runs each expert's rows through the SwiGLU and the down
     * projection a chunk at a time in its own scratch, and `a` may be NULL. */
    size_t (*expert_swiglu_rows)(moe_backend *be, size_t rows);
};

/* Backends. Each returns 0 and a ready table, or -1 with a reason. */
int cpu_backend_create(moe_backend **out, int threads, moe_err *e);
/* Give a cpu backend queues that run their copies and sums on threads of
 * their own, as late as they may (once waited for), with events between them
 * (cpu_queue.c): the in-process ranks' harness then keeps comm.h's stream
 * order as a GPU must. */
int cpu_backend_enable_queues(moe_backend *be, moe_err *e);
/* Tasks of those queues that ran because nobody waited for them within their
 * grace (cpu_queue.c), over the process. */
uint64_t cpu_queues_unwaited(void);
int cuda_backend_available(void);
int cuda_device_count(void); /* visible GPUs, 0 without a driver */
int cuda_backend_create(moe_backend **out, int device, moe_err *e);
/* The cuda backend's own stream (a cudaStream_t), for timing its ops with events. */
void *cuda_backend_stream(moe_backend *be);

#ifdef __cplusplus
}
#endif

#endif

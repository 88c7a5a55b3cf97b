/* moekit: the Mixtral MoE decoder, backend-neutral.
 *
 * The model owns the flat parameter buffers (fp32 masters, gradients, AdamW
 * moments, the backend's compute copy) and the activations of one
 * micro-batch, all allocated once at creation (the memory plan), and runs
 * forward and backward by calling the backend's operations layer by layer.
 * It never touches a number itself. */
#ifndef MOE_MODEL_H
#define MOE_MODEL_H

#include <stdint.h>

#include "../backend/backend.h"
#include "../dispatch/dispatch.h"

typedef struct {
    int C;       /* hidden size */
    int L;       /* layers */
    int NH;      /* attention heads */
    int NKV;     /* kv heads */
    int HD;      /* head dim */
    int E;       /* experts (global) */
    int K;       /* experts per token */
    int I;       /* expert intermediate size */
    int V;       /* vocabulary */
    double eps;  /* RMSNorm epsilon */
    double theta; /* RoPE base */
    double aux_coef; /* router aux-loss coefficient */
} moe_dims;

typedef enum {
    MOE_P_EMBED, MOE_P_LN1, MOE_P_Q, MOE_P_K, MOE_P_V, MOE_P_O, MOE_P_LN2, MOE_P_GATE,
    MOE_P_W1, MOE_P_W3, MOE_P_W2, MOE_P_NORM, MOE_P_HEAD
} moe_param_kind;

/* One named tensor of the flat buffer. Expert tensors hold all local experts
 * of a layer contiguously ([E_local, rows, cols]); their Hugging Face names
 * are per expert, so `name` is a printf pattern with the expert index. */
typedef struct {
    char name[128];
    moe_param_kind kind;
    int layer;         /* -1 for embed/norm/head */
    int n_experts;     /* local experts in this tensor (0 = not an expert tensor) */
    int ndim;          /* of one (expert's) matrix */
    int64_t shape[2];
    size_t offset, n;  /* elements in the flat buffer */
} moe_param;

typedef struct moe_layer_acts moe_layer_acts;
/* writes the compute copy of the model's flat range [flat, flat + n) and the
 * range's split-master low halves to lo (backend memory); see masters_fill */
typedef int (*moe_masters_fill_fn)(void *arg, size_t flat, size_t n, uint16_t *lo, moe_err *e);

typedef struct {
    moe_backend *be;
    moe_dims d;
    int B, T;                 /* micro-batch shape the memory plan is sized for */
    int ep_rank, ep_size;     /* expert parallelism: this rank owns experts [e0, e0 + E_local) */
    int E_local, e0;
    moe_dispatcher *disp;

    int n_params;             /* tensors */
    moe_param *params;
    size_t n_elems;           /* flat parameter count on this rank */
    moe_param_span *spans;    /* decay spans for AdamW (one per tensor) */
    /* fp32 masters, or with split_master only their low halves (uint16_t,
     * split_master.h): the high halves are the compute copy wc. Reach them
     * through model_get_masters / model_set_masters. */
    void *master;
    int split_master;
    real *grad;
    void *m, *v;              /* AdamW moments, fp32 or bf16 (moments_bf16) */
    int moments_bf16;
    /* A sharded optimizer that keeps the master's remainder (the low halves
     * of split masters) sets this: model_get_masters (collective then) and
     * model_set_masters go through it, m->master is NULL. */
    int (*masters_io)(void *ctx, real *host, int to_host, moe_err *e);
    /* ... and fills them where they live: fill(arg, flat, n, lo) writes the
     * compute copy of [flat, flat + n) and that range's low halves to lo
     * (device scratch the optimizer keeps its own slice of) */
    int (*masters_fill)(void *ctx, moe_masters_fill_fn fill, void *arg, moe_err *e);
    void *masters_ctx;
    act *wc;                  /* compute copy */
    /* per layer: its expert weight gradients hold stale values that the next
     * backward overwrites (model_zero_grad leaves them alone) */
    unsigned char *expert_dw_fresh;
    /* Lazy expert gradients (model_set_lazy_expert_grads): the dW of an
     * expert no token reached this step is neither zeroed nor read, only
     * marked; expert_dw_valid[l * E_local + x] says whose dW holds a value. */
    int lazy_expert_grads;
    /* model_init_random fills the masters on the host even where the backend
     * could (runtime.init_on=host: the same bits, for comparison) */
    int init_on_host;
    unsigned char *expert_dw_valid;
    moe_range *grad_ranges; /* scratch of the zero / non-zero range lists */
    int grad_ranges_cap;

    /* activations */
    int32_t *tokens, *targets; /* [B*T] backend memory */
    /* the next batch's packed sequences (model_set_segments): positions
     * [B*T] and cu_seqlens [B*T + 1] in backend memory; seg_active 0 means
     * one sequence per row */
    int32_t *seg_pos, *seg_cu;
    moe_segments seg;
    int seg_active;
    act *embed_out;
    moe_layer_acts *layers;
    act *resid_final, *lnf;
    real *rstdf;
    /* backward scratch */
    act *d_resid, *d_a, *d_b, *d_q, *d_k, *d_v;
    act *d_rows_a, *d_rows_b; /* [max_rows, C] */
    real *d_prows, *d_topk;
    real *aux_dprob_dev;      /* [E] */
    act *tmp_c;               /* [N, C] */
    /* train.activation_recompute: layers keep only their input; the backward
     * recomputes each layer's forward into layer 0's buffers */
    int recompute;
    /* train.recompute_experts: layers keep everything but the SwiGLU inputs
     * h1, h3 (the largest activations: 2 x top_k x intermediate a token), which
     * all layers share; the backward redoes each layer's expert forward from
     * its kept x_perm before the experts' backward */
    int recompute_experts;
    real *prob_sum_scratch;     /* [E], the recompute's router statistics */
    int64_t *route_count_scratch; /* [E] host */

    /* last forward's results */
    double lm_loss_sum;
    int64_t n_valid;
    double aux_loss;          /* HF definition over all layers of the micro-batch */
    double *route_frac;       /* [E] F_e of the last forward (host) */
    int64_t *layer_count;     /* [E_local] scratch: a layer's rows per local expert, all passes */
    double aux_tokens;        /* token-layer count F and P are shares of (global with stats_sum) */
    int have_forward;

    /* Data parallelism: when set, the router statistics of the aux loss (the
     * per-expert counts and probability sums, and the token count) are
     * summed over every rank's tokens, so the aux loss and its gradient are
     * those of the global batch. Returns 0 or -1 with e filled. */
    int (*stats_sum)(void *ctx, double *v, int n, moe_err *e);
    void *stats_ctx;

    /* Called by the backward as soon as a layer's gradients are written:
     * layer = L after the head and the final norm, l after decoder layer l,
     * -1 after the embedding (so a distributed optimizer can start reducing
     * them beside the rest of the backward). NULL: none. */
    int (*grads_ready)(void *ctx, int layer, moe_err *e);
    void *grads_ctx;
    /* Called by the forward before it reads a layer's weights (the same
     * numbering: -1 before the embedding, l before decoder layer l, L before
     * the final norm and the head), and with MOE_WEIGHTS_ALL by whatever
     * reads or writes the weights outside a forward (masters to the host, a
     * checkpoint), so a distributed optimizer's all-gather of the new weights
     * can go on beside the forward of the layers below. NULL: none. */
    int (*weights_needed)(void *ctx, int layer, moe_err *e);
    void *weights_ctx;
} moe_model;

enum { MOE_WEIGHTS_ALL = 1 << 30 };
/* Every weight as the optimizer last made it (weights_needed(ALL)). */
int model_weights_settle(moe_model *m, moe_err *e);

/* Sizes of the whole model, for the start-up summary. */
void model_count_params(const moe_dims *d, int64_t *total, int64_t *active);

int model_create(moe_model **out, const moe_dims *d, moe_backend *be, moe_dispatcher *disp, int B,
                 int T, moe_err *e);
/* The same for one rank of an expert-parallel group of ep_size ranks: it
 * holds experts [ep_rank E / ep_size, ...) (disp must be an EP dispatcher
 * over the group). with_moments: MOE_MOMENTS_FP32 or MOE_MOMENTS_BF16 makes
 * the AdamW moments in that dtype (as model_set_moments_bf16 would, with no
 * fp32 pair allocated on the way: at 128k tokens that transient was 10.8
 * GiB over the plan); 0 leaves m->m, m->v and (split masters)
 * the masters' low halves to an optimizer that keeps them sharded (zero.h):
 * m->master is then NULL, and on backends without split masters the
 * compute copy is the master. recompute = 1 keeps only
 * each layer's input and recomputes the layer in the backward (the same
 * gradients, one layer's activations instead of all of them, one more
 * forward of every layer but the last). */
enum { MOE_MOMENTS_NONE = 0, MOE_MOMENTS_FP32 = 1, MOE_MOMENTS_BF16 = 2 };
/* with_moments for a model that keeps its own moments (one rank) in
 * optimizer.moments_dtype, or leaves them to the distributed optimizer */
static inline int model_moments_mode(int own, moe_moments_dtype dtype)
{
    return !own ? MOE_MOMENTS_NONE
           : dtype == MOE_MOMENTS_DTYPE_BF16 ? MOE_MOMENTS_BF16
                                             : MOE_MOMENTS_FP32;
}
/* what the backward recomputes instead of keeping (model_create_parallel's recompute) */
enum { MOE_RECOMPUTE_NONE = 0, MOE_RECOMPUTE_LAYERS = 1, MOE_RECOMPUTE_EXPERTS = 2 };
/* the mode of train.activation_recompute and train.recompute_experts (the first wins) */
static inline int model_recompute_mode(int activation_recompute, int recompute_experts)
{
    return activation_recompute ? MOE_RECOMPUTE_LAYERS
           : recompute_experts  ? MOE_RECOMPUTE_EXPERTS
                                : MOE_RECOMPUTE_NONE;
}
int model_create_parallel(moe_model **out, const moe_dims *d, moe_backend *be,
                          moe_dispatcher *disp, int B, int T, int ep_rank, int ep_size,
                          int with_moments, int recompute, moe_err *e);
void model_destroy(moe_model *m);

/* Hugging Face Mixtral initialisation: N(0, std) for linear and embedding
 * weights, ones for norms; from a seed, identical on any backend. */
int model_init_random(moe_model *m, uint64_t seed, double std, moe_err *e);

/* Full name of parameter p (for expert tensors, of local expert x). */
void model_param_name(const moe_model *m, const moe_param *p, int x, char *out, size_t n);

/* The sequences of the next batch (forward, forward_backward) and of every
 * one after it until set again: pos[B*T] each token's position in its
 * sequence, cu_seqlens[n_seg + 1] the flat index of each sequence's first
 * token then B*T (host arrays, as data.h's tok_segments makes them). pos
 * NULL: one sequence per row, positions 0..T-1. Refused on a backend
 * without segments. */
int model_set_segments(moe_model *m, const int32_t *pos, const int32_t *cu_seqlens, int n_seg,
                       int max_seqlen, moe_err *e);

/* Forward only (evaluation, tests). tokens/targets: host arrays of B*T
 * (targets < 0 ignored). Returns the sum of token losses and the number of
 * counted targets; the aux loss is left in m->aux_loss. If logits_host is
 * not NULL it receives the logits [B*T, V]. */
int model_forward(moe_model *m, const int32_t *tokens, const int32_t *targets, double *loss_sum,
                  int64_t *n_valid, real *logits_host, moe_err *e);

/* Forward and backward of one micro-batch. Each token's loss is scaled by
 * dloss (1 / counted targets of the global batch), the aux loss by aux_scale
 * (its coefficient / micro-batches). Gradients accumulate into m->grad. */
int model_forward_backward(moe_model *m, const int32_t *tokens, const int32_t *targets,
                           double dloss, double aux_scale, double *loss_sum, int64_t *n_valid,
                           moe_err *e);

/* Start a step's gradients: zeroed, or (the experts' weights) marked to be
 * overwritten by the first backward. */
void model_zero_grad(moe_model *m);

/* Lazy expert gradients on or off (default off: every gradient is stored).
 * On, the gradients that hold no value are counted as zeros by
 * model_grad_sum_squares and model_adamw, and written as zeros before anything
 * else reads m->grad through model_get_host or model_materialize_grads: turn
 * it on only where those are the gradients' readers (the trainer without
 * ZeRO). */
void model_set_lazy_expert_grads(moe_model *m, int on);
/* Passes the expert rows of `layer` took in the last forward (1 unless
 * they were more than the expert buffers hold: dispatch.h). */
int model_expert_passes(moe_model *m, int layer);
/* Rows each local expert of `layer` got in the last forward ([E_local]). */
const int64_t *model_route_counts(const moe_model *m, int layer);
/* Zeros into the gradients that only count as zeros. */
void model_materialize_grads(moe_model *m);
/* Sum of squares of all gradients (synchronises). */
double model_grad_sum_squares(moe_model *m);

/* Host copies of the grads / moments (n_elems reals), for checkpoints and
 * tests (the grads materialised first). */
int model_get_host(moe_model *m, const real *dev, real *host, moe_err *e);
int model_set_host(moe_model *m, real *dev, const real *host, moe_err *e);
/* The fp32 masters to and from the host, whatever their storage; setting
 * them refreshes the compute copy. */
int model_get_masters(moe_model *m, real *host, moe_err *e);
int model_set_masters(moe_model *m, const real *host, moe_err *e);
/* The moments (the model's own, m->m) to and from host reals, whatever
 * their storage. */
int model_get_moments(moe_model *m, real *m_host, real *v_host, moe_err *e);
int model_set_moments(moe_model *m, const real *m_host, const real *v_host, moe_err *e);
/* optimizer.moments_dtype: the moments in bf16 (on) or fp32; zeroes them. */
int model_set_moments_bf16(moe_model *m, int on, moe_err *e);
/* One AdamW step over every parameter from the accumulated gradients. */
void model_adamw(moe_model *m, const moe_adamw_hyper *h);

#endif

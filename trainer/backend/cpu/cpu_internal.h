/* moekit CPU reference backend: shared helpers of its op files.
 * Every op is plain C over `real` (fp32, or fp64 for gradient checks),
 * parallel with OpenMP over independent rows. Reductions never cross threads
 * in a thread-count-dependent order, so results are bit-identical for any
 * OMP_NUM_THREADS. */
#ifndef MOE_CPU_INTERNAL_H
#define MOE_CPU_INTERNAL_H

#include "../backend.h"
#include "../../../common/alloc_ledger.h"

/* be->ctx: the live allocations, and the queues where the in-process ranks
 * asked for them (cpu_queue.c; NULL otherwise) */
typedef struct cpu_queues cpu_queues;
typedef struct {
    alloc_ledger ledger;
    cpu_queues *queues;
} cpu_ctx;
/* the host waits for every queue of the backend (nothing where it has none) */
void cpu_queues_drain(moe_backend *be);
void cpu_queues_free(moe_backend *be);

/* y[r, o] = sum_i x[r, i] * w[o, i] for r < rows (x: [rows, in], w: [out, in]) */
void cpu_gemm_xwT(real *y, const real *x, const real *w, int rows, int in, int out);
/* dx[r, i] (= or +=) sum_o dy[r, o] * w[o, i] */
void cpu_gemm_dyw(real *dx, const real *dy, const real *w, int rows, int in, int out,
                  int accumulate);
/* dw[o, i] += sum_r dy[r, o] * x[r, i] */
void cpu_gemm_dyTx(real *dw, const real *dy, const real *x, int rows, int in, int out);

/* The op groups fill their part of the table. */
void cpu_fill_dense_ops(moe_backend *be);
void cpu_fill_attention_ops(moe_backend *be);
void cpu_fill_moe_ops(moe_backend *be);
void cpu_fill_optim_ops(moe_backend *be);

#endif

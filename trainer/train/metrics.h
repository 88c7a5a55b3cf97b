/* moekit: what a run reports in logger.run_dir: metrics.jsonl (one JSON
 * object per step and per evaluation), TensorBoard event files with
 * logger.tensorboard, and loss.png drawn from metrics.jsonl. */
#ifndef MOE_METRICS_H
#define MOE_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "../../common/err.h"
#include "../model/model.h"
#include "tb_writer.h"

typedef struct {
    FILE *f;
    char dir[4096];
    char path[4200];
    tb_writer tb;    /* open with logger.tensorboard */
    int plot_warned; /* a failed loss.png is reported once */
} moe_metrics;

/* One optimizer step. Unknown values are NAN (written as null). */
typedef struct {
    int step;
    double loss, aux_loss, lr, grad_norm;
    uint64_t tokens;       /* targets seen so far */
    double wall_time;      /* seconds since the Unix epoch, at the step's end */
    double elapsed_s;      /* since this run (process) started training */
    double tokens_per_s;   /* this step's tokens over its wall time, all ranks */
    double tflops;         /* model FLOP/s of this step, all ranks, in TFLOP/s */
    double mfu;            /* tflops over the devices' peak (NAN when not known) */
    double mem_bytes;      /* device memory in use on rank 0 (NAN when not known) */
    double host_link_bytes; /* bytes rank 0's step moved between host and device memory, both
                               ways (NAN on a host-memory backend) */
    double host_waits;     /* times rank 0's host waited for its device this step */
    const char *host_wait_by; /* the same by name, a JSON object ({"route counts":64,...}), or NULL */
} moe_step_metrics;

/* Open <run_dir>/metrics.jsonl for appending (creating run_dir), and a new
 * TensorBoard event file when tensorboard. A resumed run first drops lines of
 * steps after `resume_step`, so the file reads as one straight run. run_dir
 * "" disables everything. */
int metrics_open(moe_metrics *mx, const char *run_dir, long resume_step, int tensorboard,
                 moe_err *e);
/* A step's line (and TensorBoard scalars). */
int metrics_log_step(moe_metrics *mx, const moe_step_metrics *m, moe_err *e);
/* An evaluation's line: the held-out loss at step. */
int metrics_log_eval(moe_metrics *mx, int step, double val_loss, uint64_t tokens,
                     double wall_time, double elapsed_s, moe_err *e);
void metrics_close(moe_metrics *mx);
/* The number of "key": in one metrics.jsonl line; 0 when absent or null. */
int metrics_json_number(const char *line, const char *key, double *out);

/* The model FLOPs of one token of training (forward and backward) for a
 * sequence of T: 6 x the weights a token multiplies (attention, router, its
 * top-k experts, LM head) + 12 x layers x T x heads x head_dim (attention
 * scores and values, as PaLM and Megatron count them). */
double metrics_flops_per_token(const moe_dims *d, int T);

/* Draw <run_dir>/loss.png from metrics.jsonl with gnuplot: panels for the
 * training and held-out loss, learning rate, gradient norm, aux loss and
 * tokens/s. Paths and title reach gnuplot as arguments of a fixed script
 * (gnuplot -c), never as script text. Returns 0, or -1 with the reason (e.g.
 * gnuplot not installed), which callers report as a warning. */
int metrics_plot(const moe_metrics *mx, const char *title, moe_err *e);

#endif

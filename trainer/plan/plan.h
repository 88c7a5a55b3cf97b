/* moekit: the memory plan of a training run, per rank.
 *
 * One counting pass over the real creation path: the dispatcher, the model
 * and the optimizer are made exactly as the trainer makes them, over a
 * backend that counts bytes by kind instead of allocating them
 * (count_backend.h) and communicators of the planned sizes that move
 * nothing. Whatever those allocate, the plan sees; no formula of the
 * model's memory is written twice. The bytes a step sends per rank (balanced
 * routing) follow from the same shapes. `moe-train --plan` prints it, the
 * start-up summary prints it beside what the backend really allocated, and
 * plan_fit tells a launcher whether a run fits a GPU, and what would. */
#ifndef MOE_PLAN_H
#define MOE_PLAN_H

#include <stdio.h>

#include "../backend/backend.h"
#include "../config/config.h"
#include "plan_device.h"

typedef struct {
    int ep, dp, world;
    int recompute;                  /* train.activation_recompute of the plan (whole layers) */
    int64_t params_total, params_local, params_local_expert;
    size_t bytes[MOE_MEM_KINDS];    /* per rank, as configured */
    size_t bytes_flip[MOE_MEM_KINDS]; /* the same with whole layers recomputed (none if they are) */
    size_t total, total_flip;       /* what be->alloc allocates */
    /* beside it on a GPU rank (plan_device.h; zeros for CPU ranks), the same in both
     * recompute modes, and the totals with them: what the GPU must have free */
    size_t dev[PLAN_DEV_ROWS], dev_total;
    size_t need, need_flip;
    size_t moments;                 /* the AdamW moments among the optimizer's bytes */
    size_t cap_rows;                /* expert rows per pass (the capacity buffers) */
    int optimizer_counted;          /* 1: by the optimizer's own create; 0: by its layout */
    double ep_bytes, dp_bytes;      /* sent per rank per step: EP all-to-all, gradient
                                       reduce-scatter + weight all-gather */
    int ep_overlap;                 /* parallel.overlap_expert_exchange (EP > 1) */
    moe_backend_choice sized_for;   /* what the bytes are sized for: cuda (a GPU) or cpu */
} moe_plan;

/* The plan of config c at EP = ep x DP = dp (world = ep dp) for rank 0 (the
 * rank that holds the most when shards are unequal). shape: the real
 * backend to size buffers as (the start-up summary), or NULL for a GPU as
 * the cuda backend lays it out. */
int plan_make(moe_plan *p, const moe_config *c, int ep, int dp, moe_backend *shape, moe_err *e);
/* The same; every_layer = 1 counts a model of all its layers instead of one
 * and two layers extended (plan_make: the host memory and time of a
 * two-layer model, the same bytes; tests compare the two). */
int plan_make_counted(moe_plan *p, const moe_config *c, int ep, int dp, moe_backend *shape,
                      int every_layer, moe_err *e);

const char *plan_kind_name(moe_mem_kind k);

/* The table: per-rank bytes by kind (recompute on and off), the step's
 * traffic, and, with gpu_bytes > 0, whether it fits. */
void plan_print(FILE *f, const moe_plan *p, const moe_config *c, double gpu_bytes);

/* What plan_fit decides. */
enum { PLAN_FITS = 0, PLAN_WARN = 1, PLAN_REFUSE = -1 };

/* The memory a run may take on its smallest GPU, and what that figure is:
 * the driver's free memory on the node (NVML, cudaMemGetInfo) or, where no
 * driver answers (a login node), the card's total. context_in_use: the
 * CUDA context is already out of `bytes` (the trainer asking for itself). */
typedef struct {
    double bytes;
    const char *what;   /* completes "but ... %.1f GiB": "GPU 3 has free", "a GPU has" */
    int context_in_use;
} plan_room;

/* Does config c at EP x DP fit the room? The plan's whole need (be->alloc's
 * bytes and every row beside them, margin included) against room->bytes.
 * PLAN_FITS; else PLAN_REFUSE when `refuse` (the admin's policy) or
 * PLAN_WARN, with `msg` holding the rows, what is short and what would fit
 * (more GPUs, activation recompute, fp8_block, bf16 moments, a shorter
 * sequence). -1 with e filled when the plan cannot be made (returned as
 * PLAN_REFUSE too, msg empty). */
int plan_fit_room(const moe_config *c, int ep, int dp, const plan_room *room, int refuse,
                  char *msg, size_t n, moe_err *e);
/* the same against GPUs of gpu_bytes each ("a GPU has") */
int plan_fit(const moe_config *c, int ep, int dp, double gpu_bytes, int refuse, char *msg,
             size_t n, moe_err *e);

/* plan_fit_room for a launcher that has a config's name or path (resolved
 * in configs_dir, as moe-train resolves it), its key=value overrides, and
 * the verdict's precision ("mxfp8", "bf16", "fp8_block", or NULL: the
 * config's). The one call the SPANK plugin's verdict and `moe-topo --check`
 * make. */
int plan_fit_config(const char *config, const char *configs_dir, char *const *items,
                    int n_items, const char *precision, int ep, int dp, const plan_room *room,
                    int refuse, char *msg, size_t n, moe_err *e);

#endif

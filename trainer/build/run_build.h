/* moekit: one builder of what a run computes with: the token dispatcher,
 * the model on a backend and its optimizer state. The trainer, the memory
 * planner (on a counting backend, over counting communicators) and eval
 * (one rank, a model rebuilt per batch size) all build through it, so what
 * the plan counts is what a run makes. */
#ifndef MOE_RUN_BUILD_H
#define MOE_RUN_BUILD_H

#include "../config/config.h"
#include "../model/model.h"
#include "../parallel/parallel.h"
#include "../parallel/zero.h"

typedef struct {
    moe_dims dims;
    int B, T;                      /* rows and tokens of a micro-batch */
    moe_par *par;                  /* the ranks (EP group, optimizer shards); NULL: one rank */
    double capacity_factor;        /* parallel.expert_capacity_factor (EP > 1) */
    int overlap_exchange;          /* parallel.overlap_expert_exchange (EP > 1) */
    int recompute;                 /* MOE_RECOMPUTE_* */
    moe_moments_dtype moments;     /* optimizer.moments_dtype */
    size_t bucket_bytes;           /* parallel.grad_bucket_mb, in bytes (several ranks) */
    int init_on_host;              /* runtime.init_on = host */
} moe_build_spec;

typedef struct {
    moe_dispatcher *disp;          /* local, or over the EP group */
    moe_model *model;
    moe_zero *zero;                /* several ranks: the distributed optimizer; else NULL and
                                      the model keeps its own moments */
} moe_build;

/* The spec of config c on the ranks par (NULL: one rank). */
moe_build_spec build_spec_from_config(const moe_config *c, moe_par *par);

/* Dispatcher, model and optimizer state of s on be, each allocation under
 * its memory kind (backend.h). On failure nothing is left and b is empty. */
int build_run(moe_build *b, const moe_build_spec *s, moe_backend *be, moe_err *e);

/* Destroys what build_run made (the optimizer first: its shards are backend
 * memory beside the model's); b is empty afterwards. */
void build_close(moe_build *b);

#endif

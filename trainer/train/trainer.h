/* moekit: the training run: config -> backend -> model -> data -> loop ->
 * checkpoints and metrics. Backend-neutral: it calls the model and the
 * backend's optimizer ops, never a kernel. */
#ifndef MOE_TRAINER_H
#define MOE_TRAINER_H

#include <signal.h>
#include <stdint.h>

#include "../config/config.h"
#include "../data/data.h"
#include "../model/model.h"
#include "../parallel/parallel.h"
#include "../parallel/zero.h"
#include "metrics.h"

typedef struct {
    moe_config cfg;
    moe_backend_choice backend; /* --backend, else runtime.backend */
    moe_backend *be;
    moe_dispatcher *disp;
    moe_model *model;
    moe_dataset *data;
    moe_metrics metrics;
    int step;               /* optimizer steps done */
    uint64_t tokens_seen;   /* targets counted so far */
    double last_loss, last_val_loss, last_grad_norm;
    int rank, world;
    moe_par par;            /* the ranks and their EP/DP groups (a world of one without a launcher) */
    moe_par dev;            /* GPU ranks met over MPI: the same groups over NCCL (dev_groups.h) */
    int have_par, have_dev;
    moe_zero *zero;         /* the distributed optimizer when world > 1 (else the model keeps
                               the moments) */
    const char *precision;  /* what the backend computes in, as the summary says it */
    moe_precision compute;  /* the experts' recipe (fp32 on the cpu backend) */
    char precision_label[80]; /* its text when composed ("mxfp8 (experts) + bf16") */
    /* host staging of one global batch */
    int32_t *inputs, *targets;
    /* a packed micro-batch's sequences (tok_segments), for the model */
    int32_t *seg_pos, *seg_cu;
    int quiet;
    /* seconds spent opening it: ranks and backend, model buffers, data, weights */
    double startup_s[4];
    char layout_note[160];  /* the summary's word on a multi-rank layout run on one rank */
    int stop_after_steps;   /* >0: stop (checkpoint and exit as on a signal) after this many
                               steps of this run, e.g. to fit a job's time slot */
    struct trainer_ckpt *ckpt; /* the checkpoint directory's lock and staging (ckpt_io.h) */
    uint64_t step_host_bytes; /* what the last step moved over the host link (PCIe) */
    uint64_t step_host_waits; /* times the host waited for its device in the last step */
    char step_wait_json[512]; /* the same by name, a JSON object */
} moe_trainer;

/* Set by SIGTERM / SIGUSR1 handlers: finish the step, checkpoint, exit. */
extern volatile sig_atomic_t moe_stop_requested;
/* Exit status of a run stopped by a signal after saving (job scripts requeue
 * on it): MOE_EXIT_PREEMPTED, with the other tools' statuses. */
#include "../../common/exit_codes.h"

/* runtime.* as the backend takes them (set_run_opts); eval's too. */
moe_backend_opts backend_opts_from_config(const moe_runtime_cfg *rt);

/* backend: a moe_backend_choice (--backend), or -1 for runtime.backend. */
int trainer_create(moe_trainer *t, const moe_config *cfg, int backend, int quiet, moe_err *e);
void trainer_destroy(moe_trainer *t);
/* Train to cfg.train.steps (or until a stop signal). Returns 0, 1 when it
 * stopped early on a signal after checkpointing, 2 when it resumed at or
 * past train.steps and had nothing to train (said on stdout), -1 on error. */
int trainer_run(moe_trainer *t, moe_err *e);
/* The devices' dense peak for the recipe the run computes in (the MFU's
 * denominator, per device), 0 when not known. */
double trainer_peak_tflops(const moe_trainer *t);
/* Mean held-out loss over train.eval_batches validation micro-batches. */
int trainer_evaluate(moe_trainer *t, double *val_loss, moe_err *e);

/* checkpoint.c */
int trainer_save_checkpoint(moe_trainer *t, moe_err *e);
/* Resume from a checkpoint directory (step_N), or initialise weights only
 * from a Hugging Face model directory (weights_only = 1). */
int trainer_load_checkpoint(moe_trainer *t, const char *dir, int weights_only, moe_err *e);
int trainer_save_final_model(moe_trainer *t, moe_err *e);
/* With checkpoint.init_from, the architecture of its config.json: the
 * model.* values the run set itself (config_model_key_explicit) must agree,
 * naming both values; the others are taken from the file. */
int trainer_adopt_init_config(moe_config *c, moe_err *e);

#endif

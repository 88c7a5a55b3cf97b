/* moekit: a run's checkpoint directory and checkpoint I/O resources.
 *
 * At start-up, before anything large is allocated (collective):
 *   - checkpoint.ckpt_dir is created if missing, checked to be a writable
 *     directory and locked (ckpt_lock.h): a second run is refused, naming
 *     the holder;
 *   - a directory that already holds checkpoints is refused to a run that
 *     does not resume them (checkpoint.resume_from_checkpoint=true) unless
 *     checkpoint.overwrite=true, which removes them first;
 *   - checkpoint.init_from's config.json and tensor shapes are checked.
 * The staging buffer (checkpoint.staging_mb, pinned where the backend
 * pins) is allocated at the first checkpoint read or write and kept. */
#ifndef MOE_CKPT_IO_H
#define MOE_CKPT_IO_H

#include "trainer.h"

struct trainer_ckpt {
    int lock_fd;             /* rank 0: the ckpt_dir lock, else -1 */
    void *staging;
    size_t staging_bytes;
    int pinned;
    char last_saved[4096];   /* the newest checkpoint this run wrote */
    int last_step;
};

int ckpt_io_open(moe_trainer *t, moe_err *e);
void ckpt_io_close(moe_trainer *t);
int ckpt_io_staging(moe_trainer *t, moe_err *e);

/* Peak resident memory: reset (Linux clear_refs) before a save, report after. */
void ckpt_io_peak_reset(void);
/* Rank 0 prints "ckpt  <step> | <verb> <dir> (...)": bytes, seconds, rate,
 * and its resident memory before and at the peak of the operation. */
void ckpt_io_report(moe_trainer *t, const char *verb, const char *dir, double seconds,
                    uint64_t bytes);

/* <ckpt_dir>/final_model: a Hugging Face export (bf16) of t->ckpt->last_saved,
 * its shards written by every rank. Collective. */
int ckpt_io_final_model(moe_trainer *t, moe_err *e);
/* A resumed run with nothing left to train: final_model written again from
 * the newest checkpoint unless it is already that step's export (a run
 * whose final save failed leaves an older one). Collective. */
int ckpt_io_final_model_current(moe_trainer *t, moe_err *e);

#endif

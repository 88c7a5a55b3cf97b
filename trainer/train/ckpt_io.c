/* moekit: a run's checkpoint directory (ckpt_io.h). */
#include "ckpt_io.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ckpt/ckpt_dir.h"
#include "../ckpt/ckpt_lock.h"
#include "../ckpt/fsio.h"
#include "ckpt_allowance.h"
#include "hf_export.h"
#include "weights_io.h"

/* Rank 0: the lock, then what the directory already holds. */
static int claim_dir(moe_trainer *t, moe_err *e)
{
    const moe_ckpt_cfg *c = &t->cfg.checkpoint;
    t->ckpt->lock_fd = ckpt_lock_acquire(c->ckpt_dir, e);
    if (t->ckpt->lock_fd < 0)
        return moe_err_prefix(e, "checkpoint.ckpt_dir");
    ckpt_sweep(c->ckpt_dir); /* the sole writer now: what dead ones left goes */
    if (c->resume_from_checkpoint)
        return 0;
    int64_t newest;
    int n = ckpt_count(c->ckpt_dir, &newest, e);
    char final[4200];
    snprintf(final, sizeof final, "%s/final_model", c->ckpt_dir);
    int has_final = access(final, F_OK) == 0;
    if (n < 0)
        return moe_err_prefix(e, "checkpoint.ckpt_dir");
    if (n == 0 && !has_final)
        return 0;
    if (!c->overwrite) {
        if (n > 0)
            return moe_errf(e, "checkpoint.ckpt_dir %s already holds %d checkpoint%s of another "
                               "run (the newest at step %lld): set "
                               "checkpoint.resume_from_checkpoint=true to continue it, "
                               "checkpoint.overwrite=true to replace it, or use another "
                               "checkpoint.ckpt_dir", c->ckpt_dir, n, n == 1 ? "" : "s",
                            (long long)newest);
        return moe_errf(e, "checkpoint.ckpt_dir %s already holds the final_model of another run: "
                           "set checkpoint.overwrite=true to replace it, or use another "
                           "checkpoint.ckpt_dir", c->ckpt_dir);
    }
    if (ckpt_remove_all(c->ckpt_dir, e) || fsio_rm_rf(final, e))
        return moe_err_prefix(e, "checkpoint.overwrite: removing the checkpoints in %s",
                              c->ckpt_dir);
    if (!t->quiet)
        printf("moe-train: checkpoint.overwrite: removed %d checkpoint%s%s from %s\n", n,
               n == 1 ? "" : "s", has_final ? " and final_model" : "", c->ckpt_dir);
    return 0;
}

int ckpt_io_open(moe_trainer *t, moe_err *e)
{
    t->ckpt = calloc(1, sizeof *t->ckpt);
    if (!t->ckpt)
        return moe_errf(e, "out of memory");
    t->ckpt->lock_fd = -1;
    t->ckpt->last_step = -1;
    const moe_ckpt_cfg *c = &t->cfg.checkpoint;
    int failed = 0;
    if (t->rank == 0 && c->ckpt_dir[0])
        failed = claim_dir(t, e);
    if (!failed && t->rank == 0 && c->init_from[0]) {
        moe_model_cfg got;
        failed = weights_check(c->init_from, &t->cfg.model, &got, 1, e);
        if (failed)
            moe_err_prefix(e, "checkpoint.init_from");
    }
    /* rank 0 takes the lock, lists the directory (removing it with overwrite)
     * and reads init_from's config and tensor headers: no bulk bytes, the
     * allowance's parallel.timeout_s covers it */
    ckpt_allow(&t->cfg, 0);
    return comm_agree(t->par.world, failed, "checking the checkpoint directories", e);
}

void ckpt_io_close(moe_trainer *t)
{
    if (!t->ckpt)
        return;
    if (t->ckpt->staging) {
        if (t->ckpt->pinned)
            t->be->pinned_free(t->be, t->ckpt->staging);
        else
            free(t->ckpt->staging);
    }
    ckpt_lock_release(t->ckpt->lock_fd);
    free(t->ckpt);
    t->ckpt = NULL;
}

int ckpt_io_staging(moe_trainer *t, moe_err *e)
{
    struct trainer_ckpt *k = t->ckpt;
    if (k->staging)
        return 0;
    size_t bytes = (size_t)t->cfg.checkpoint.staging_mb << 20;
    k->pinned = t->be->pinned_alloc != NULL;
    k->staging = k->pinned ? t->be->pinned_alloc(t->be, bytes, e) : malloc(bytes);
    if (!k->staging)
        return k->pinned ? moe_err_prefix(e, "checkpoint.staging_mb=%d",
                                          t->cfg.checkpoint.staging_mb)
                         : moe_errf(e, "checkpoint.staging_mb=%d: out of host memory",
                                    t->cfg.checkpoint.staging_mb);
    k->staging_bytes = bytes;
    return 0;
}

/* ---- measurement ---------------------------------------------------------------- */

static double rss_before_mb;

/* VmRSS or VmHWM of this process in MiB (0 where /proc has none). */
static double status_mb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':')
            kb = atof(line + n + 1);
    if (f)
        fclose(f);
    return kb / 1024;
}

void ckpt_io_peak_reset(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "5", 1) != 1) { /* "5": reset the peak RSS to the current RSS */
        }
        close(fd);
    }
    rss_before_mb = status_mb("VmRSS");
}

void ckpt_io_report(moe_trainer *t, const char *verb, const char *dir, double seconds,
                    uint64_t bytes)
{
    if (t->rank != 0 || t->quiet)
        return;
    double mb = (double)bytes / 1e6;
    if (!strcmp(verb, "saved"))
        printf("ckpt  %5d | saved %s (%.1f MB by %d rank%s in %.2f s, %.0f MB/s; rank 0 RSS "
               "%.0f MiB before, %.0f MiB at the peak)\n", t->step, dir, mb, t->world,
               t->world == 1 ? "" : "s", seconds, seconds > 0 ? mb / seconds : 0, rss_before_mb,
               status_mb("VmHWM"));
    else
        printf("ckpt        | %s %.1f MB of %s in %.2f s over %d rank%s\n", verb, mb, dir,
               seconds, t->world, t->world == 1 ? "" : "s");
    fflush(stdout);
}

/* ---- final_model ------------------------------------------------------------------- */

static void final_path(const moe_trainer *t, char *out, size_t n)
{
    snprintf(out, n, "%s/final_model", t->cfg.checkpoint.ckpt_dir);
}

static int export_everywhere(moe_trainer *t, const char *tmp, const hf_export_opts *o,
                             moe_err *e)
{
    const char *src = t->ckpt->last_saved;
    uint64_t most = 0;
    int failed = hf_export_shards(src, tmp, o, t->rank, t->world, &most, e);
    /* waits for the busiest exporter (every rank computes its bytes from the
     * same plan) */
    ckpt_allow(&t->cfg, most);
    if (comm_agree(t->par.world, failed, "writing the final model's shards", e))
        return -1;
    failed = 0;
    if (t->rank == 0) {
        char final[4200];
        final_path(t, final, sizeof final);
        failed = hf_export_finish(src, tmp, o, e) || hf_export_publish(tmp, final, e);
    }
    /* rank 0 writes the small files (config, tokenizer, card) and renames:
     * no bulk bytes */
    ckpt_allow(&t->cfg, 0);
    return comm_agree(t->par.world, failed, "publishing the final model", e);
}

/* After a failed export: what final_model still holds, so nobody takes it
 * for this run's model. Returns -1. */
static int stale_note(const moe_trainer *t, moe_err *e)
{
    char final[4200];
    final_path(t, final, sizeof final);
    if (t->rank != 0 || access(final, F_OK) != 0)
        return -1;
    int64_t was = hf_export_source_step(final);
    char held[64] = "an unrecorded step";
    if (was >= 0)
        snprintf(held, sizeof held, "step %lld", (long long)was);
    if (was == t->ckpt->last_step)
        return -1;
    char why[MOE_ERR_LEN];
    snprintf(why, sizeof why, "%s", e->msg);
    moe_errf(e, "%s; %s still holds %s, not the newest checkpoint (step %d): resume the run "
                "(checkpoint.resume_from_checkpoint=true) to write it again",
             why, final, held, t->ckpt->last_step);
    return -1;
}

int ckpt_io_final_model_current(moe_trainer *t, moe_err *e)
{
    int32_t stale = 0;
    if (t->rank == 0) {
        char final[4200];
        final_path(t, final, sizeof final);
        int exists = access(final, F_OK) == 0;
        int64_t was = exists ? hf_export_source_step(final) : -1;
        stale = !t->ckpt->last_saved[0] ? 0 : was != t->ckpt->last_step;
        if (stale) {
            char held[96] = "is missing";
            if (exists)
                snprintf(held, sizeof held, was >= 0 ? "holds step %lld" : "records no step",
                         (long long)was);
            printf("moe-train: %s %s, not the newest checkpoint (step %d): writing it again "
                   "from %s\n", final, held, t->ckpt->last_step, t->ckpt->last_saved);
        }
    }
    /* rank 0 reads the small export record: no bulk bytes */
    ckpt_allow(&t->cfg, 0);
    if (comm_broadcast(t->par.world, &stale, sizeof stale, 0, e))
        return -1;
    return stale ? ckpt_io_final_model(t, e) : 0;
}

int ckpt_io_final_model(moe_trainer *t, moe_err *e)
{
    struct {
        int32_t failed;
        char tmp[4200];
    } b;
    memset(&b, 0, sizeof b);
    if (t->rank == 0) {
        snprintf(b.tmp, sizeof b.tmp, "%s/.tmp-final_model-%d", t->cfg.checkpoint.ckpt_dir,
                 (int)getpid());
        b.failed = fsio_rm_rf(b.tmp, e) || fsio_mkdir_p(b.tmp, 0755, e);
    }
    /* rank 0 makes the temp directory: no bulk bytes */
    ckpt_allow(&t->cfg, 0);
    if (ckpt_io_staging(t, e) ||
        comm_agree(t->par.world, b.failed, "starting the final model", e) ||
        comm_broadcast(t->par.world, &b, sizeof b, 0, e))
        return moe_err_prefix(e, "saving the final model");
    hf_export_opts o = {ST_BF16, HF_EXPORT_DEFAULT_SHARD_BYTES, t->ckpt->staging,
                        t->ckpt->staging_bytes};
    if (export_everywhere(t, b.tmp, &o, e)) {
        if (t->rank == 0)
            fsio_rm_rf(b.tmp, NULL);
        moe_err_prefix(e, "saving the final model");
        return stale_note(t, e);
    }
    if (t->rank == 0 && !t->quiet)
        printf("final       | model saved to %s/final_model (Hugging Face layout, bf16)\n",
               t->cfg.checkpoint.ckpt_dir);
    return 0;
}

/* Genome collections at the level of the run: a corpus with no held-out
 * data is said at start-up (refused where evaluation was asked for), a
 * failed evaluation still leaves the final checkpoint and the final model,
 * and a store of short records trains packed and resumes bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../trainer/ckpt/fsio.h"
#include "../../trainer/data/data_internal.h"
#include "../../trainer/train/trainer.h"
#include "../check.h"

static char root[] = "/tmp/moekit-collections-XXXXXX";

static int exists(const char *dir, const char *name)
{
    char p[8400];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static int create(moe_trainer *t, int n, char **over, moe_err *e)
{
    moe_config cfg;
    if (config_load(&cfg, "L0_sanity", NULL, n, over, e))
        return -1;
    return trainer_create(t, &cfg, MOE_BACKEND_CPU, 1, e);
}

/* Three records shorter than two windows: nothing to hold out. Evaluation
 * asked for is refused before training; without it the run trains, says
 * so, and saves (it used to fail in the final evaluation, unsaved). */
static void test_no_heldout_said_at_start(void)
{
    char fa[4200], ckpt[4200], data[4300], ck[4300];
    snprintf(fa, sizeof fa, "%s/short.fa", root);
    snprintf(ckpt, sizeof ckpt, "%s/noval", root);
    FILE *f = fopen(fa, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    for (int r = 0; r < 3; r++)
        fprintf(f, ">r%d\n%.100s\n", r,
                "ACGTTGCAACGGTTCAAGCTTGACCATGGTACGATCGATTACGGCATCGACTAGCTAGGATCCATGCAGTCGATCGTAGCTAGCTGACTGATCGATCGTA");
    fclose(f);
    snprintf(data, sizeof data, "data.files=%s", fa);
    snprintf(ck, sizeof ck, "checkpoint.ckpt_dir=%s", ckpt);
    moe_trainer t;
    moe_err e = {{0}};
    /* a fraction so small that none of the three is drawn */
    char *ask[] = {data, "train.eval_every_n_steps=1", "train.micro_batch_size=1", "train.steps=2",
                   "data.val_fraction=1e-6"};
    CHECK(create(&t, 5, ask, &e) == -1);
    CHECK_MSG(strstr(e.msg, "asks for evaluation") && strstr(e.msg, "3 record(s)"), "%s", e.msg);
    char *quiet[] = {data, "train.eval_every_n_steps=0", "train.micro_batch_size=1",
                     "train.steps=2", "scheduler.warmup_steps=1", ck,
                     "checkpoint.save_final_model=true", "data.val_fraction=1e-6"};
    if (create(&t, 8, quiet, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    int rc = trainer_run(&t, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(exists(ckpt, "step_00000002/MANIFEST") && exists(ckpt, "final_model/config.json"));
    trainer_destroy(&t);
}

/* The held-out tail of a store becomes unreadable during the run (its
 * tokens.bin cut short): the evaluation at the end fails, yet the last
 * checkpoint and the final model are written, and the run's error says
 * both the cause and that they were. */
static void test_failed_eval_still_saves(void)
{
    char store[4200], ckpt[4200], ds[4300], ck[4300], tokens[4300];
    snprintf(store, sizeof store, "%s/lambda", root);
    snprintf(ckpt, sizeof ckpt, "%s/evalfail", root);
    const char *in[] = {MOE_GENOME_DIR "/lambda_virus.fa.gz"};
    store_prepare_opts o;
    store_prepare_defaults(&o);
    o.progress = 0;
    store_prepare_result res;
    moe_err e = {{0}};
    if (store_prepare(store, in, 1, &o, &res, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    snprintf(ds, sizeof ds, "data.store=%s", store);
    snprintf(ck, sizeof ck, "checkpoint.ckpt_dir=%s", ckpt);
    char *over[] = {ds, "train.eval_every_n_steps=0", "train.eval_batches=2", "train.steps=2",
                    "scheduler.warmup_steps=1", ck, "checkpoint.save_final_model=true",
                    "train.micro_batch_size=2"};
    moe_trainer t;
    if (create(&t, 8, over, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    /* cut inside the first held-out window: training reads only the head */
    uint64_t val_start, n_real;
    split_window(&t.data->parts[0].val, 0, 128, &val_start, &n_real);
    snprintf(tokens, sizeof tokens, "%s/%s", store, STORE_TOKENS_FILE);
    CHECK(val_start > 40000 && truncate(tokens, (off_t)val_start + 10) == 0);
    int rc = trainer_run(&t, &e);
    CHECK(rc == -1);
    CHECK_MSG(strstr(e.msg, "evaluation") && strstr(e.msg, "cannot read") &&
              strstr(e.msg, "final model were written"), "%s", e.msg);
    CHECK(exists(ckpt, "step_00000002/MANIFEST") && exists(ckpt, "final_model/config.json"));
    trainer_destroy(&t);
}

/* A store of 300 short records, packed: a run stopped at step 3 and resumed
 * ends with the checkpoint a straight run writes, byte for byte. */
static int run_packed(const char *store, const char *ckpt, int stop_after, int resume, int *packed,
                      moe_err *e)
{
    char ds[4300], ck[4300], rs[64];
    snprintf(ds, sizeof ds, "data.store=%s", store);
    snprintf(ck, sizeof ck, "checkpoint.ckpt_dir=%s", ckpt);
    snprintf(rs, sizeof rs, "checkpoint.resume_from_checkpoint=%s", resume ? "true" : "false");
    char *over[] = {ds, ck, rs, "train.steps=6", "scheduler.warmup_steps=2",
                    "train.eval_every_n_steps=3", "train.eval_batches=2",
                    "checkpoint.save_every_n_steps=3", "train.micro_batch_size=2",
                    "train.seq_length=64", "data.reverse_complement=0.5",
                    "checkpoint.save_final_model=false"};
    moe_trainer t;
    if (create(&t, 12, over, e))
        return -1;
    *packed = dataset_packed(t.data);
    t.stop_after_steps = stop_after;
    int rc = trainer_run(&t, e);
    trainer_destroy(&t);
    return rc;
}

static int same_file(const char *a, const char *b)
{
    char *da = NULL, *db = NULL;
    size_t la = 0, lb = 0;
    moe_err e;
    int same = fsio_read_all(a, 1 << 28, &da, &la, &e) == 0 &&
               fsio_read_all(b, 1 << 28, &db, &lb, &e) == 0 && la == lb && !memcmp(da, db, la);
    free(da);
    free(db);
    return same;
}

static void test_packed_store_resumes(void)
{
    char fa[4200], store[4200], ca[4200], cb[4200], pa[4400], pb[4400];
    snprintf(fa, sizeof fa, "%s/contigs.fa", root);
    snprintf(store, sizeof store, "%s/contigs", root);
    snprintf(ca, sizeof ca, "%s/straight", root);
    snprintf(cb, sizeof cb, "%s/resumed", root);
    FILE *f = fopen(fa, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    uint64_t x = 88172645463325252ull;
    for (int r = 0; r < 300; r++) {
        fprintf(f, ">contig%d\n", r);
        int n = 20 + r * 37 % 180;
        for (int i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            fputc("ACGTN"[x % 5], f);
        }
        fputc('\n', f);
    }
    fclose(f);
    const char *in[] = {fa};
    store_prepare_opts o;
    store_prepare_defaults(&o);
    o.progress = 0;
    store_prepare_result res;
    moe_err e = {{0}};
    if (store_prepare(store, in, 1, &o, &res, &e)) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    int packed = 0;
    CHECK_MSG(run_packed(store, ca, 0, 0, &packed, &e) == 0, "%s", e.msg);
    CHECK(packed == 1);
    CHECK(run_packed(store, cb, 3, 0, &packed, &e) == 1);
    CHECK_MSG(run_packed(store, cb, 0, 1, &packed, &e) == 0, "%s", e.msg);
    const char *files[] = {"rank-00000-of-00001.safetensors", "train_state.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(pa, sizeof pa, "%s/step_00000006/%s", ca, files[i]);
        snprintf(pb, sizeof pb, "%s/step_00000006/%s", cb, files[i]);
        CHECK_MSG(same_file(pa, pb), "%s and %s differ", pa, pb);
    }
}

int main(void)
{
    if (!mkdtemp(root))
        return perror("mkdtemp"), 1;
    RUN(test_no_heldout_said_at_start);
    RUN(test_failed_eval_still_saves);
    RUN(test_packed_store_resumes);
    fsio_rm_rf(root, NULL);
    return check_summary("collections");
}

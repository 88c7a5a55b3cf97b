/* Training end to end on the CPU: L0_sanity learns the genome beyond base
 * frequencies; a run stopped and resumed is bit-identical to a straight one;
 * the schedule has the promised shape. MOE_TEST_QUICK=1 (sanitizer builds)
 * shortens the learning run and only checks that the loss falls. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../trainer/ckpt/fsio.h"
#include "../../trainer/train/schedule.h"
#include "../../trainer/train/trainer.h"
#include "../check.h"

static int quick(void)
{
    const char *q = getenv("MOE_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}

static int load(moe_config *cfg, int n, char **over)
{
    moe_err e = {{0}};
    if (config_load(cfg, "L0_sanity", NULL, n, over, &e)) {
        fprintf(stderr, "  config: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* The held-out set's unigram entropy, counted here from the batches. */
static double unigram_entropy(moe_trainer *t)
{
    int B = t->cfg.train.micro_batch_size, T = t->cfg.train.seq_length;
    int n = dataset_val_batches(t->data, B);
    if (t->cfg.train.eval_batches > 0 && t->cfg.train.eval_batches < n)
        n = t->cfg.train.eval_batches;
    double count[256] = {0}, total = 0;
    moe_err e;
    for (int i = 0; i < n; i++) {
        if (dataset_val_batch(t->data, i, B, t->inputs, t->targets, &e))
            return NAN;
        for (int j = 0; j < B * T; j++)
            if (t->targets[j] >= 0) {
                count[t->targets[j]]++;
                total++;
            }
    }
    double h = 0;
    for (int v = 0; v < 256; v++)
        if (count[v] > 0)
            h -= count[v] / total * log(count[v] / total);
    return h;
}

static void test_l0_sanity_learns(void)
{
    char steps[64];
    snprintf(steps, sizeof steps, "train.steps=%d", quick() ? 12 : 300);
    char *over[] = {steps, "train.eval_every_n_steps=0",
                    quick() ? "scheduler.warmup_steps=4" : "scheduler.warmup_steps=30"};
    moe_config cfg;
    if (load(&cfg, 3, over)) {
        CHECK(0);
        return;
    }
    moe_trainer t;
    moe_err e = {{0}};
    if (trainer_create(&t, &cfg, MOE_BACKEND_CPU, 1, &e)) {
        fprintf(stderr, "  %s\n", e.msg);
        CHECK(0);
        return;
    }
    double h = unigram_entropy(&t), before, after;
    CHECK(trainer_evaluate(&t, &before, &e) == 0);
    CHECK(trainer_run(&t, &e) == 0);
    CHECK(trainer_evaluate(&t, &after, &e) == 0);
    fprintf(stderr, "  held-out loss %.4f -> %.4f after %d steps; unigram entropy %.4f nats\n",
            before, after, t.step, h);
    CHECK(isfinite(after) && after < before);
    if (!quick())
        CHECK(after < h);
    trainer_destroy(&t);
}

static int run_to(const char *ckpt, const char *run, int stop_after, int resume, moe_err *e)
{
    char o1[4200], o2[4200], o3[64];
    snprintf(o1, sizeof o1, "checkpoint.ckpt_dir=%s", ckpt);
    snprintf(o2, sizeof o2, "logger.run_dir=%s", run);
    snprintf(o3, sizeof o3, "checkpoint.resume_from_checkpoint=%s", resume ? "true" : "false");
    char *over[] = {"train.steps=8", "scheduler.warmup_steps=2", "train.eval_every_n_steps=4", "train.eval_batches=2",
                    "checkpoint.save_every_n_steps=4", "train.micro_batch_size=2",
                    "train.grad_accum_steps=2", "data.reverse_complement=0.5", o1, o2, o3};
    moe_config cfg;
    if (load(&cfg, 11, over))
        return -1;
    moe_trainer t;
    if (trainer_create(&t, &cfg, MOE_BACKEND_CPU, 1, e))
        return -1;
    t.stop_after_steps = stop_after;
    int rc = trainer_run(&t, e);
    trainer_destroy(&t);
    return rc;
}

/* both files whole (each with a byte to spare for a terminator); 0 on success */
static int read_pair(const char *a, const char *b, char **da, size_t *la, char **db, size_t *lb)
{
    moe_err e;
    *da = *db = NULL;
    if (fsio_read_all(a, 1 << 28, da, la, &e) || fsio_read_all(b, 1 << 28, db, lb, &e)) {
        fprintf(stderr, "  %s\n", e.msg);
        free(*da);
        return -1;
    }
    return 0;
}

static int same_file(const char *a, const char *b)
{
    char *da, *db;
    size_t la, lb;
    if (read_pair(a, b, &da, &la, &db, &lb))
        return 0;
    int same = la == lb && !memcmp(da, db, la);
    if (!same)
        fprintf(stderr, "  %s and %s differ\n", a, b);
    free(da);
    free(db);
    return same;
}

/* metrics.jsonl files that agree line by line up to the timing fields
 * (",\"time\":..." onwards: wall time, rates and memory differ run to run) */
static int same_metrics(const char *a, const char *b)
{
    char *da, *db;
    size_t la, lb;
    if (read_pair(a, b, &da, &la, &db, &lb))
        return 0;
    int same = 1, lines = 0;
    char *sa = NULL, *sb = NULL;
    da[la] = db[lb] = '\0'; /* fsio_read_all leaves a byte for it */
    for (char *x = strtok_r(da, "\n", &sa), *y = strtok_r(db, "\n", &sb); same && (x || y);
         x = strtok_r(NULL, "\n", &sa), y = strtok_r(NULL, "\n", &sb), lines++) {
        char *tx = x ? strstr(x, ",\"time\":") : NULL, *ty = y ? strstr(y, ",\"time\":") : NULL;
        same = x && y && tx && ty && tx - x == ty - y && !memcmp(x, y, (size_t)(tx - x));
        if (!same)
            fprintf(stderr, "  %s and %s differ at line %d\n", a, b, lines + 1);
    }
    free(da);
    free(db);
    return same && lines > 0;
}

static void test_resume_is_bit_identical(void)
{
    char root[] = "/tmp/moekit-resume-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char ca[4200], ra[4200], cb[4200], rb[4200], pa[4300], pb[4300];
    snprintf(ca, sizeof ca, "%s/a/ckpt", root);
    snprintf(ra, sizeof ra, "%s/a/run", root);
    snprintf(cb, sizeof cb, "%s/b/ckpt", root);
    snprintf(rb, sizeof rb, "%s/b/run", root);
    moe_err e = {{0}};
    CHECK(run_to(ca, ra, 0, 0, &e) == 0);
    /* b: stop after 4 of 8 steps, then resume in a new trainer */
    CHECK(run_to(cb, rb, 4, 0, &e) == 1);
    int rc = run_to(cb, rb, 0, 1, &e);
    if (rc)
        fprintf(stderr, "  resume: %s\n", e.msg);
    CHECK(rc == 0);
    const char *files[] = {"rank-00000-of-00001.safetensors", "checkpoint.index.json",
                           "train_state.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(pa, sizeof pa, "%s/step_00000008/%s", ca, files[i]);
        snprintf(pb, sizeof pb, "%s/step_00000008/%s", cb, files[i]);
        CHECK(same_file(pa, pb));
    }
    snprintf(pa, sizeof pa, "%s/metrics.jsonl", ra);
    snprintf(pb, sizeof pb, "%s/metrics.jsonl", rb);
    CHECK(same_metrics(pa, pb));
    fsio_rm_rf(root, NULL);
}

static void test_schedule_shape(void)
{
    CHECK_NEAR(schedule_lr(1.0, 10, 0.1, 0, 100), 0.1, 1e-12);
    CHECK_NEAR(schedule_lr(1.0, 10, 0.1, 9, 100), 1.0, 1e-12);
    CHECK_NEAR(schedule_lr(1.0, 10, 0.1, 10, 100), 1.0, 1e-12);
    CHECK_NEAR(schedule_lr(1.0, 10, 0.1, 99, 100), 0.1, 1e-12);
    double mid = schedule_lr(1.0, 10, 0.1, 10 + 89 / 2, 100);
    CHECK(mid > 0.5 && mid < 0.6);
    for (int s = 11; s < 100; s++)
        CHECK(schedule_lr(1.0, 10, 0.1, s, 100) <= schedule_lr(1.0, 10, 0.1, s - 1, 100));
    CHECK_NEAR(schedule_lr(2.0, 0, 0.0, 0, 1), 2.0, 1e-12);
}

int main(void)
{
    RUN(test_schedule_shape);
    RUN(test_resume_is_bit_identical);
    RUN(test_l0_sanity_learns);
    return check_summary("training");
}

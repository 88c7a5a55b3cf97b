/* moekit: does a run fit its GPUs, and what would (plan.h, plan_fit). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static const double GIB = 1073741824.0;

typedef struct {
    char *msg;
    size_t n, len;
} text;

static void say(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(text *t, const char *fmt, ...)
{
    if (t->len + 1 >= t->n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(t->msg + t->len, t->n - t->len, fmt, ap);
    va_end(ap);
    if (w > 0)
        t->len += (size_t)w < t->n - t->len ? (size_t)w : t->n - t->len - 1;
}

/* What config c2 at EP x dp2 needs of the room (the context left out where it is
 * already in use); 0 when it cannot be planned. */
static double needed(const moe_plan *q, const plan_room *room)
{
    return (double)q->need - (room->context_in_use ? (double)q->dev[PLAN_DEV_CONTEXT] : 0);
}

/* One alternative: the plan of c2 at EP x dp2, said as `what`. Returns 1 when it fits. */
static int alternative(text *t, const char *what, const moe_config *c2, int ep, int dp2,
                       const plan_room *room)
{
    moe_plan q;
    moe_err e = {{0}};
    if (plan_make(&q, c2, ep, dp2, NULL, &e))
        return 0;
    int fits = needed(&q, room) <= room->bytes;
    say(t, "; %s: %.1f GiB%s", what, needed(&q, room) / GIB, fits ? " (fits)" : "");
    return fits;
}

int plan_fit(const moe_config *c, int ep, int dp, double gpu_bytes, int refuse, char *msg,
             size_t n, moe_err *e)
{
    plan_room room = {gpu_bytes, "a GPU has", 0};
    return plan_fit_room(c, ep, dp, &room, refuse, msg, n, e);
}

int plan_fit_room(const moe_config *c, int ep, int dp, const plan_room *room, int refuse,
                  char *msg, size_t n, moe_err *e)
{
    if (n)
        msg[0] = 0;
    moe_plan p;
    if (plan_make(&p, c, ep, dp, NULL, e))
        return PLAN_REFUSE;
    double need = needed(&p, room);
    if (need <= room->bytes)
        return PLAN_FITS;
    text t = {msg, n, 0};
    say(&t,
        "%s at EP=%d x DP=%d needs %.1f GiB per GPU (allocated %.1f: weights %.1f, masters %.1f, "
        "gradients %.1f, optimizer %.1f, activations and expert buffers %.1f, other %.1f",
        c->name, ep, dp, need / GIB, p.total / GIB, p.bytes[MOE_MEM_WEIGHTS] / GIB,
        p.bytes[MOE_MEM_MASTER] / GIB, p.bytes[MOE_MEM_GRADS] / GIB,
        p.bytes[MOE_MEM_OPTIMIZER] / GIB,
        (p.bytes[MOE_MEM_ACTIVATIONS] + p.bytes[MOE_MEM_CAPACITY]) / GIB,
        (p.bytes[MOE_MEM_COMM] + p.bytes[MOE_MEM_WORKSPACE]) / GIB);
    for (int r = 0, first = 1; r < PLAN_DEV_ROWS; r++)
        if (p.dev[r] && !(r == PLAN_DEV_CONTEXT && room->context_in_use)) {
            say(&t, "%s %s %.1f", first ? "; beside them:" : ",", plan_device_row_name(r),
                p.dev[r] / GIB);
            first = 0;
        }
    say(&t, ") but %s %.1f GiB: %.1f GiB short. Would fit or help", room->what,
        room->bytes / GIB, (need - room->bytes) / GIB);
    moe_config *c2 = malloc(sizeof *c2);
    if (c2) {
        /* more GPUs: DP x2, x4, x8 (the shards of the state shrink) */
        for (int f = 2; f <= 8; f *= 2) {
            char what[96];
            snprintf(what, sizeof what, "EP=%d x DP=%d (%d GPUs)", ep, dp * f, ep * dp * f);
            if (alternative(&t, what, c, ep, dp * f, room))
                break;
        }
        if (!c->train.activation_recompute) {
            *c2 = *c;
            c2->train.activation_recompute = 1;
            alternative(&t, "train.activation_recompute=true", c2, ep, dp, room);
        }
        if (c->precision.compute != MOE_PREC_FP8_BLOCK || !c->precision.fp8_saved_activations) {
            *c2 = *c;
            c2->precision.compute = MOE_PREC_FP8_BLOCK;
            c2->precision.fp8_saved_activations = 1;
            alternative(&t, "precision.compute=fp8_block (E4M3 saved activations)", c2, ep, dp,
                        room);
        }
        const moe_recipe *r = precision_recipe(c->precision.compute); /* NULL: auto */
        if (r && r->gemms == MOE_GEMMS_E4M3 && c->runtime.fp8_weight_cache) {
            *c2 = *c;
            c2->runtime.fp8_weight_cache = 0;
            alternative(&t, "runtime.fp8_weight_cache=false", c2, ep, dp, room);
        }
        if (ep > 1 && !c->parallel.overlap_expert_exchange) { /* passes of half the capacity */
            *c2 = *c;
            c2->parallel.overlap_expert_exchange = 1;
            alternative(&t, "parallel.overlap_expert_exchange=true", c2, ep, dp, room);
        }
        if (c->optimizer.moments_dtype != MOE_MOMENTS_DTYPE_BF16) {
            *c2 = *c;
            c2->optimizer.moments_dtype = MOE_MOMENTS_DTYPE_BF16;
            alternative(&t, "optimizer.moments_dtype=bf16", c2, ep, dp, room);
        }
        /* a shorter sequence: halved until it fits, four times at most */
        *c2 = *c;
        for (int h = 0; h < 4 && c2->train.seq_length >= 256; h++) {
            c2->train.seq_length /= 2;
            char what[64];
            snprintf(what, sizeof what, "train.seq_length=%d", c2->train.seq_length);
            if (alternative(&t, what, c2, ep, dp, room))
                break;
        }
        free(c2);
    }
    return refuse ? PLAN_REFUSE : PLAN_WARN;
}

int plan_fit_config(const char *config, const char *configs_dir, char *const *items,
                    int n_items, const char *precision, int ep, int dp, const plan_room *room,
                    int refuse, char *msg, size_t n, moe_err *e)
{
    if (n)
        msg[0] = 0;
    moe_config *c = malloc(sizeof *c);
    if (!c)
        return moe_errf(e, "out of memory"), PLAN_REFUSE;
    if (config_load(c, config, configs_dir, n_items, items, e)) {
        free(c);
        return PLAN_REFUSE;
    }
    /* the verdict's precision decides how the experts keep their activations */
    moe_precision verdict;
    if (precision && precision_parse(precision, &verdict) == 0 &&
        (verdict == MOE_PREC_FP8_BLOCK || verdict == MOE_PREC_BF16))
        c->precision.compute = verdict;
    int rc = plan_fit_room(c, ep, dp, room, refuse, msg, n, e);
    free(c);
    return rc;
}

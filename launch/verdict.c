/* moekit: the launch verdict (see verdict.h).
 *
 * Precision, from the GPUs the step was given; the weakest GPU decides.
 * Which GPU runs which recipe is precision_gpu_can_run's rule (common/):
 *   - MXFP8 only when every GPU is data-centre Blackwell, compute capability
 *     10.x (B200, GB200, B300). Consumer and workstation Blackwell (12.x,
 *     RTX 5090, RTX PRO 6000) is not MXFP8-capable for moekit: its MXFP8
 *     kernels use sm_100's tensor-core path, which 12.x lacks.
 *   - A GPU whose compute capability nobody could tell counts as not
 *     Blackwell, and the paragraph says so.
 *   - Not all Blackwell, policy on_non_blackwell=reject: refused, whatever
 *     precision was asked (bf16 included). on_non_blackwell=bf16: BF16, or
 *     fp8_block when every GPU is Hopper (9.x), allow_fp8_block=yes and the
 *     request is auto or fp8_block. An explicit mxfp8 request falls back with
 *     a warning.
 *   - Compute capability below 8.0 (no BF16 tensor cores): refused.
 *   - On Blackwell, fp8_block (moekit's Hopper recipe) becomes MXFP8.
 * Layout: one rank per GPU; EP defaults to 1, DP to GPUs / EP; DP x EP must
 * equal the step's GPUs (over all its nodes) and its tasks when known; the
 * experts must split evenly over EP.
 * CPU-only steps: refused unless allow_cpu=yes, then FP32 on the CPU
 * backend with DP x EP = tasks. on_non_blackwell applies to GPU steps only. */
#include "verdict.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/layout.h"
#include "../common/precision_choice.h"

const char *verdict_arch_name(int cc_major, int cc_minor)
{
    if (cc_major < 0)
        return "compute capability unknown";
    switch (cc_major) {
    case 7: return cc_minor >= 5 ? "Turing" : "Volta";
    case 8: return cc_minor == 9 ? "Ada Lovelace" : "Ampere";
    case 9: return "Hopper";
    case 10: return "Blackwell";
    case 11: return "Blackwell (Thor)";
    case 12: return "consumer Blackwell";
    default: return cc_major < 7 ? "pre-Volta" : "newer than Blackwell";
    }
}

void verdict_sm_name(char *buf, size_t len, int cc_major, int cc_minor)
{
    if (cc_major < 0)
        snprintf(buf, len, "sm_??");
    else
        snprintf(buf, len, "sm_%d%d", cc_major, cc_minor);
}

int verdict_parse_precision(const char *s, moe_precision *out)
{
    moe_precision p;
    if (precision_parse(s, &p) < 0 || (p != MOE_PREC_AUTO && !precision_recipe(p)->job_choice))
        return -1;
    *out = p;
    return 0;
}

/* The paragraph is built by appending; snprintf truncates safely at the end. */
static void say(moe_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(moe_verdict *v, const char *fmt, ...)
{
    size_t off = strlen(v->paragraph);
    if (off + 1 >= sizeof v->paragraph)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->paragraph + off, sizeof v->paragraph - off, fmt, ap);
    va_end(ap);
}

static int same_kind(const moe_step_gpu *a, const moe_step_gpu *b)
{
    return strcmp(a->model, b->model) == 0 && a->cc_major == b->cc_major &&
           a->cc_minor == b->cc_minor;
}

/* "2x NVIDIA H200 (sm_90, Hopper)", groups joined with commas and "and". */
static void say_gpus(moe_verdict *v, const moe_step *s)
{
    int first[MOE_VERDICT_MAX_GPUS], count[MOE_VERDICT_MAX_GPUS], groups = 0;
    for (int i = 0; i < s->n_gpus; i++) {
        int g = 0;
        while (g < groups && !same_kind(&s->gpus[first[g]], &s->gpus[i]))
            g++;
        if (g == groups) {
            first[groups] = i;
            count[groups++] = 0;
        }
        count[g]++;
    }
    for (int g = 0; g < groups; g++) {
        const moe_step_gpu *x = &s->gpus[first[g]];
        char sm[16];
        verdict_sm_name(sm, sizeof sm, x->cc_major, x->cc_minor);
        say(v, "%s%dx %s (", g == 0 ? "" : g == groups - 1 ? " and " : ", ", count[g],
            x->model[0] ? x->model : "unnamed NVIDIA GPU");
        if (x->cc_major < 0)
            say(v, "compute capability unknown)");
        else
            say(v, "%s, %s)", sm, verdict_arch_name(x->cc_major, x->cc_minor));
    }
    if (s->nnodes > 1)
        say(v, " on each of its %d nodes", s->nnodes);
}

/* Why the step is not all Blackwell, naming the GPUs that make it so. */
static void say_not_blackwell(moe_verdict *v, const moe_step *s)
{
    int consumer = 0, unknown = -1;
    for (int i = 0; i < s->n_gpus; i++) {
        if (s->gpus[i].cc_major == 12)
            consumer = 1;
        if (s->gpus[i].cc_major < 0 && unknown < 0)
            unknown = i;
    }
    say(v, "MXFP8 needs every GPU to be data-centre Blackwell (sm_100)");
    if (consumer)
        say(v, "; consumer Blackwell (sm_120) lacks the sm_100 tensor-core path moekit's MXFP8 "
               "kernels use");
    if (unknown >= 0)
        say(v, "; the compute capability of %s is unknown (neither NVML nor moekit's PCI id "
               "table knows it), which counts as not Blackwell",
            s->gpus[unknown].model);
    /* Data-centre Blackwell the build has no MXFP8 kernels for (a B300, 10.3,
     * from an sm_100a-only build). */
    for (int i = 0; i < s->n_gpus; i++) {
        char why[320];
        if (s->gpus[i].cc_major == 10 &&
            !precision_gpu_can_run(MOE_PREC_MXFP8, 10, s->gpus[i].cc_minor, why, sizeof why)) {
            say(v, "; %s: %s", s->gpus[i].model, why);
            break;
        }
    }
}

static void refuse(moe_verdict *v)
{
    v->kind = MOE_VERDICT_REFUSE;
    v->precision = MOE_PREC_AUTO;
}

static void set_precision(moe_verdict *v, moe_precision p)
{
    v->precision = p;
}

/* Divisors of `experts` that also divide `ranks`: the EP values that work. */
static void say_ep_choices(moe_verdict *v, int experts, int ranks)
{
    int n = 0;
    for (int d = 1; d <= experts && d <= ranks; d++)
        if (experts % d == 0 && ranks % d == 0)
            say(v, "%s%d", n++ ? ", " : "", d);
}

/* DP and EP for `ranks` ranks (GPUs, or tasks on CPU), by layout_rule
 * (common/layout.h). On failure the reason is appended to an already-started
 * refusal paragraph. `unit` is "GPUs" or "tasks". Returns 0 when the layout
 * is valid. */
static int layout(moe_verdict *v, const moe_request *req, const moe_step *s, int ranks,
                  const char *unit)
{
    int ep = req->ep > 0 ? req->ep : 1, dp = 0;
    v->ep = ep;
    moe_layout_code code = layout_rule(ranks, req->ep < 0 ? -1 : ep, req->dp, s->num_experts, &dp);
    v->dp = code == MOE_LAYOUT_OK ? dp : req->dp > 0 ? req->dp : ranks % ep ? 0 : ranks / ep;
    switch (code) {
    case MOE_LAYOUT_OK:
        return 0;
    case MOE_LAYOUT_NOT_POSITIVE:
        say(v, ", but --moe-ep=%d --moe-dp=%d is not a valid layout: EP and DP must be positive. "
               "Fix the options.", req->ep, req->dp);
        break;
    case MOE_LAYOUT_EP_OVER_RANKS:
        say(v, ", but EP=%d needs at least %d %s and the step has %d. Request %d %s or lower "
               "--moe-ep.", ep, ep, unit, ranks, ep, unit);
        break;
    case MOE_LAYOUT_DP_X_EP:
        say(v, ", but DP x EP = %d x %d = %lld ranks does not match its %d %s (one rank per "
               "%s). ", req->dp, ep, (long long)req->dp * ep, ranks, unit,
            strcmp(unit, "GPUs") == 0 ? "GPU" : "task");
        if (ranks % ep == 0)
            say(v, "Use --moe-dp=%d, or leave --moe-dp out and it defaults to %s / EP.",
                ranks / ep, unit);
        else
            say(v, "Request %lld %s, or change --moe-dp/--moe-ep.", (long long)req->dp * ep,
                unit);
        break;
    case MOE_LAYOUT_EP_SPLITS_RANKS:
        say(v, ", but its %d %s do not divide by EP=%d, so DP (%s / EP) has no whole "
               "value. Choose an EP that divides %d.", ranks, unit, ep, unit, ranks);
        break;
    case MOE_LAYOUT_EP_SPLITS_EXPERTS:
        say(v, ", but the config's %d experts do not split evenly over EP=%d. Use an EP that "
               "divides both %d and %d: ", s->num_experts, ep, s->num_experts, ranks);
        say_ep_choices(v, s->num_experts, ranks);
        say(v, ".");
        break;
    }
    return -1;
}

static void decide_cpu(const moe_policy *pol, const moe_request *req, const moe_step *s,
                       moe_verdict *v)
{
    v->cpu_only = 1;
    if (!pol->allow_cpu) {
        refuse(v);
        say(v, "moekit: refusing this job: this step has no NVIDIA GPU, and the policy does not "
               "allow training on CPUs (allow_cpu=no). Request GPUs (e.g. --gres=gpu:2 "
               "--ntasks-per-node=2) on a GPU partition, or ask your administrator for "
               "allow_cpu=yes.");
        return;
    }
    /* Ranks are tasks; when the task count is unknown the request sets it. */
    int ep = req->ep > 0 ? req->ep : 1;
    int ranks = s->ntasks > 0 ? s->ntasks : (req->dp > 0 ? req->dp : 1) * ep;
    char head[sizeof v->paragraph];
    snprintf(head, sizeof head, "this step has no NVIDIA GPU and %d task%s", ranks,
             ranks == 1 ? "" : "s");
    say(v, "moekit: refusing this job: %s", head);
    if (layout(v, req, s, ranks, "tasks")) {
        refuse(v);
        return;
    }
    v->kind = MOE_VERDICT_RUN;
    set_precision(v, MOE_PREC_FP32);
    v->paragraph[0] = '\0';
    say(v, "moekit: %s; the policy allows CPU training (allow_cpu=yes), so the job runs moekit's "
           "FP32 CPU backend.", head);
    if (req->precision != MOE_PREC_AUTO)
        say(v, " Warning: --moe-precision=%s was requested, but the CPU backend computes in "
               "FP32.", precision_name(req->precision));
    say(v, " Running EP=%d x DP=%d on %d task%s.", v->ep, v->dp, ranks, ranks == 1 ? "" : "s");
}

/* Precision for a GPU step, or a refusal (precision_choose decides, this
 * says it). Appends the why. */
static int choose_precision(const moe_policy *pol, const moe_request *req, const moe_step *s,
                            moe_verdict *v)
{
    precision_gpu gpus[MOE_VERDICT_MAX_GPUS];
    for (int i = 0; i < s->n_gpus; i++)
        gpus[i] = (precision_gpu){s->gpus[i].cc_major, s->gpus[i].cc_minor};
    const precision_rules rules = {pol->on_non_blackwell == MOE_NONBW_REJECT,
                                   pol->allow_fp8_block, req->precision_strict};
    moe_precision want = req->precision;
    const precision_choice c = precision_choose(want, gpus, s->n_gpus, &rules);
    const int fp8_block_ok = precision_choose(MOE_PREC_AUTO, gpus, s->n_gpus, &rules).precision ==
                             MOE_PREC_FP8_BLOCK;
    int mixed = 0;
    for (int i = 1; i < s->n_gpus; i++)
        mixed |= !same_kind(&s->gpus[0], &s->gpus[i]);
    /* What follows the list of GPUs, before the decision. */
    const char *lead = mixed ? "; the weakest GPU decides the precision. " : ". ";

    if (c.why == PRECISION_WHY_TOO_OLD) {
        char sm[16];
        verdict_sm_name(sm, sizeof sm, s->gpus[c.gpu].cc_major, s->gpus[c.gpu].cc_minor);
        say(v, "%s%s is %s, and moekit trains in BF16 at the least, which needs compute "
               "capability 8.0 (Ampere) or newer. Run on newer GPUs.", lead,
            s->gpus[c.gpu].model, sm);
        return -1;
    }
    if (c.why == PRECISION_WHY_BLACKWELL_ONLY) {
        say(v, ", and this cluster's policy admits only Blackwell GPUs for moekit jobs "
               "(on_non_blackwell=reject). ");
        say_not_blackwell(v, s);
        say(v, ". Submit to nodes with data-centre Blackwell GPUs (B200, GB200, B300), e.g. "
               "with --partition or --constraint, or ask your administrator.");
        return -1;
    }
    if (c.outcome == PRECISION_REFUSED) { /* precision.strict: the recipe asked, or none */
        char why[320];
        precision_choice_reason(&c, want, gpus, why, sizeof why);
        say(v, "%s--moe-precision=%s was requested with precision.strict = true, but %s, so "
               "the job is refused instead of training in %s. Request GPUs that run %s, or "
               "drop precision.strict.", lead, precision_name(want), why,
            c.why == PRECISION_WHY_STRICT ? "MXFP8" : "BF16", precision_name(want));
        return -1;
    }
    set_precision(v, c.precision);
    if (c.precision == MOE_PREC_MXFP8) {
        if (c.outcome == PRECISION_UPGRADED)
            say(v, "%sfp8_block is moekit's Hopper recipe; on Blackwell the job trains in MXFP8 "
                   "instead (finer 1x32 block scaling).", lead);
        else
            say(v, "%sEvery GPU is Blackwell, so the job trains in MXFP8.", lead);
        return 0;
    }
    if (want == MOE_PREC_BF16 && c.why == PRECISION_WHY_NONE &&
        precision_choose(MOE_PREC_AUTO, gpus, s->n_gpus, &rules).precision == MOE_PREC_MXFP8) {
        say(v, "%sThe job trains in BF16 as requested (--moe-precision=bf16); these GPUs "
               "could also run MXFP8.", lead);
        return 0;
    }
    say(v, "%s", lead);
    switch (c.why) {
    case PRECISION_WHY_FP8_NOT_ALLOWED:
        say(v, "Warning: --moe-precision=fp8_block was requested, but the policy does "
               "not allow it (allow_fp8_block=no), so the job falls back to BF16.");
        return 0;
    case PRECISION_WHY_FP8_NOT_HOPPER:
        say(v, "Warning: --moe-precision=fp8_block was requested, but it needs every "
               "GPU to be Hopper (sm_90), so the job falls back to BF16.");
        return 0;
    case PRECISION_WHY_NOT_BLACKWELL:
        say(v, "Warning: --moe-precision=mxfp8 was requested, but ");
        say_not_blackwell(v, s);
        say(v, ", so the job falls back to BF16 (policy on_non_blackwell=bf16).");
        if (fp8_block_ok)
            say(v, " On these Hopper GPUs --moe-precision=fp8_block is also allowed.");
        return 0;
    default:
        break;
    }
    if (want == MOE_PREC_BF16) {
        say(v, "The job trains in BF16 as requested (--moe-precision=bf16).");
    } else if (want == MOE_PREC_FP8_BLOCK) {
        say(v, "The job trains in FP8 with block scaling as requested "
               "(--moe-precision=fp8_block, allowed on Hopper by allow_fp8_block=yes).");
    } else {
        say_not_blackwell(v, s);
        if (c.precision == MOE_PREC_FP8_BLOCK)
            say(v, "; on Hopper the policy allows FP8 with block scaling (allow_fp8_block=yes), "
                   "so the job trains in fp8_block.");
        else
            say(v, ", so the job falls back to BF16 (policy on_non_blackwell=bf16).");
    }
    return 0;
}

void verdict_decide(const moe_policy *pol, const moe_request *req, const moe_step *step,
                    moe_verdict *out)
{
    memset(out, 0, sizeof *out);
    if (step->n_gpus < 0 || step->n_gpus > MOE_VERDICT_MAX_GPUS) {
        refuse(out);
        say(out, "moekit: refusing this job: the step lists %d GPUs, outside 0-%d; this is a "
                 "moekit bug, please report it.", step->n_gpus, MOE_VERDICT_MAX_GPUS);
        return;
    }
    if (step->n_gpus == 0) {
        decide_cpu(pol, req, step, out);
        return;
    }
    int nodes = step->nnodes > 1 ? step->nnodes : 1;
    long long world_ll = (long long)step->n_gpus * nodes;
    if (world_ll > MOE_VERDICT_MAX_WORLD) {
        refuse(out);
        say(out, "moekit: refusing this job: %d nodes of %d GPUs is %lld GPUs, more than the "
                 "%d moekit can place.", nodes, step->n_gpus, world_ll, MOE_VERDICT_MAX_WORLD);
        return;
    }
    int world = (int)world_ll;

    char gpus[sizeof out->paragraph];
    moe_verdict tmp;
    memset(&tmp, 0, sizeof tmp);
    say_gpus(&tmp, step);
    snprintf(gpus, sizeof gpus, "%s", tmp.paragraph);

    /* The hardware question first: no layout fixes the wrong GPUs. The
     * precision is decided on a scratch paragraph, placed after the opening
     * once the outcome is known. */
    memset(&tmp, 0, sizeof tmp);
    if (choose_precision(pol, req, step, &tmp)) {
        refuse(out);
        say(out, "moekit: refusing this job: this step has %s%s", gpus, tmp.paragraph);
        return;
    }
    say(out, "moekit: refusing this job: this step has %s", gpus);
    if (layout(out, req, step, world, "GPUs")) {
        refuse(out);
        return;
    }
    if (step->ntasks > 0 && step->ntasks != world) {
        say(out, ", but runs %d tasks on its %d GPUs; moekit runs one task per GPU. Use "
                 "--ntasks-per-node=%d.", step->ntasks, world, step->n_gpus);
        refuse(out);
        return;
    }
    out->paragraph[0] = '\0';
    out->kind = MOE_VERDICT_RUN;
    set_precision(out, tmp.precision);
    say(out, "moekit: this step has %s%s Running EP=%d x DP=%d on %d GPU%s", gpus,
        tmp.paragraph, out->ep, out->dp, world, world == 1 ? "" : "s");
    if (nodes > 1)
        say(out, " (%d nodes x %d)", nodes, step->n_gpus);
    say(out, ".");
}

int verdict_precheck(const moe_policy *pol, const moe_request *req, int requested_gpus,
                     int requested_tasks, moe_err *e)
{
    (void)pol; /* what the policy says about precision needs the node */
    if (req->ep < 0)
        return moe_errf(e, "--moe-ep=%d: EP must be a positive integer", req->ep);
    if (req->dp < 0)
        return moe_errf(e, "--moe-dp=%d: DP must be a positive integer", req->dp);
    int ep = req->ep > 0 ? req->ep : 1;
    const struct {
        int n;
        const char *unit;
    } counts[] = {{requested_gpus, "GPUs"}, {requested_tasks, "tasks"}};
    for (int i = 0; i < 2; i++) {
        int n = counts[i].n;
        const char *unit = counts[i].unit;
        switch (n > 0 ? layout_rule(n, ep, req->dp, 0, NULL) : MOE_LAYOUT_OK) {
        case MOE_LAYOUT_EP_OVER_RANKS:
            return moe_errf(e, "--moe-ep=%d needs at least %d %s, but the job requests %d", ep,
                            ep, unit, n);
        case MOE_LAYOUT_DP_X_EP:
            return moe_errf(e, "--moe-dp=%d x --moe-ep=%d = %lld ranks, but the job requests "
                               "%d %s (moekit runs one rank per GPU)",
                            req->dp, ep, (long long)req->dp * ep, n, unit);
        case MOE_LAYOUT_EP_SPLITS_RANKS:
            return moe_errf(e, "the job requests %d %s, which do not divide by --moe-ep=%d "
                               "(DP defaults to %s / EP)", n, unit, ep, unit);
        default: /* the signs are checked above; the experts need the config */
            break;
        }
    }
    if (requested_gpus > 0 && requested_tasks > 0 && requested_gpus != requested_tasks)
        return moe_errf(e, "the job requests %d GPUs but %d tasks; moekit runs one task per GPU "
                           "(e.g. --gres=gpu:N with --ntasks-per-node=N)",
                        requested_gpus, requested_tasks);
    return 0;
}

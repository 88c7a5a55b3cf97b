/* Unit tests for plugin/args.c: the --moe-* option values, without Slurm. */
#include <stdio.h>
#include <string.h>

#include "../../plugin/args.h"
#include "../check.h"

/* Apply one option to a fresh request; returns what args_apply returned. */
static int apply1(moe_request *req, moe_arg_id id, const char *value, int allow_paths,
                  moe_err *e)
{
    memset(req, 0, sizeof *req);
    e->msg[0] = '\0';
    return args_apply(req, id, value, allow_paths, e);
}

/* 1 when the option is refused with a message that names it and contains
 * `why`, and leaves the request untouched; else 0 with the reason in got. */
static int refused(moe_arg_id id, const char *value, int allow_paths, const char *why,
                   char *got, size_t n)
{
    moe_request r;
    moe_err e;
    if (apply1(&r, id, value, allow_paths, &e) != -1) {
        snprintf(got, n, "accepted '%s'", value ? value : "(null)");
        return 0;
    }
    snprintf(got, n, "message '%s' (wanted '%s')", e.msg, why);
    return strstr(e.msg, args_option_name(id)) && strstr(e.msg, why) && !r.active;
}

#define REFUSED(id, value, allow, why)                                                   \
    do {                                                                                 \
        char got_[1200];                                                                 \
        CHECK_MSG(refused((id), (value), (allow), (why), got_, sizeof got_), "%s", got_); \
    } while (0)

static void test_counts_accepted(void)
{
    moe_request r;
    moe_err e;
    CHECK(apply1(&r, MOE_ARG_EP, "2", 0, &e) == 0);
    CHECK(r.ep == 2 && r.active == 1);
    CHECK(apply1(&r, MOE_ARG_DP, "65536", 0, &e) == 0);
    CHECK(r.dp == 65536);
    CHECK(apply1(&r, MOE_ARG_EP, "08", 0, &e) == 0);
    CHECK(r.ep == 8);
}

static void test_counts_refused(void)
{
    REFUSED(MOE_ARG_EP, "two", 0, "not a whole number");
    REFUSED(MOE_ARG_EP, "0", 0, "at least 1");
    REFUSED(MOE_ARG_EP, "000", 0, "at least 1");
    REFUSED(MOE_ARG_DP, "-2", 0, "not a whole number");
    REFUSED(MOE_ARG_DP, "+2", 0, "not a whole number");
    REFUSED(MOE_ARG_DP, "65537", 0, "too large");
    REFUSED(MOE_ARG_EP, "99999999999999999999999", 0, "too large");
    REFUSED(MOE_ARG_EP, "4x", 0, "not a whole number");
    REFUSED(MOE_ARG_EP, "4 ", 0, "not a whole number");
    REFUSED(MOE_ARG_EP, " 4", 0, "not a whole number");
    REFUSED(MOE_ARG_EP, "0x10", 0, "not a whole number");
    REFUSED(MOE_ARG_EP, "1.5", 0, "not a whole number");
    REFUSED(MOE_ARG_EP, "", 0, "needs a number");
    REFUSED(MOE_ARG_DP, NULL, 0, "needs a value");
}

static void test_precision(void)
{
    moe_request r;
    moe_err e;
    const char *names[] = {"auto", "mxfp8", "bf16", "fp8_block"};
    moe_precision want[] = {MOE_PREC_AUTO, MOE_PREC_MXFP8, MOE_PREC_BF16,
                                MOE_PREC_FP8_BLOCK};
    for (int i = 0; i < 4; i++) {
        CHECK(apply1(&r, MOE_ARG_PRECISION, names[i], 0, &e) == 0);
        CHECK(r.precision == want[i]);
        CHECK(strcmp(precision_name(r.precision), names[i]) == 0);
    }
    REFUSED(MOE_ARG_PRECISION, "fp8", 0, "unknown precision");
    REFUSED(MOE_ARG_PRECISION, "BF16", 0, "unknown precision");
    REFUSED(MOE_ARG_PRECISION, "bf16 ", 0, "use auto, bf16, fp8_block or mxfp8");
    REFUSED(MOE_ARG_PRECISION, "", 0, "unknown precision");
}

static void test_config_names(void)
{
    moe_request r;
    moe_err e;
    CHECK(apply1(&r, MOE_ARG_CONFIG, "L0_sanity", 0, &e) == 0);
    CHECK(strcmp(r.config, "L0_sanity") == 0 && r.active);
    CHECK(apply1(&r, MOE_ARG_CONFIG, "L1_8x7B_ep.v2-test", 0, &e) == 0);

    REFUSED(MOE_ARG_CONFIG, "../etc/passwd", 0, "not paths");
    REFUSED(MOE_ARG_CONFIG, "sub/dir", 0, "allow_user_configs=no");
    REFUSED(MOE_ARG_CONFIG, "/abs/path.cfg", 0, "not paths");
    REFUSED(MOE_ARG_CONFIG, "a..b", 0, "'..'");
    REFUSED(MOE_ARG_CONFIG, "..", 0, "cannot start with '.'");
    REFUSED(MOE_ARG_CONFIG, ".hidden", 0, "cannot start with '.'");
    REFUSED(MOE_ARG_CONFIG, "x;rm -rf ~", 0, "';' is not allowed");
    REFUSED(MOE_ARG_CONFIG, "$(id)", 0, "'$' is not allowed");
    REFUSED(MOE_ARG_CONFIG, "a`b`", 0, "'`' is not allowed");
    REFUSED(MOE_ARG_CONFIG, "a b", 0, "' ' is not allowed");
    REFUSED(MOE_ARG_CONFIG, "a|b", 0, "'|' is not allowed");
    REFUSED(MOE_ARG_CONFIG, "a\nb", 0, "control character");
    REFUSED(MOE_ARG_CONFIG, "a\tb", 1, "control character");
    REFUSED(MOE_ARG_CONFIG, "", 0, "needs a config name");

    char longname[MOE_ARG_MAX_NAME + 2];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    REFUSED(MOE_ARG_CONFIG, longname, 0, "characters long");
    longname[MOE_ARG_MAX_NAME] = '\0';
    CHECK(apply1(&r, MOE_ARG_CONFIG, longname, 0, &e) == 0);
}

static void test_config_paths_when_allowed(void)
{
    moe_request r;
    moe_err e;
    CHECK(apply1(&r, MOE_ARG_CONFIG, "/home/u/my run.cfg", 1, &e) == 0);
    CHECK(strcmp(r.config, "/home/u/my run.cfg") == 0);
    CHECK(args_config_is_path(r.config));
    CHECK(apply1(&r, MOE_ARG_CONFIG, "../mine.cfg", 1, &e) == 0);
    CHECK(!args_config_is_path("L0_sanity"));
    /* A name still follows the name rules when paths are allowed. */
    REFUSED(MOE_ARG_CONFIG, "bad;name", 1, "not allowed");

    static char longpath[sizeof r.config + 8];
    memset(longpath, 'p', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    REFUSED(MOE_ARG_CONFIG, longpath, 1, "characters long");
}

static void test_set_items(void)
{
    char buf[512], *items[8];
    moe_err e;
    int n = args_split_set("train.steps=20,checkpoint.ckpt_dir=/tmp/x", buf, sizeof buf, items, 8,
                           &e);
    CHECK(n == 2);
    CHECK(n == 2 && strcmp(items[0], "train.steps=20") == 0);
    CHECK(n == 2 && strcmp(items[1], "checkpoint.ckpt_dir=/tmp/x") == 0);

    /* Commas inside brackets and quotes belong to the value. */
    n = args_split_set("optimizer.betas=[0.9,0.95],logger.run_dir=\"/a,b\",train.seed=1", buf,
                       sizeof buf, items, 8, &e);
    CHECK(n == 3);
    CHECK(n == 3 && strcmp(items[0], "optimizer.betas=[0.9,0.95]") == 0);
    CHECK(n == 3 && strcmp(items[1], "logger.run_dir=/a,b") == 0);

    /* The one quoting rule: any path passes intact inside "...", with \" and \\. */
    n = args_split_set("checkpoint.ckpt_dir=\"/s/a,b\\\"c\\\\d x[1\",checkpoint.resume_from_"
                       "checkpoint=true",
                       buf, sizeof buf, items, 8, &e);
    CHECK_MSG(n == 2, "%s", e.msg);
    CHECK(n == 2 && strcmp(items[0], "checkpoint.ckpt_dir=/s/a,b\"c\\d x[1") == 0);
    CHECK(n == 2 && strcmp(items[1], "checkpoint.resume_from_checkpoint=true") == 0);
    n = args_split_set("logger.run_dir=\"\\x]\"", buf, sizeof buf, items, 8, &e);
    CHECK(n == 1 && strcmp(items[0], "logger.run_dir=\\x]") == 0); /* other \ stay */

    /* Only the keys the plugin decides are reserved, not their neighbours. */
    n = args_split_set("parallel.timeout_s=60,precision.layers=all,runtime.threads=2", buf,
                       sizeof buf, items, 8, &e);
    CHECK_MSG(n == 3, "%s", e.msg);
    n = args_split_set("parallel.epx=1", buf, sizeof buf, items, 8, &e);
    CHECK(n == 1);

    /* Values with shell metacharacters are fine: nothing goes through a shell. */
    n = args_split_set("logger.run_dir=/tmp/$HOME;x", buf, sizeof buf, items, 8, &e);
    CHECK(n == 1);

    moe_request r;
    CHECK(apply1(&r, MOE_ARG_SET, "train.steps=20", 0, &e) == 0);
    CHECK(strcmp(r.set, "train.steps=20") == 0 && r.active);
}

static void test_set_refused(void)
{
    REFUSED(MOE_ARG_SET, "train.steps", 0, "not key=value");
    REFUSED(MOE_ARG_SET, "=5", 0, "no key");
    REFUSED(MOE_ARG_SET, "train.steps=", 0, "has no value");
    REFUSED(MOE_ARG_SET, "train-steps=5", 0, "'-'");
    REFUSED(MOE_ARG_SET, "train steps=5", 0, "' '");
    REFUSED(MOE_ARG_SET, "a;b=5", 0, "';'");
    REFUSED(MOE_ARG_SET, ".train=5", 0, "not a config path");
    REFUSED(MOE_ARG_SET, "train..steps=5", 0, "not a config path");
    REFUSED(MOE_ARG_SET, "train.=5", 0, "not a config path");
    REFUSED(MOE_ARG_SET, "train.steps=5,,train.seed=1", 0, "empty item");
    REFUSED(MOE_ARG_SET, "train.steps=5,", 0, "empty item");
    REFUSED(MOE_ARG_SET, "logger.run_dir=\"/x", 0, "unterminated");
    /* An unbalanced '[' would swallow the next item: refused, not guessed. */
    REFUSED(MOE_ARG_SET, "checkpoint.ckpt_dir=/s/x[1,checkpoint.resume_from_checkpoint=true", 0,
            "'[' without ']'");
    REFUSED(MOE_ARG_SET, "logger.run_dir=/x]1", 0, "']' without '['");
    REFUSED(MOE_ARG_SET, "logger.run_dir=/a\"b", 0, "quote the whole value");
    REFUSED(MOE_ARG_SET, "logger.run_dir=\"/a\"b", 0, "text after the closing");
    REFUSED(MOE_ARG_SET, "train.steps=5\n", 0, "control character");
    REFUSED(MOE_ARG_SET, "logger.run_dir=a\x1b[0m", 0, "control character");
    REFUSED(MOE_ARG_SET, "", 0, "needs key=value");
    /* What the plugin decides cannot be overridden. */
    REFUSED(MOE_ARG_SET, "precision.compute=mxfp8", 0, "--moe-precision");
    REFUSED(MOE_ARG_SET, "train.steps=1,parallel.ep=8", 0, "--moe-ep");
    REFUSED(MOE_ARG_SET, "parallel.dp=8", 0, "--moe-dp");
    REFUSED(MOE_ARG_SET, "runtime.backend=cuda", 0, "decided by the plugin");
    REFUSED(MOE_ARG_SET, "precision.allow_fp8_block=true", 0, "allow_fp8_block decides");

    static char longval[MOE_ARG_MAX_VALUE + 32];
    strcpy(longval, "logger.run_dir=");
    memset(longval + strlen(longval), 'v', MOE_ARG_MAX_VALUE + 1);
    REFUSED(MOE_ARG_SET, longval, 0, "characters long");

    /* Too many items. */
    char many[MOE_ARG_STEP_MAX_ITEMS * 8 + 16] = "";
    for (int i = 0; i <= MOE_ARG_MAX_ITEMS; i++)
        strcat(many, i ? ",a.b=1" : "a.b=1");
    moe_request r0;
    moe_err e0;
    CHECK(apply1(&r0, MOE_ARG_SET, many, 0, &e0) == 0); /* a step has room for the script's */
    CHECK(args_check_user_set(many, &e0) == -1 && strstr(e0.msg, "more than 64 items"));
    for (int i = MOE_ARG_MAX_ITEMS; i <= MOE_ARG_STEP_MAX_ITEMS; i++)
        strcat(many, ",a.b=1");
    REFUSED(MOE_ARG_SET, many, 0, "more than");
    many[0] = '\0';
    for (int i = 0; i < MOE_ARG_MAX_ITEMS; i++)
        strcat(many, i ? ",a.b=1" : "a.b=1");
    CHECK(args_check_user_set(many, &e0) == 0);

    static char huge[sizeof((moe_request *)0)->set + 16];
    memset(huge, 'x', sizeof huge - 1);
    REFUSED(MOE_ARG_SET, huge, 0, "too long");
}

static void test_check_flag(void)
{
    moe_request r;
    moe_err e;
    CHECK(apply1(&r, MOE_ARG_CHECK, NULL, 0, &e) == 0);
    CHECK(r.check_only == 1 && r.active == 1);
    CHECK(apply1(&r, MOE_ARG_CHECK, "", 0, &e) == 0);
    /* How an sbatch flag reaches the job's sruns (SLURM_SPANK__..._moe_check). */
    CHECK(apply1(&r, MOE_ARG_CHECK, "(null)", 0, &e) == 0 && r.check_only == 1);
    REFUSED(MOE_ARG_CHECK, "yes", 0, "takes no value");
}

/* Slurm may run a callback twice in slurmstepd: same value, same request. */
static void test_idempotent(void)
{
    moe_request once, twice;
    moe_err e;
    memset(&once, 0, sizeof once);
    memset(&twice, 0, sizeof twice);
    const struct {
        moe_arg_id id;
        const char *v;
    } opts[] = {{MOE_ARG_CONFIG, "L0_sanity"}, {MOE_ARG_EP, "2"}, {MOE_ARG_DP, "4"},
                {MOE_ARG_PRECISION, "bf16"}, {MOE_ARG_SET, "train.steps=3"}, {MOE_ARG_CHECK, NULL}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        CHECK(args_apply(&once, opts[i].id, opts[i].v, 0, &e) == 0);
        CHECK(args_apply(&twice, opts[i].id, opts[i].v, 0, &e) == 0);
        CHECK(args_apply(&twice, opts[i].id, opts[i].v, 0, &e) == 0);
    }
    CHECK(memcmp(&once, &twice, sizeof once) == 0);

    /* A refused value leaves the earlier one in place. */
    CHECK(args_apply(&twice, MOE_ARG_EP, "zero", 0, &e) == -1);
    CHECK(twice.ep == 2);
    /* A later value replaces an earlier one, as Slurm forwards the last. */
    CHECK(args_apply(&twice, MOE_ARG_EP, "4", 0, &e) == 0);
    CHECK(twice.ep == 4);
}

static void test_table_and_describe(void)
{
    for (int i = 0; i < MOE_ARG_COUNT; i++) {
        CHECK(moe_args[i].name && strncmp(moe_args[i].name, "moe-", 4) == 0);
        CHECK(moe_args[i].usage && moe_args[i].usage[0]);
        CHECK(strcmp(args_option_name((moe_arg_id)i) + 2, moe_args[i].name) == 0);
    }
    CHECK(moe_args[MOE_ARG_CHECK].arginfo == NULL);
    CHECK(moe_args[MOE_ARG_EP].arginfo != NULL);

    moe_request r;
    moe_err e;
    memset(&r, 0, sizeof r);
    CHECK(args_apply(&r, MOE_ARG_CONFIG, "L0_sanity", 0, &e) == 0);
    CHECK(args_apply(&r, MOE_ARG_EP, "2", 0, &e) == 0);
    CHECK(args_apply(&r, MOE_ARG_CHECK, NULL, 0, &e) == 0);
    char buf[256];
    args_describe(&r, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, "--moe-config=L0_sanity --moe-ep=2 --moe-check") == 0, "%s", buf);
    char tiny[8];
    args_describe(&r, tiny, sizeof tiny);
    CHECK(strlen(tiny) == sizeof tiny - 1);
}

int main(void)
{
    RUN(test_counts_accepted);
    RUN(test_counts_refused);
    RUN(test_precision);
    RUN(test_config_names);
    RUN(test_config_paths_when_allowed);
    RUN(test_set_items);
    RUN(test_set_refused);
    RUN(test_check_flag);
    RUN(test_idempotent);
    RUN(test_table_and_describe);
    return check_summary("test_args");
}

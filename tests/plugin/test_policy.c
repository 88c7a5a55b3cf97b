/* Unit tests: plugstack.conf arguments -> moe_policy (launch/policy.c). */
#include <string.h>
#include <unistd.h>

#include "../../launch/policy.h"
#include "../check.h"

static int parse(moe_policy *p, moe_err *e, int argc, char **argv)
{
    memset(e, 0, sizeof *e);
    return policy_parse(p, argc, argv, e);
}

#define ARGS(...) (sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)), (char *[]){__VA_ARGS__}

static void test_defaults(void)
{
    moe_policy p;
    moe_err e;
    memset(&p, 0x5a, sizeof p); /* every default must be written, not inherited */
    CHECK(parse(&p, &e, 0, NULL) == 0);
    CHECK(p.on_non_blackwell == MOE_NONBW_BF16);
    CHECK(p.allow_user_configs == 0);
    CHECK(p.allow_cpu == 0);
    CHECK(p.allow_fp8_block == 0);
    CHECK(p.bind == 1);
    CHECK(p.planner_timeout_s == MOE_PLANNER_TIMEOUT_DEFAULT);
    CHECK(p.topology_xml[0] == '\0');
    CHECK(strcmp(p.configs, MOE_CONFIG_DIR_DEFAULT) == 0);
    /* The build points trainer= at its own moe-train. */
    size_t n = strlen(p.trainer);
    CHECK(p.trainer[0] == '/');
    CHECK(n > strlen("/bin/moe-train") &&
          strcmp(p.trainer + n - strlen("/bin/moe-train"), "/bin/moe-train") == 0);
    /* a test binary runs from the build tree: its moe-train and data/ */
    CHECK(access(p.trainer, X_OK) == 0);
    CHECK(strcmp(p.data, MOE_DATA_DIR_DEFAULT) == 0);
}

static void test_every_key(void)
{
    moe_policy p;
    moe_err e;
    CHECK(parse(&p, &e,
                ARGS("trainer=/opt/moekit/bin/moe-train", "configs=/etc/moekit/configs",
                     "on_non_blackwell=reject", "allow_user_configs=yes", "allow_cpu=yes",
                     "allow_fp8_block=yes", "topology_xml=/etc/moekit/node.xml", "bind=no",
                     "data=/srv/genomes")) == 0);
    CHECK(strcmp(p.data, "/srv/genomes") == 0);
    CHECK(strcmp(p.trainer, "/opt/moekit/bin/moe-train") == 0);
    CHECK(strcmp(p.configs, "/etc/moekit/configs") == 0);
    CHECK(p.on_non_blackwell == MOE_NONBW_REJECT);
    CHECK(p.allow_user_configs == 1);
    CHECK(p.allow_cpu == 1);
    CHECK(p.allow_fp8_block == 1);
    CHECK(strcmp(p.topology_xml, "/etc/moekit/node.xml") == 0);
    CHECK(p.bind == 0);

    /* The other value of each enumerated key. */
    CHECK(parse(&p, &e, ARGS("on_non_blackwell=bf16", "allow_user_configs=no", "allow_cpu=no",
                             "allow_fp8_block=no", "bind=yes")) == 0);
    CHECK(p.on_non_blackwell == MOE_NONBW_BF16);
    CHECK(!p.allow_user_configs && !p.allow_cpu && !p.allow_fp8_block && p.bind);
    /* How long the trainer may take to answer, in whole seconds. */
    CHECK(parse(&p, &e, ARGS("planner_timeout=5")) == 0 && p.planner_timeout_s == 5);
    CHECK(parse(&p, &e, ARGS("planner_timeout=600")) == 0 && p.planner_timeout_s == 600);
    char *bad_timeouts[] = {"planner_timeout=0", "planner_timeout=601",
                            "planner_timeout=5s", "planner_timeout=-1",
                            "planner_timeout=+5", "planner_timeout= 5"};
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
        CHECK(parse(&p, &e, ARGS(bad_timeouts[i])) == -1);
        CHECK_MSG(strstr(e.msg, "planner_timeout must be a whole number of seconds from 1 to 600"),
                  "%s: %s", bad_timeouts[i], e.msg);
    }
    /* A value may contain '='. */
    CHECK(parse(&p, &e, ARGS("configs=/srv/a=b")) == 0);
    CHECK(strcmp(p.configs, "/srv/a=b") == 0);
}

static void test_errors_name_the_argument(void)
{
    moe_policy p;
    moe_err e;
    CHECK(parse(&p, &e, ARGS("bind=yes", "colour=blue")) == -1);
    CHECK_MSG(strstr(e.msg, "argument 2") && strstr(e.msg, "unknown key \"colour\"") &&
                  strstr(e.msg, "known keys: trainer"),
              "%s", e.msg);

    CHECK(parse(&p, &e, ARGS("allow_cpu=maybe")) == -1);
    CHECK_MSG(strstr(e.msg, "argument 1") && strstr(e.msg, "allow_cpu must be yes or no"), "%s",
              e.msg);
    CHECK(parse(&p, &e, ARGS("bind=YES")) == -1); /* exact words only */
    CHECK_MSG(strstr(e.msg, "bind must be yes or no"), "%s", e.msg);

    CHECK(parse(&p, &e, ARGS("on_non_blackwell=fp32")) == -1);
    CHECK_MSG(strstr(e.msg, "on_non_blackwell must be bf16 or reject"), "%s", e.msg);

    CHECK(parse(&p, &e, ARGS("allow_cpu=yes", "bind=no", "allow_cpu=no")) == -1);
    CHECK_MSG(strstr(e.msg, "argument 3") && strstr(e.msg, "allow_cpu was already set by "
                                                           "argument 1"),
              "%s", e.msg);

    CHECK(parse(&p, &e, ARGS("bind")) == -1);
    CHECK_MSG(strstr(e.msg, "\"bind\"") && strstr(e.msg, "expected key=value"), "%s", e.msg);
    CHECK(parse(&p, &e, ARGS("=yes")) == -1);
    CHECK_MSG(strstr(e.msg, "expected key=value"), "%s", e.msg);
    CHECK(parse(&p, &e, ARGS("allow_cpu=")) == -1);
    CHECK_MSG(strstr(e.msg, "allow_cpu needs a value"), "%s", e.msg);
    CHECK(parse(&p, &e, ARGS("allow_cpux=yes")) == -1); /* prefix of no key */
    CHECK_MSG(strstr(e.msg, "unknown key \"allow_cpux\""), "%s", e.msg);
    CHECK(parse(&p, &e, ARGS("allow=yes")) == -1); /* a key's prefix is no key */
    CHECK_MSG(strstr(e.msg, "unknown key \"allow\""), "%s", e.msg);
}

static void test_paths_must_be_absolute(void)
{
    moe_policy p;
    moe_err e;
    const char *keys[] = {"trainer", "configs", "topology_xml"};
    for (int i = 0; i < 3; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "%s=bin/thing", keys[i]);
        char *argv[] = {arg};
        CHECK(parse(&p, &e, 1, argv) == -1);
        CHECK_MSG(strstr(e.msg, keys[i]) && strstr(e.msg, "must be an absolute path"), "%s",
                  e.msg);
    }
    static char longarg[5000];
    memcpy(longarg, "trainer=/", 9);
    memset(longarg + 9, 'x', sizeof longarg - 10);
    char *argv[] = {longarg};
    CHECK(parse(&p, &e, 1, argv) == -1);
    CHECK_MSG(strstr(e.msg, "trainer is longer than 4095 bytes"), "%s", e.msg);
}

static void test_parse_string(void)
{
    moe_policy p;
    moe_err e = {{0}};
    CHECK(policy_parse_string(&p, "  on_non_blackwell=reject\tallow_cpu=yes\n", &e) == 0);
    CHECK(p.on_non_blackwell == MOE_NONBW_REJECT && p.allow_cpu == 1 && p.bind == 1);
    CHECK(policy_parse_string(&p, "", &e) == 0);
    CHECK(p.on_non_blackwell == MOE_NONBW_BF16 && p.allow_cpu == 0);
    CHECK(policy_parse_string(&p, NULL, &e) == 0);
    CHECK(policy_parse_string(&p, "bind=no bind=yes", &e) == -1);
    CHECK_MSG(strstr(e.msg, "argument 2") && strstr(e.msg, "already set"), "%s", e.msg);

    char many[65 * 8 + 1] = "";
    for (int i = 0; i < 65; i++)
        strcat(many, "bind=no ");
    CHECK(policy_parse_string(&p, many, &e) == -1);
    CHECK_MSG(strstr(e.msg, "more than 64 words"), "%s", e.msg);
}

/* policy_format writes words policy_parse_string reads back to the same policy. */
static void test_format_round_trip(void)
{
    const char *cases[] = {
        "",
        "on_non_blackwell=reject allow_cpu=yes bind=no",
        "trainer=/x/moe-train configs=/y allow_user_configs=yes allow_fp8_block=yes "
        "topology_xml=/z/node.xml",
    };
    for (int i = 0; i < 3; i++) {
        moe_policy a, b;
        moe_err e = {{0}};
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        CHECK(policy_parse_string(&a, cases[i], &e) == 0);
        char words[16384];
        policy_format(&a, words, sizeof words);
        CHECK_MSG(policy_parse_string(&b, words, &e) == 0, "%s: %s", words, e.msg);
        CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "round trip of \"%s\" via \"%s\"", cases[i],
                  words);
    }
}

int main(void)
{
    RUN(test_defaults);
    RUN(test_every_key);
    RUN(test_errors_name_the_argument);
    RUN(test_paths_must_be_absolute);
    RUN(test_parse_string);
    RUN(test_format_round_trip);
    return check_summary("policy");
}

/* Unit tests for plugin/planner.c: the answer's parser, the child process
 * (every way it can fail is an error naming the program, never a hang), and
 * the answers shared by the tasks of a step; then the real moe-train
 * answering through it (config_resolve.c's two questions). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "../../plugin/config_resolve.h"
#include "../../plugin/planner.h"

static char scratch[256];

static int parse(const char *text, planner_answer *a, moe_err *e)
{
    return planner_parse(text, strlen(text), a, e);
}

static void test_parse_accepts_the_grammar(void)
{
    static planner_answer a;
    moe_err e;
    CHECK_MSG(parse("{\"moekit_query\":1,\"ok\":true,\"n\":-42,\"s\":\"a\\\"b\\\\c\\nd\\u00e9\\u0001\","
                    "\"f\":false}\n",
                    &a, &e) == 0,
              "%s", e.msg);
    CHECK(a.n == 5);
    const planner_field *f = planner_get(&a, "s", PLANNER_STRING);
    CHECK(f && strcmp(f->str, "a\"b\\c\nd\xc3\xa9\x01") == 0);
    CHECK(planner_get(&a, "n", PLANNER_INT) && planner_get(&a, "n", PLANNER_INT)->num == -42);
    CHECK(planner_get(&a, "ok", PLANNER_BOOL)->num == 1);
    CHECK(planner_get(&a, "f", PLANNER_BOOL)->num == 0);
    CHECK(planner_get(&a, "n", PLANNER_STRING) == NULL); /* the wrong type is absent */
    CHECK(planner_get(&a, "missing", PLANNER_INT) == NULL);
    CHECK(parse(" { } ", &a, &e) == 0 && a.n == 0);
    /* raw UTF-8 passes through */
    CHECK(parse("{\"m\":\"EP \xc3\x97 DP\"}", &a, &e) == 0 &&
          !strcmp(planner_get(&a, "m", PLANNER_STRING)->str, "EP \xc3\x97 DP"));
}

static void test_parse_refuses_everything_else(void)
{
    static planner_answer a;
    moe_err e;
    const char *bad[] = {
        "",                          /* nothing */
        "garbage",                   /* not an object */
        "{\"a\":1",                  /* unterminated */
        "{\"a\":1}{}",               /* two objects */
        "{\"a\":1}\n\n",             /* more than one newline */
        "{\"a\":1,}",                /* trailing comma */
        "{\"a\":1,\"a\":2}",         /* duplicate */
        "{\"A\":1}",                 /* key not lower-case */
        "{\"a\":1.5}",               /* floats */
        "{\"a\":1e3}",               /* exponents */
        "{\"a\":01}",                /* leading zero */
        "{\"a\":99999999999999999999}", /* overflow */
        "{\"a\":null}",              /* null */
        "{\"a\":[1]}",               /* nesting */
        "{\"a\":{\"b\":1}}",         /* nesting */
        "{\"a\":\"x\ny\"}",          /* raw control character */
        "{\"a\":\"\\x\"}",           /* unknown escape */
        "{\"a\":\"\\u12\"}",         /* short \u */
        "{\"a\":\"\\u0000\"}",       /* NUL */
        "{\"a\":\"\\ud800\"}",       /* surrogate */
        "{a:1}",                     /* unquoted key */
        "{\"a\" 1}",                 /* no colon */
        "{\"a\":tru}",               /* bad literal */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(parse(bad[i], &a, &e) == -1, "accepted %s", bad[i]);
    CHECK(parse("{\"a\":1}", &a, &e) == 0);
    /* embedded NUL in the text */
    CHECK(planner_parse("{\"a\":1}\0", 8, &a, &e) == -1);
    /* too many members */
    char many[1024] = "{";
    for (int i = 0; i <= PLANNER_MAX_FIELDS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"k%d\":1", i ? "," : "", i);
    strcat(many, "}");
    CHECK(parse(many, &a, &e) == -1 && strstr(e.msg, "too many"));
}

/* A fake trainer: a shell script in scratch. */
static void script(const char *name, const char *body, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", scratch, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
}

static int ask(const char *prog, int timeout_s, planner_answer *a, moe_err *e)
{
    char *argv[] = {(char *)prog, "query", "--config-facts", NULL};
    return planner_ask(prog, argv, timeout_s, a, e);
}

static void test_failures_name_the_program(void)
{
    static planner_answer a;
    moe_err e;
    char p[512];

    snprintf(p, sizeof p, "%s/no-such-trainer", scratch);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, p) && strstr(e.msg, "cannot run") && strstr(e.msg, "No such file"),
              "%s", e.msg);

    snprintf(p, sizeof p, "%s/not-executable", scratch);
    FILE *f = fopen(p, "w");
    if (f)
        fclose(f);
    chmod(p, 0644);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, p) && strstr(e.msg, "Permission denied"), "%s", e.msg);

    /* a hang is killed at the limit, with its process group */
    script("hangs", "echo started >&2; sleep 60 & sleep 60", p, sizeof p);
    time_t t0 = time(NULL);
    CHECK(ask(p, 1, &a, &e) == -1);
    CHECK_MSG(time(NULL) - t0 <= 3, "took %ld s", (long)(time(NULL) - t0));
    CHECK_MSG(strstr(e.msg, p) && strstr(e.msg, "did not answer within 1 s (killed") &&
                  strstr(e.msg, "started"),
              "%s", e.msg);

    script("crashes", "echo dying >&2; kill -SEGV $$", p, sizeof p);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, p) && strstr(e.msg, "killed by signal 11") && strstr(e.msg, "dying"),
              "%s", e.msg);

    script("fails", "echo 'moe-train: unrecognized option' >&2; exit 2", p, sizeof p);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, "failed (exit status 2)") && strstr(e.msg, "unrecognized option"),
              "%s", e.msg);

    script("garbage", "echo 'this is not json'", p, sizeof p);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, p) && strstr(e.msg, "not a moekit query answer") &&
                  strstr(e.msg, "this is not json"),
              "%s", e.msg);

    script("old-version", "echo '{\"moekit_query\":2,\"ok\":true}'", p, sizeof p);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, "version 2"), "%s", e.msg);

    script("no-ok", "echo '{\"moekit_query\":1}'", p, sizeof p);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, "without \"ok\""), "%s", e.msg);

    script("huge", "head -c 100000 /dev/zero | tr '\\0' x", p, sizeof p);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, "answered more than"), "%s", e.msg);

    script("fine", "echo '{\"moekit_query\":1,\"ok\":true}'", p, sizeof p);
    CHECK_MSG(ask(p, 5, &a, &e) == 0, "%s", e.msg);
}

/* What the child gets: /dev/null, two pipes, nothing else; a fixed
 * environment; permanent credentials. */
static void test_child_is_clean(void)
{
    static planner_answer a;
    moe_err e;
    char p[512];
    /* a descriptor of ours without O_CLOEXEC must not reach the child */
    int leak = open("/dev/null", O_RDONLY);
    CHECK(leak > 2);
    setenv("MOE_FP8_GEMMS", "1", 1);
    setenv("LD_PRELOAD", "", 1);
    char fdlist[600];
    snprintf(fdlist, sizeof fdlist, "%s/fds", scratch);
    char body[2000];
    snprintf(body, sizeof body,
             "ls -l /proc/$$/fd > %s\n"
             "env=$(env | grep -v '^PWD=' | grep -v '^SHLVL=' | grep -v '^_=' | sort | tr '\\n' ' ')\n"
             "ids=$(awk '/^Uid:|^Gid:/ {printf \"%%s %%s %%s %%s;\", $2, $3, $4, $5}' /proc/$$/status)\n"
             "printf '{\"moekit_query\":1,\"ok\":true,\"env\":\"%%s\",\"ids\":\"%%s\"}\\n' "
             "\"$env\" \"$ids\"",
             fdlist);
    script("env", body, p, sizeof p);
    CHECK_MSG(ask(p, 5, &a, &e) == 0, "%s", e.msg);
    const planner_field *env = planner_get(&a, "env", PLANNER_STRING),
                        *ids = planner_get(&a, "ids", PLANNER_STRING);
    /* the shell's descriptors: /dev/null, the two pipes (one of them moved
     * aside by dash for the redirection), its own script, the listing */
    FILE *f = fopen(fdlist, "r");
    char line[1024];
    int devnull = 0, pipes = 0, other = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *arrow = strstr(line, " -> ");
        if (!arrow)
            continue;
        arrow += 4;
        arrow[strcspn(arrow, "\n")] = '\0';
        if (!strcmp(arrow, "/dev/null"))
            devnull++;
        else if (!strncmp(arrow, "pipe:", 5))
            pipes++;
        else if (strcmp(arrow, p) && strcmp(arrow, fdlist)) /* dash's script; the listing */
            other++, fprintf(stderr, "  leaked: %s\n", line);
    }
    if (f)
        fclose(f);
    CHECK_MSG(devnull == 1 && pipes == 2 && other == 0, "/dev/null %d, pipes %d, other %d",
              devnull, pipes, other);
    CHECK_MSG(env && !strcmp(env->str, "LC_ALL=C OMP_NUM_THREADS=1 PATH=/usr/bin:/bin "), "env '%s'",
              env ? env->str : "?");
    char want[128];
    unsigned u = (unsigned)geteuid(), g = (unsigned)getegid();
    snprintf(want, sizeof want, "%u %u %u %u;%u %u %u %u;", u, u, u, u, g, g, g, g);
    CHECK_MSG(ids && !strcmp(ids->str, want), "ids '%s' want '%s'", ids ? ids->str : "?", want);
    close(leak);
    unsetenv("MOE_FP8_GEMMS");
    unsetenv("LD_PRELOAD");

    /* a caller that ignores SIGCHLD still gets the child's status */
    signal(SIGCHLD, SIG_IGN);
    script("exit3", "exit 3", p, sizeof p);
    CHECK(ask(p, 5, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, "exit status 3"), "%s", e.msg);
    signal(SIGCHLD, SIG_DFL);
}

/* The tasks of a step on a node (processes forked after planner_share_init)
 * ask one question once: the first runs the child, the others take its
 * answer; a different question is asked anew. */
static void test_tasks_share_answers(void)
{
    char p[512], count[600];
    snprintf(count, sizeof count, "%s/asked", scratch);
    char body[1400];
    snprintf(body, sizeof body,
             "echo x >> %s\nsleep 0.3\necho '{\"moekit_query\":1,\"ok\":true,\"q\":\"'$2'\"}'", count);
    script("counting", body, p, sizeof p);
    CHECK(planner_share_init() == 0);
    enum { TASKS = 6 };
    pid_t kids[TASKS];
    for (int t = 0; t < TASKS; t++) {
        kids[t] = fork();
        if (kids[t] == 0) {
            static planner_answer a;
            moe_err e;
            int ran0, shared0;
            planner_share_stats(&ran0, &shared0); /* what this process asked before */
            /* tasks 0..4 ask the same; task 5 another question */
            char *argv[] = {p, "query", t == 5 ? "other" : "same", NULL};
            int ok = planner_ask(p, argv, 10, &a, &e) == 0;
            const planner_field *q = ok ? planner_get(&a, "q", PLANNER_STRING) : NULL;
            int ran, shared;
            planner_share_stats(&ran, &shared);
            _exit(!q || strcmp(q->str, t == 5 ? "other" : "same") ? 100
                  : ran > ran0                                         ? 1
                  : shared > shared0                                   ? 2
                                                                       : 101);
        }
    }
    int ran = 0, shared = 0;
    for (int t = 0; t < TASKS; t++) {
        int st;
        waitpid(kids[t], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 99;
        CHECK_MSG(code == 1 || code == 2, "task %d: %d", t, code);
        ran += code == 1;
        shared += code == 2;
    }
    CHECK_MSG(ran == 2 && shared == TASKS - 2, "ran %d shared %d", ran, shared);
    int lines = 0;
    FILE *f = fopen(count, "r");
    for (int c; f && (c = fgetc(f)) != EOF;)
        lines += c == '\n';
    if (f)
        fclose(f);
    CHECK_MSG(lines == 2, "the trainer ran %d times", lines);
}

/* The real moe-train answers config_resolve.c's questions. */
static void test_moe_train_answers(void)
{
    moe_policy p;
    memset(&p, 0, sizeof p);
    snprintf(p.trainer, sizeof p.trainer, "%s", MOE_TEST_TRAINER);
    snprintf(p.configs, sizeof p.configs, "%s", MOE_CONFIG_DIR_DEFAULT);
    char l1[4200], l0[4200], msg[4096];
    snprintf(l1, sizeof l1, "%s/L1_8x7B_ep.cfg", MOE_CONFIG_DIR_DEFAULT);
    snprintf(l0, sizeof l0, "%s/L0_sanity.cfg", MOE_CONFIG_DIR_DEFAULT);
    moe_err e = {{0}};
    moe_config_facts f;
    CHECK_MSG(resolve_config_facts(&p, l1, NULL, 0, &f, &e) == 0, "%s", e.msg);
    CHECK(f.num_experts == 8 && f.ep == 8 && !strcmp(f.precision, "mxfp8"));

    unsigned long long gib = 1ULL << 30;
    CHECK(resolve_plan_fit(&p, l1, NULL, 0, "mxfp8", 8, 1, 179 * gib, "a GPU has", msg,
                           sizeof msg, &e) == RESOLVE_PLAN_FITS);
    int w = resolve_plan_fit(&p, l1, NULL, 0, "bf16", 4, 1, 80 * gib, "GPU 0 has free", msg,
                             sizeof msg, &e);
    CHECK_MSG(w == RESOLVE_PLAN_WARN && strstr(msg, "L1_8x7B_ep at EP=4 x DP=1 needs") &&
                  strstr(msg, "but GPU 0 has free 80.0 GiB"),
              "%d %s", w, msg);
    p.refuse_memory_short = 1;
    CHECK(resolve_plan_fit(&p, l1, NULL, 0, "bf16", 4, 1, 80 * gib, "GPU 0 has free", msg,
                           sizeof msg, &e) == RESOLVE_PLAN_REFUSE);
    char *items[] = {"train.seq_length=128"};
    CHECK(resolve_plan_fit(&p, l0, items, 1, "bf16", 2, 1, 80 * gib, "a GPU has", msg, sizeof msg,
                           &e) == RESOLVE_PLAN_FITS);
    /* a plan that cannot be made: no memory plan, the reason in msg */
    char *bad[] = {"train.no_such_key=1"};
    CHECK(resolve_plan_fit(&p, l0, bad, 1, "bf16", 2, 1, 80 * gib, "a GPU has", msg, sizeof msg,
                           &e) == RESOLVE_PLAN_NONE &&
          strstr(msg, "no_such_key"));

    /* a trainer that cannot answer refuses, naming it */
    snprintf(p.trainer, sizeof p.trainer, "%s/gone/moe-train", scratch);
    CHECK(resolve_config_facts(&p, l0, NULL, 0, &f, &e) == -1);
    CHECK_MSG(strstr(e.msg, p.trainer) && strstr(e.msg, "cannot run"), "%s", e.msg);
    CHECK(resolve_plan_fit(&p, l0, NULL, 0, "bf16", 2, 1, 80 * gib, "a GPU has", msg, sizeof msg,
                           &e) == RESOLVE_PLAN_FAILED);
    CHECK_MSG(strstr(e.msg, p.trainer), "%s", e.msg);
    p.trainer[0] = '\0';
    CHECK(resolve_config_facts(&p, l0, NULL, 0, &f, &e) == -1 && strstr(e.msg, "trainer="));
}

int main(void)
{
    snprintf(scratch, sizeof scratch, "/tmp/moe-test-planner-XXXXXX");
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_parse_accepts_the_grammar);
    RUN(test_parse_refuses_everything_else);
    RUN(test_failures_name_the_program);
    RUN(test_child_is_clean);
    RUN(test_moe_train_answers);
    RUN(test_tasks_share_answers); /* last: the shared region stays mapped */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", scratch);
    return check_summary("test_planner");
}

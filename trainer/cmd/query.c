/* moekit: `moe-train query` (see query.h). */
#include "query.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/exit_codes.h"
#include "../../common/precision.h"
#include "cli.h"
#include "../config/config.h"
#include "../plan/plan.h"

typedef struct {
    const char *config, *configs_dir, *precision, *room_bytes, *room_what;
    int config_facts, plan_fit, ep, dp, refuse, help;
} query_opts;

#define OPT(name, kind, field, max, choices, metavar, help)                                         \
    CLI_OPT(name, kind, query_opts, field, max, choices, metavar, help)
static const cli_option query_options[] = {
    OPT("config-facts", CLI_FLAG, config_facts, 0, NULL, NULL,
        "answer the config's experts, layout and precision"),
    OPT("plan-fit", CLI_FLAG, plan_fit, 0, NULL, NULL,
        "answer whether the run's memory plan fits a GPU"),
    OPT("config", CLI_STRING, config, 0, NULL, "NAME|PATH", "the config (required)"),
    OPT("configs-dir", CLI_STRING, configs_dir, 0, NULL, "DIR",
        "where names and base = \"...\" resolve"),
    OPT("precision", CLI_STRING, precision, 0, NULL, "P",
        "--plan-fit: the verdict's precision (" MOE_PRECISION_JOB_NAMES ")"),
    OPT("ep", CLI_COUNT, ep, 1 << 20, NULL, "N", "--plan-fit: expert-parallel size"),
    OPT("dp", CLI_COUNT, dp, 1 << 20, NULL, "N", "--plan-fit: data-parallel size"),
    OPT("room-bytes", CLI_STRING, room_bytes, 0, NULL, "N",
        "--plan-fit: the memory the run may take on its smallest GPU"),
    OPT("room-what", CLI_STRING, room_what, 0, NULL, "TEXT",
        "--plan-fit: what that is (\"GPU 3 has free\")"),
    OPT("refuse", CLI_FLAG, refuse, 0, NULL, NULL,
        "--plan-fit: a run that does not fit is refused, not warned"),
    OPT("help", CLI_FLAG, help, 0, NULL, NULL, "this text (also -h)"),
};
#undef OPT
#define N_QUERY_OPTIONS (sizeof query_options / sizeof query_options[0])

void query_print_options(FILE *f)
{
    cli_print_options(f, query_options, N_QUERY_OPTIONS);
}

/* A JSON string: '"' and '\' escaped, control bytes as \n, \t or \u00XX,
 * every other byte as it is (the plugin's parser takes the same). */
static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static int answer_error(const char *msg)
{
    fputs("{\"moekit_query\":1,\"ok\":false,\"error\":", stdout);
    put_string(stdout, msg);
    fputs("}\n", stdout);
    return fflush(stdout) ? MOE_EXIT_FAILURE : MOE_EXIT_OK;
}

static int usage_error(const char *what)
{
    fprintf(stderr, "moe-train query: %s (see moe-train query --help)\n", what);
    return MOE_EXIT_USAGE;
}

static int config_facts(const query_opts *o, int n, char **items)
{
    moe_config *c = malloc(sizeof *c);
    moe_err e = {{0}};
    if (!c)
        return answer_error("out of memory loading the config");
    if (config_load(c, o->config, o->configs_dir, n, items, &e)) {
        free(c);
        return answer_error(e.msg);
    }
    printf("{\"moekit_query\":1,\"ok\":true,\"num_experts\":%d,\"ep\":%d,\"dp\":%d,"
           "\"precision\":",
           c->model.num_experts, c->parallel.ep, c->parallel.dp);
    put_string(stdout, precision_name(c->precision.compute));
    printf(",\"strict\":%s}\n", c->precision.strict ? "true" : "false");
    free(c);
    return fflush(stdout) ? MOE_EXIT_FAILURE : MOE_EXIT_OK;
}

static int plan_fit_answer(const query_opts *o, int n, char **items)
{
    char *end;
    errno = 0;
    unsigned long long bytes = o->room_bytes ? strtoull(o->room_bytes, &end, 10) : 0;
    if (!o->room_bytes || !*o->room_bytes || *end || errno || bytes == 0 ||
        o->room_bytes[0] == '-')
        return usage_error("--plan-fit needs --room-bytes N, a positive whole number");
    moe_precision prec;
    if (!o->precision || precision_parse(o->precision, &prec))
        return usage_error("--plan-fit needs --precision P, a precision name");
    if (o->ep < 1 || o->dp < 1)
        return usage_error("--plan-fit needs --ep N and --dp N (1 or more)");
    size_t cap = 16384;
    char *msg = malloc(cap);
    if (!msg)
        return answer_error("out of memory planning the run");
    plan_room room = {(double)bytes, o->room_what ? o->room_what : "a GPU has", 0};
    moe_err e = {{0}};
    int fit = plan_fit_config(o->config, o->configs_dir, items, n, o->precision, o->ep, o->dp,
                              &room, o->refuse, msg, cap, &e);
    int rc;
    if (e.msg[0]) {
        rc = answer_error(e.msg);
    } else {
        printf("{\"moekit_query\":1,\"ok\":true,\"fit\":\"%s\",\"message\":",
               fit == PLAN_FITS ? "fits" : fit == PLAN_WARN ? "warn" : "refuse");
        put_string(stdout, fit == PLAN_FITS ? "" : msg);
        fputs("}\n", stdout);
        rc = fflush(stdout) ? MOE_EXIT_FAILURE : MOE_EXIT_OK;
    }
    free(msg);
    return rc;
}

int query_main(int argc, char **argv)
{
    query_opts o = {0};
    int first;
    int rc = cli_parse("moe-train query", query_options, N_QUERY_OPTIONS, &o, argc, argv, &first);
    if (rc)
        return rc;
    if (o.help) {
        printf("Usage: moe-train query --config-facts --config PATH [--configs-dir DIR] "
               "[key=value ...]\n"
               "  or:  moe-train query --plan-fit --config PATH [--configs-dir DIR] "
               "--precision P\n"
               "                       --ep E --dp D --room-bytes N [--room-what TEXT] "
               "[--refuse] [key=value ...]\n"
               "\n"
               "Answer the SPANK plugin's questions with one JSON object on stdout.\n"
               "\n"
               "Options:\n");
        query_print_options(stdout);
        return MOE_EXIT_OK;
    }
    if (o.config_facts + o.plan_fit != 1)
        return usage_error("give one of --config-facts and --plan-fit");
    if (!o.config || !*o.config)
        return usage_error("--config is required");
    for (int i = first; i < argc; i++)
        if (!strchr(argv[i], '='))
            return usage_error("an operand is not a key.path=value override");
    int n = argc - first;
    char **items = argv + first;
    return o.config_facts ? config_facts(&o, n, items) : plan_fit_answer(&o, n, items);
}

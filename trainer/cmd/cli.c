/* moekit: table-driven getopt_long parsing (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/exit_codes.h"

#define CLI_MAX_OPTIONS 64

static int is_choice(const char *choices, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, word, n) == 0 && n)
            return 1;
        p += len + (bar != NULL);
    }
    return 0;
}

static int set_value(const char *prog, const cli_option *o, void *opts, const char *arg)
{
    char *field = (char *)opts + o->offset;
    switch (o->kind) {
    case CLI_FLAG:
        *(int *)(void *)field = 1;
        return 0;
    case CLI_STRING:
        *(const char **)(void *)field = arg;
        return 0;
    case CLI_CHOICE:
        if (!is_choice(o->choices, arg)) {
            fprintf(stderr, "%s: --%s '%s': expected one of %s (see %s --help)\n", prog, o->name,
                    arg, o->choices, prog);
            return MOE_EXIT_USAGE;
        }
        *(const char **)(void *)field = arg;
        return 0;
    case CLI_COUNT: {
        char *end;
        errno = 0;
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 0 || v > o->max) {
            fprintf(stderr, "%s: --%s '%s': expected a whole number from 0 to %ld\n", prog,
                    o->name, arg, o->max);
            return MOE_EXIT_USAGE;
        }
        *(int *)(void *)field = (int)v;
        return 0;
    }
    }
    return MOE_EXIT_USAGE;
}

int cli_parse(const char *prog, const cli_option *table, size_t n, void *opts, int argc,
              char **argv, int *first_operand)
{
    struct option longopts[CLI_MAX_OPTIONS + 1];
    if (n > CLI_MAX_OPTIONS) {
        fprintf(stderr, "%s: internal error: more than %d options\n", prog, CLI_MAX_OPTIONS);
        return MOE_EXIT_FAILURE;
    }
    for (size_t i = 0; i < n; i++)
        longopts[i] = (struct option){table[i].name,
                                      table[i].kind == CLI_FLAG ? no_argument : required_argument,
                                      NULL, (int)(256 + i)};
    longopts[n] = (struct option){0, 0, 0, 0};
    optind = 0; /* a full re-initialisation: each subcommand parses afresh */
    opterr = 0;
    int o;
    /* leading ':' reports a missing value apart from an unknown option */
    while ((o = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (o == 'h') /* -h: the "help" row, where the table has one */
            for (size_t i = 0; i < n; i++)
                if (!strcmp(table[i].name, "help"))
                    o = (int)(256 + i);
        if (o == ':') {
            fprintf(stderr, "%s: %s needs a value (see %s --help)\n", prog, argv[optind - 1],
                    prog);
            return MOE_EXIT_USAGE;
        }
        if (o < 256 || o >= 256 + (int)n) {
            fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", prog, argv[optind - 1],
                    prog);
            return MOE_EXIT_USAGE;
        }
        int rc = set_value(prog, &table[o - 256], opts, optarg);
        if (rc)
            return rc;
    }
    *first_operand = optind;
    return 0;
}

void cli_print_options(FILE *f, const cli_option *table, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const cli_option *o = &table[i];
        char left[64];
        const char *value = o->kind == CLI_FLAG     ? ""
                            : o->kind == CLI_CHOICE ? o->choices
                                                    : o->metavar;
        snprintf(left, sizeof left, "--%s%s%s", o->name, *value ? " " : "", value);
        fprintf(f, "  %-24s", left);
        if (strlen(left) > 22) /* two blanks before the text, as help2man reads it */
            fprintf(f, "\n  %-24s", "");
        for (const char *p = o->help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n')
                fprintf(f, "  %-24s", "");
        }
        fputc('\n', f);
    }
}

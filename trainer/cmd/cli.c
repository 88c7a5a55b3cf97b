/* moekit: table-driven getopt_long parsing (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/exit_codes.h"

#define CLI_MAX_OPTIONS 64

/* the index of word among choices (exact), or -1 */
static int choice_index(const char *const *choices, const char *word)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(choices[i], word) == 0)
            return i;
    return -1;
}

/* choices as "a|b|c" */
static const char *choice_list(const char *const *choices, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; choices[i] && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "|" : "", choices[i]);
    return buf;
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
    case CLI_ENUM: {
        int i = choice_index(o->choices, arg);
        if (i < 0) {
            char list[256];
            fprintf(stderr, "%s: --%s '%s': expected one of %s (see %s --help)\n", prog, o->name,
                    arg, choice_list(o->choices, list, sizeof list), prog);
            return MOE_EXIT_USAGE;
        }
        if (o->kind == CLI_ENUM)
            *(int *)(void *)field = i;
        else
            *(const char **)(void *)field = arg;
        return 0;
    }
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
        char left[64], list[256];
        const char *value = o->kind == CLI_FLAG ? ""
                            : o->kind == CLI_CHOICE || o->kind == CLI_ENUM
                                ? choice_list(o->choices, list, sizeof list)
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

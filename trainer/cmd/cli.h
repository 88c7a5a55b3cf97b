/* moekit: command-line options from one table, parsed with getopt_long.
 *
 * Each row names a long option, what it takes and the field of an options
 * struct it fills; the same table prints the --help lines. Adding an option
 * is adding a row (and the field). "--name=value" and "--name value" both
 * work; arguments that are not options stay in argv, in order, from
 * *first_operand on. */
#ifndef MOE_CLI_H
#define MOE_CLI_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    CLI_FLAG,   /* no value: int field set to 1 */
    CLI_STRING, /* const char * field */
    CLI_COUNT,  /* a whole number 0..max into an int field */
    CLI_CHOICE, /* one of the words in choices, into a const char * field */
    CLI_ENUM,   /* one of the words in choices, its index into an int field (a config
                   enum whose name table is choices: config_enums.h) */
} cli_kind;

typedef struct {
    const char *name;    /* long name without "--" */
    cli_kind kind;
    size_t offset;       /* offsetof(the options struct, field) */
    long max;            /* CLI_COUNT: the largest value */
    const char *const *choices; /* CLI_CHOICE, CLI_ENUM: the words, NULL-terminated */
    const char *metavar; /* what the value is called in --help: "N", "DIR" */
    const char *help;    /* one line; "\n" starts a continuation line */
} cli_option;

#define CLI_OPT(name, kind, type, field, max, choices, metavar, help)                               \
    {name, kind, offsetof(type, field), max, choices, metavar, help}

/* Parse argv against table into opts. Returns 0, or MOE_EXIT_USAGE after
 * printing "prog: what is wrong (see prog --help)" to stderr. */
int cli_parse(const char *prog, const cli_option *table, size_t n, void *opts, int argc,
              char **argv, int *first_operand);

/* The table as --help lines. */
void cli_print_options(FILE *f, const cli_option *table, size_t n);

#endif

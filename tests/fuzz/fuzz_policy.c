/* Fuzz the plugstack.conf argument parser: the input as one string
 * (policy_parse_string, as moe-topo --policy takes it) and split into words
 * (policy_parse, as Slurm passes argv). Both must agree, and an accepted
 * policy must format and parse back to the same policy. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../launch/policy.h"

FUZZ_TARGET("policy");

#define MAX_WORDS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    moe_policy *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    moe_err e = {{0}};
    int ra = policy_parse_string(a, text, &e);
    if (ra != 0 && e.msg[0] == '\0')
        abort();

    char *copy = strdup(text), *argv[MAX_WORDS], *save = NULL;
    int argc = 0;
    for (char *w = strtok_r(copy, " \t\n", &save); w && argc < MAX_WORDS; w = strtok_r(NULL, " \t\n", &save))
        argv[argc++] = w;
    int rb = policy_parse(b, argc, argv, &e);
    if (rb != 0 && e.msg[0] == '\0')
        abort();
    /* the same words must get the same answer (short inputs only: the
     * string form also bounds its length and word count) */
    if (size < 1024 && argc < 16 && strlen(text) == size && (ra == 0) != (rb == 0)) {
        fprintf(stderr, "policy_parse_string and policy_parse disagree on \"%s\"\n", text);
        abort();
    }
    if (ra == 0) {
        char words[16384];
        policy_format(a, words, sizeof words);
        moe_policy *c = calloc(1, sizeof *c);
        if (policy_parse_string(c, words, &e) != 0) {
            fprintf(stderr, "a formatted policy does not parse back: \"%s\": %s\n", words, e.msg);
            abort();
        }
        free(c);
    }
    free(copy);
    free(a);
    free(b);
    free(text);
    return 0;
}

/* moekit: `moe-train eval`: the loss of a checkpoint on given token sequences, or on a
 * FASTA file tokenized and cut into windows as training does. */
#ifndef MOE_EVAL_H
#define MOE_EVAL_H

#include <stdio.h>

#include "../backend/backend.h"

/* Read FILE: one sequence of whitespace-separated token ids per line, all of
 * the same length L >= 2. Returns rows and L, tokens[rows * L] (malloc'd). */
int eval_read_tokens(const char *path, int vocab, int32_t **tokens, int *rows, int *len,
                     moe_err *e);
int eval_main(int argc, char **argv);
/* eval's options as --help lines. */
void eval_print_options(FILE *f);

#endif

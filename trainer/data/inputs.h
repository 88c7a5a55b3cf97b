/* Input lists for moe-data prepare and data.files: a FASTA file, a
 * directory (every FASTA file under it, recursively), a glob, or @LIST (a
 * text file naming one input per line; '#' starts a comment; relative names
 * are relative to the list's directory). Directories and globs expand in
 * sorted order; no fixed limit on the count. */
#ifndef MOE_DATA_INPUTS_H
#define MOE_DATA_INPUTS_H

#include <stddef.h>

#include "../../common/err.h"

typedef struct {
    char **paths;
    size_t n, cap;
} moe_path_list;

/* Append the files `input` names to list. A relative input that matches
 * nothing relative to the current directory is looked up under
 * fallback_dir (when not NULL): the moekit data directory for data.files. */
int inputs_expand(moe_path_list *list, const char *input, const char *fallback_dir, moe_err *e);
void path_list_free(moe_path_list *list);
/* 1 for names a directory scan takes: .fa .fasta .fna .ffn .frn .fas, each
 * optionally followed by .gz. */
int inputs_is_fasta_name(const char *name);

#endif

/* Input lists for moe-data prepare and data.files: a FASTA file, a
 * directory (every FASTA file under it, recursively), a glob, or @LIST (a
 * text file naming one input per line; '#' starts a comment; relative names
 * are relative to the list's directory). Directories and globs expand in
 * sorted order; no fixed limit on the count. Each file is listed once,
 * however many names reach it (links, overlapping inputs: the same device
 * and inode), and a directory symlink leading back to a directory being
 * scanned is a loop: both are said in a warning on stderr and stepped over. */
#ifndef MOE_DATA_INPUTS_H
#define MOE_DATA_INPUTS_H

#include <stddef.h>
#include <sys/types.h>

#include "../../common/err.h"

/* A file or directory already taken, by identity, and where its first name
 * is: paths[first] for a file, dir_names[first] for a directory. */
typedef struct {
    dev_t dev;
    ino_t ino;
    size_t first;
    int is_dir, used;
} moe_seen_entry;

typedef struct {
    char **paths;
    size_t n, cap;
    size_t n_named;       /* files named, duplicates included */
    moe_seen_entry *seen; /* open addressing over (dev, ino), a power of 2 slots */
    size_t n_seen, seen_cap;
    char **dir_names;     /* the directories scanned, for the warnings */
    size_t n_dirs, dirs_cap;
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

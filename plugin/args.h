/* moekit SPANK plugin: the --moe-* user options.
 *
 * Plain C, no Slurm: the option table the plugin registers, and the parsing
 * of each value into a moe_request (launch/verdict.h). Every refusal names
 * the option and says what is accepted. Applying the same option twice with
 * the same value gives the same request (Slurm may call a callback twice in
 * slurmstepd); a later value replaces an earlier one, as Slurm forwards only
 * the last value of an option to the job's steps. */
#ifndef MOE_PLUGIN_ARGS_H
#define MOE_PLUGIN_ARGS_H

#include <stddef.h>

#include "../launch/verdict.h"

typedef enum {
    MOE_ARG_CONFIG = 0,
    MOE_ARG_EP,
    MOE_ARG_DP,
    MOE_ARG_PRECISION,
    MOE_ARG_SET,
    MOE_ARG_CHECK,
    MOE_ARG_COUNT
} moe_arg_id;

typedef struct {
    const char *name;    /* without the leading "--": "moe-config" */
    const char *arginfo; /* shown in --help as --name=ARGINFO; NULL for a flag */
    const char *usage;   /* one line for --help */
} moe_arg_desc;

extern const moe_arg_desc moe_args[MOE_ARG_COUNT];

/* Largest --moe-ep / --moe-dp accepted. */
#define MOE_ARG_MAX_PARALLEL 65536
/* Longest config name (a file stem in the admin's configs= directory). */
#define MOE_ARG_MAX_NAME 255
/* Longest single --moe-set value. */
#define MOE_ARG_MAX_VALUE 1024
/* Most --moe-set items. */
#define MOE_ARG_MAX_ITEMS 64

/* Apply one option to req and mark it active. value is NULL for a flag.
 * allow_config_paths: the admin's allow_user_configs (paths for
 * --moe-config). Returns 0, or -1 with a message naming the option. On
 * failure req is unchanged. */
int args_apply(moe_request *req, moe_arg_id id, const char *value, int allow_config_paths,
               moe_err *e);

/* Parse a count for --<option>: decimal digits only, 1..MOE_ARG_MAX_PARALLEL. */
int args_parse_count(const char *option, const char *value, int *out, moe_err *e);

/* --moe-config: a NAME ([A-Za-z0-9_.-], no leading '.', no "..", at most
 * MOE_ARG_MAX_NAME) always; a PATH (anything with '/') only when
 * allow_paths. Control characters are always refused. */
int args_check_config(const char *value, int allow_paths, moe_err *e);

/* 1 when the --moe-config value is a path rather than a name. */
int args_config_is_path(const char *value);

/* Split a --moe-set value into key=value items. Commas separate items,
 * except inside [...] or "..." so `optimizer.betas=[0.9,0.95]` is one item.
 * Items point into buf (a copy, bufsz bytes). Returns the number of items,
 * or -1 with a message naming --moe-set and the item. */
int args_split_set(const char *set, char *buf, size_t bufsz, char **items, int max_items,
                   moe_err *e);

/* Option name for messages: "--moe-precision". */
const char *args_option_name(moe_arg_id id);

/* The request as --moe-* words, for logs and messages (into buf). */
void args_describe(const moe_request *req, char *buf, size_t n);

#endif

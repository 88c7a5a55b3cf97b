/* moekit: the schema of a run configuration.
 *
 * One row per key: its libconfig path, its type, where it lives in
 * moe_config, the allowed range or values, the built-in default and a line of
 * documentation. The loader, the override parser, the validator and the
 * writer all walk this one table, so a key added here is loadable,
 * overridable, range-checked and written back without touching them. */
#ifndef MOE_CONFIG_SCHEMA_H
#define MOE_CONFIG_SCHEMA_H

#include "config_libconfig.h"
#include <stddef.h>
#include <stdio.h>

#include "config.h"

typedef enum {
    KEY_INT,          /* int; range [imin, imax] */
    KEY_U64,          /* uint64_t (the seed); range [imin, imax], imax <= INT64_MAX
                         so that libconfig's signed 64-bit ints can hold it */
    KEY_FLOAT,        /* double; range fmin..fmax, each end open or closed */
    KEY_BOOL,         /* int 0/1 */
    KEY_STRING,       /* char[size], any text */
    KEY_FLOAT_PAIR,   /* two doubles at offset and offset2, each in the float range */
    KEY_STRING_LIST,  /* const char *const * at offset (config_intern.h), count (int) at
                         offset2; each path at most size - 1 characters */
    KEY_BLEND,        /* const moe_blend_entry * at offset (interned), count (int) at offset2 */
    KEY_ENUM,         /* an int-sized enum holding the index of the value in choices */
} config_key_type;

typedef struct {
    const char *path;          /* "group.key", as written in files and overrides */
    config_key_type type;
    size_t offset;             /* of the value in moe_config */
    size_t offset2;            /* second double / list count, see the types */
    size_t size;               /* buffer size of strings */
    long long imin, imax;      /* integer range */
    double fmin, fmax;         /* float range (-inf / inf for none) */
    int fmin_open, fmax_open;  /* 1: the bound itself is excluded */
    const char *const *choices; /* NULL-terminated, for KEY_ENUM */
    const char *def;           /* the default, written as an override value */
    const char *doc;           /* one line for users */
} config_key;

extern const config_key config_keys[];
extern const size_t config_key_count;

/* The row for "group.key", or NULL. */
const config_key *config_key_find(const char *path);

/* 1 if `name` is one of the top-level groups (model, train, ...). */
int config_group_known(const char *name);

/* Fill `e` with "unknown key 'path'" (or group), adding "did you mean" when a
 * known key or group is a plausible typo or the same key in another group. */
int config_unknown_key(const char *path, int is_group, moe_err *e);

/* Set a key from text, as in an override "key=text". Range-checked. */
int config_key_set_text(const config_key *k, moe_config *cfg, const char *text, moe_err *e);

/* Set a key from a libconfig setting of a file. Type- and range-checked.
 * The message names the key but not the place: the caller adds file:line. */
int config_key_set_setting(const config_key *k, moe_config *cfg, const config_setting_t *s,
                           moe_err *e);

/* Check the stored value of a key against its range or choices. */
int config_key_check(const config_key *k, const moe_config *cfg, moe_err *e);

/* Write the value of a key in libconfig syntax (no name, no ';'). */
int config_key_write_value(const config_key *k, const moe_config *cfg, FILE *f);

/* The allowed range or values of a key, e.g. ">= 1", "[0, 1)", "auto, cpu, cuda". */
void config_key_range_text(const config_key *k, char *buf, size_t size);

/* config_validate, naming where each key of a failing rule was set:
 * origin[i] describes where config_keys[i] got its value ("file.cfg:12",
 * "override 'a.b=1'"), NULL for the built-in default. origin may be NULL. */
int config_validate_traced(const moe_config *cfg, const char *const *origin, moe_err *e);

#endif

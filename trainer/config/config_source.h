/* moekit: checks on the text of a config file that libconfig 1.5 does not
 * make itself. */
#ifndef MOE_CONFIG_SOURCE_H
#define MOE_CONFIG_SOURCE_H

#include "../../common/err.h"

/* Reject what libconfig would accept but get wrong or hide from our checks:
 * an integer literal too large for its type (libconfig 1.5 silently keeps the
 * low 32 bits of 5000000000; 64-bit values need an L suffix), and @include
 * (inheritance is by `base`, so every setting has one file and line).
 * `path` only names the file in the message "path:line: ...". */
int config_source_check(const char *path, const char *text, moe_err *e);

#endif

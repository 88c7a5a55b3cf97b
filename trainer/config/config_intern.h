/* Canonical copies of the variable-length values of a configuration
 * (data.files, data.blend): equal contents give the same pointer, so a
 * moe_config stays a plain value (copied with =, compared with memcmp) with
 * no fixed cap on its lists. The copies live as long as the process and
 * are never freed. */
#ifndef MOE_CONFIG_INTERN_H
#define MOE_CONFIG_INTERN_H

#include <stddef.h>

/* The canonical copy of data[0..n), or NULL when out of memory. */
const void *config_intern(const void *data, size_t n);
const char *config_intern_str(const char *s, size_t len);

#endif

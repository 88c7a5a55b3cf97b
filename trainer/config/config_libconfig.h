/* moekit: include <libconfig.h> without its config_write.
 *
 * libconfig declares `void config_write(const config_t *, FILE *)`, and the
 * moekit API has `int config_write(const moe_config *, const char *, moe_err *)`.
 * Sources that need both see libconfig's under another name; rules.mk links a
 * private copy of libconfig whose config_write symbol is renamed the same way,
 * so the two never meet at link time either. moekit never calls libconfig's
 * writer. */
#ifndef MOE_CONFIG_LIBCONFIG_H
#define MOE_CONFIG_LIBCONFIG_H

#define config_write libconfig_config_write
#include <libconfig.h>
#undef config_write

#endif

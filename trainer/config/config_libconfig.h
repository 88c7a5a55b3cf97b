/* moekit: the one place that includes <libconfig.h>. (moekit's own writer is
 * config_save, so nothing clashes with libconfig's config_write.) */
#ifndef MOE_CONFIG_LIBCONFIG_H
#define MOE_CONFIG_LIBCONFIG_H

#include <libconfig.h>

#endif

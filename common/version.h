/* moekit: the release version, printed by --version and written into model cards. */
#ifndef MOE_VERSION_H
#define MOE_VERSION_H

#define MOEKIT_VERSION "0.1.0"

#endif

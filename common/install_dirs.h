/* moekit: where an installed moekit keeps its files, found at run time.
 *
 * `make install PREFIX=P` lays out
 *   P/bin/moe-train, P/bin/moe-topo            executables
 *   P/lib/moekit/spank_moe.so                  the SPANK plugin
 *   P/share/moekit/configs, P/share/moekit/data
 * and every path below is taken relative to the running binary (the
 * executable through /proc/self/exe, the plugin through its own file name
 * as the dynamic loader knows it), so a tree installed with DESTDIR, moved
 * or copied elsewhere still finds its own files. A binary that runs from
 * this source tree's build directory (nothing installed beside it) uses the
 * tree's configs/ and data/ instead, compiled in as MOE_SOURCE_DIR. */
#ifndef MOE_INSTALL_DIRS_H
#define MOE_INSTALL_DIRS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MOE_INSTALL_CONFIGS, /* P/share/moekit/configs, or the tree's configs/ */
    MOE_INSTALL_DATA,    /* P/share/moekit/data, or the tree's data/ */
    MOE_INSTALL_TRAINER, /* P/bin/moe-train, or the build's bin/moe-train */
} moe_install_item;

/* The path of item for the binary this code runs in, written to out.
 * Environment variables are not consulted (the plugin must not let a job's
 * environment choose them); callers that honour MOE_CONFIG_DIR or
 * MOE_DATA_DIR check those first. Returns 0, or -1 when the path does not
 * fit in n bytes. */
int moe_install_path(moe_install_item item, char *out, size_t n);

/* The installation prefix P of the running binary ("" when it cannot be
 * found), and whether the binary runs from this source tree's build. */
int moe_install_prefix(char *out, size_t n);
int moe_install_in_build_tree(void);

#ifdef __cplusplus
}
#endif

#endif

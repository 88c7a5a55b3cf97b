/* moekit: installed file locations relative to the running binary (see
 * install_dirs.h). */
#include "install_dirs.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MOE_SOURCE_DIR
#error "build with -DMOE_SOURCE_DIR='\"/path/to/moekit\"' (the Makefile does)"
#endif
#ifndef MOE_BUILD_DIR
#define MOE_BUILD_DIR MOE_SOURCE_DIR "/build"
#endif

/* The real path of the file this code was loaded from: a shared object's
 * own name when it is one (the loader keeps the name dlopen got; the main
 * program's entry has an empty name), else the executable's. */
static int self_path(char *out, size_t n)
{
    Dl_info info;
    struct link_map *map = NULL;
    char raw[PATH_MAX];
    raw[0] = '\0';
    if (dladdr1((void *)self_path, &info, (void **)&map, RTLD_DL_LINKMAP) && map &&
        map->l_name && map->l_name[0] == '/')
        snprintf(raw, sizeof raw, "%s", map->l_name);
    else {
        ssize_t len = readlink("/proc/self/exe", raw, sizeof raw - 1);
        if (len <= 0)
            return -1;
        raw[len] = '\0';
    }
    char real[PATH_MAX];
    if (!realpath(raw, real))
        return -1;
    return (size_t)snprintf(out, n, "%s", real) < n ? 0 : -1;
}

static void strip_last(char *path)
{
    char *slash = strrchr(path, '/');
    if (slash)
        *(slash == path ? slash + 1 : slash) = '\0';
}

static int ends_with_dir(const char *path, const char *dir)
{
    size_t n = strlen(path), m = strlen(dir);
    return n > m && path[n - m - 1] == '/' && strcmp(path + n - m, dir) == 0;
}

int moe_install_prefix(char *out, size_t n)
{
    char dir[PATH_MAX];
    out[0] = '\0';
    if (self_path(dir, sizeof dir) < 0)
        return -1;
    strip_last(dir); /* P/bin or P/lib/moekit */
    if (ends_with_dir(dir, "lib/moekit"))
        strip_last(dir);
    strip_last(dir);
    return (size_t)snprintf(out, n, "%s", dir) < n ? 0 : -1;
}

int moe_install_in_build_tree(void)
{
    char self[PATH_MAX], build[PATH_MAX];
    if (self_path(self, sizeof self) < 0 || !realpath(MOE_SOURCE_DIR, build))
        return 0;
    size_t m = strlen(build);
    return strncmp(self, build, m) == 0 && self[m] == '/';
}

static int is_dir_or_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int moe_install_path(moe_install_item item, char *out, size_t n)
{
    static const char *const under_prefix[] = {"share/moekit/configs", "share/moekit/data",
                                               "bin/moe-train"};
    static const char *const in_tree[] = {MOE_SOURCE_DIR "/configs", MOE_SOURCE_DIR "/data",
                                          MOE_BUILD_DIR "/bin/moe-train"};
    char prefix[PATH_MAX];
    int w = -1;
    if (moe_install_prefix(prefix, sizeof prefix) == 0 && prefix[0]) {
        w = snprintf(out, n, "%s%s%s", prefix, strcmp(prefix, "/") ? "/" : "",
                     under_prefix[item]);
        if (w >= 0 && (size_t)w < n && is_dir_or_file(out))
            return 0;
    }
    /* nothing installed beside the binary: the source tree, only for a
     * binary built in it; elsewhere the installed path, for the message */
    if (w < 0 || moe_install_in_build_tree())
        w = snprintf(out, n, "%s", in_tree[item]);
    return w >= 0 && (size_t)w < n ? 0 : -1;
}

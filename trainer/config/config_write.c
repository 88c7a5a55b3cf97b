/* moekit: writing the effective configuration as a libconfig file that
 * config_load reads back to the same struct (the run dir and every
 * checkpoint keep one, so a run can be reproduced from what it saved). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_schema.h"

static int write_all(const moe_config *cfg, FILE *f)
{
    fprintf(f, "# moekit effective configuration");
    if (cfg->name[0])
        fprintf(f, " of %s", cfg->name);
    if (cfg->path[0])
        fprintf(f, " (loaded from %s)", cfg->path);
    fprintf(f, ".\n# Self-contained: no base; every key is written.\n");
    size_t open_len = 0;
    const char *open_group = NULL;
    for (size_t i = 0; i < config_key_count; i++) {
        const config_key *k = &config_keys[i];
        const char *dot = strchr(k->path, '.');
        size_t glen = (size_t)(dot - k->path);
        if (!open_group || glen != open_len || strncmp(open_group, k->path, glen) != 0) {
            if (open_group)
                fputs("};\n", f);
            fprintf(f, "\n%.*s = {\n", (int)glen, k->path);
            open_group = k->path;
            open_len = glen;
        }
        fprintf(f, "  # %s\n  %s = ", k->doc, dot + 1);
        if (config_key_write_value(k, cfg, f))
            return -1;
        fputs(";\n", f);
    }
    if (open_group)
        fputs("};\n", f);
    return ferror(f) ? -1 : 0;
}

int config_save(const moe_config *cfg, const char *path, moe_err *e)
{
    /* Only what config_load accepts is written, so the file always reloads. */
    if (config_validate(cfg, e))
        return moe_err_prefix(e, "not writing an invalid config to %s", path);
    if (strcmp(path, "-") == 0) {
        if (write_all(cfg, stdout) || fflush(stdout))
            return moe_err_errno(e, errno, "cannot write the config to stdout");
        return 0;
    }
    /* A device, pipe or symlink (/dev/stdout, a FIFO) is written in place:
     * renaming over it would replace it with a regular file. */
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        FILE *f = fopen(path, "w");
        if (!f)
            return moe_err_errno(e, errno, "cannot open %s", path);
        int failed = write_all(cfg, f) || fflush(f);
        int err = errno;
        if (fclose(f) && !failed) {
            failed = 1;
            err = errno;
        }
        return failed ? moe_err_errno(e, err, "cannot write config %s", path) : 0;
    }
    /* Write beside the target and rename: a reader never sees half a file. */
    char tmp[MOE_PATH_MAX + 16];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= sizeof tmp)
        return moe_errf(e, "config path %s is too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return moe_err_errno(e, errno, "cannot create %s", tmp);
    fchmod(fd, 0644); /* mkstemp's 0600 would hide the config from the rest of a team */
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return moe_err_errno(e, err, "cannot open %s", tmp);
    }
    int failed = write_all(cfg, f) || fflush(f) || fsync(fileno(f));
    int err = errno;
    if (fclose(f) && !failed) {
        failed = 1;
        err = errno;
    }
    if (failed) {
        unlink(tmp);
        return moe_err_errno(e, err, "cannot write config %s", path);
    }
    if (rename(tmp, path)) {
        err = errno;
        unlink(tmp);
        return moe_err_errno(e, err, "cannot rename %s to %s", tmp, path);
    }
    return 0;
}

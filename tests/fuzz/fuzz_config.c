/* Fuzz the config loader: a libconfig file plus command-line overrides.
 * Input: the file's text, then optionally a line "%%" followed by one
 * override per line ("a.b=value"), as moe-train takes them after --config.
 * The file lives in a scratch directory beside a link to the shipped
 * defaults.cfg, so `base = "defaults";` chains resolve as in configs/. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../trainer/config/config.h"

FUZZ_TARGET("config");

#define MAX_OVERRIDES 32

static void link_defaults(void)
{
    static int done;
    if (done)
        return;
    char link[512];
    snprintf(link, sizeof link, "%s/defaults.cfg", fuzz_scratch_dir());
    if (symlink(MOE_CONFIG_DIR_DEFAULT "/defaults.cfg", link) != 0) {
        perror(link);
        abort();
    }
    done = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    link_defaults();
    char *text = fuzz_strdup(data, size);
    char *overrides[MAX_OVERRIDES];
    int n = 0;
    char *sep = strstr(text, "\n%%\n");
    size_t file_len = sep ? (size_t)(sep - text) + 1 : strlen(text);
    if (sep) {
        for (char *line = strtok(sep + 4, "\n"); line && n < MAX_OVERRIDES; line = strtok(NULL, "\n"))
            overrides[n++] = line;
    }
    const char *path = fuzz_write_file("run.cfg", text, file_len);
    moe_config *cfg = malloc(sizeof *cfg); /* ~90 KB: not on the stack */
    moe_err e = {{0}};
    if (config_load(cfg, path, fuzz_scratch_dir(), n, overrides, &e) == 0) {
        /* a config that loads must also save and load back */
        char saved[600];
        snprintf(saved, sizeof saved, "%s/saved.cfg", fuzz_scratch_dir());
        if (config_save(cfg, saved, &e) != 0) {
            fprintf(stderr, "config_save refused a config that loaded: %s\n", e.msg);
            abort();
        }
        moe_config *back = malloc(sizeof *back);
        if (config_load(back, saved, fuzz_scratch_dir(), 0, NULL, &e) != 0) {
            fprintf(stderr, "a saved config does not load back: %s\n", e.msg);
            abort();
        }
        free(back);
    } else if (e.msg[0] == '\0') {
        fprintf(stderr, "config_load failed with no message\n");
        abort();
    }
    free(cfg);
    free(text);
    return 0;
}

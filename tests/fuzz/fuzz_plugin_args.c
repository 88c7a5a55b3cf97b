/* Fuzz the SPANK plugin's --moe-* option parsing. Input: lines, each an
 * option id byte then its value; all apply to one request in order, as
 * Slurm calls the option callbacks. Byte % (MOE_ARG_COUNT + 1) picks the
 * option (the extra one splits the value as a --moe-set list), bit 7
 * allows config paths (the admin's allow_user_configs). */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugin/args.h"

FUZZ_TARGET("plugin_args");

static void apply_line(moe_request *req, char *line)
{
    if (!line[0])
        return;
    unsigned char sel = (unsigned char)line[0];
    int id = sel % (MOE_ARG_COUNT + 1);
    int allow_paths = sel >> 7;
    const char *value = line + 1;
    moe_err e = {{0}};
    if (id == MOE_ARG_COUNT) {
        char buf[MOE_ARG_MAX_VALUE * 2];
        char *items[MOE_ARG_MAX_ITEMS];
        int n = args_split_set(value, buf, sizeof buf, items, MOE_ARG_MAX_ITEMS, &e);
        if (n < 0 && e.msg[0] == '\0')
            abort();
        for (int i = 0; i < n; i++)
            if (!strchr(items[i], '='))
                abort(); /* every item is key=value */
        return;
    }
    moe_request before = *req;
    const char *v = id == MOE_ARG_CHECK ? NULL : value;
    if (args_apply(req, (moe_arg_id)id, v, allow_paths, &e) != 0) {
        if (e.msg[0] == '\0' || memcmp(&before, req, sizeof before) != 0)
            abort(); /* a refusal names the option and leaves req unchanged */
        return;
    }
    /* Slurm may call a callback twice: the same value gives the same request */
    moe_request once = *req;
    if (args_apply(req, (moe_arg_id)id, v, allow_paths, &e) != 0 ||
        memcmp(&once, req, sizeof once) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    moe_request *req = calloc(1, sizeof *req);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        apply_line(req, line);
    char desc[16384];
    args_describe(req, desc, sizeof desc);
    free(req);
    free(text);
    return 0;
}

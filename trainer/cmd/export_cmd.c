/* moekit: `moe-train export` (see export_cmd.h). */
#include "export_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/exit_codes.h"
#include "../ckpt/ckpt_dir.h"
#include "../ckpt/fsio.h"
#include "../ckpt/shard_read.h"
#include "../train/hf_export.h"
#include "../train/weights_io.h"
#include "cli.h"

/* "5GB", "500MB", "2GiB", "1000000" (bytes). */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},      {"B", 1},      {"KB", 1e3},     {"MB", 1e6},
                 {"GB", 1e9},  {"TB", 1e12},  {"KiB", 1024.0}, {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}};
    if (end == s || !(v > 0))
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(end, units[i].suffix)) {
            *out = (uint64_t)(v * units[i].mult);
            return *out > 0 ? 0 : -1;
        }
    return -1;
}

typedef struct {
    const char *ckpt, *out;
    hf_export_opts o;
    int staging_mb;
} export_args;

typedef struct {
    const char *checkpoint, *out, *dtype, *max_shard_size;
    int staging_mb, help;
} export_opts;

#define EXPORT_USAGE                                                                               \
    "moe-train export --checkpoint DIR --out DIR [--dtype bf16|fp32] [--max-shard-size 5GB] "     \
    "[--staging-mb N]"

#define OPT(name, kind, field, max, choices, metavar, help)                                         \
    CLI_OPT(name, kind, export_opts, field, max, choices, metavar, help)
static const char *const dtype_choices[] = {"bf16", "fp32", NULL};
static const cli_option export_options[] = {
    OPT("checkpoint", CLI_STRING, checkpoint, 0, NULL, "DIR",
        "a checkpoint step directory, or a checkpoint directory\n(its newest) (required)"),
    OPT("out", CLI_STRING, out, 0, NULL, "DIR", "the Hugging Face directory to write (required)"),
    OPT("dtype", CLI_CHOICE, dtype, 0, dtype_choices, NULL, "tensor dtype (default bf16)"),
    OPT("max-shard-size", CLI_STRING, max_shard_size, 0, NULL, "SIZE",
        "largest safetensors file, e.g. 5GB (default), 500MB, 2GiB"),
    OPT("staging-mb", CLI_COUNT, staging_mb, 1048576, NULL, "N",
        "staging buffer in MiB (default 1024)"),
    OPT("help", CLI_FLAG, help, 0, NULL, NULL, "this text (also -h)"),
};
#undef OPT
#define N_EXPORT_OPTIONS (sizeof export_options / sizeof export_options[0])

void export_print_options(FILE *f)
{
    cli_print_options(f, export_options, N_EXPORT_OPTIONS);
}

/* Returns 0, -1 after --help, or MOE_EXIT_USAGE. */
static int parse_args(int argc, char **argv, export_args *a)
{
    export_opts o = {.dtype = "bf16", .max_shard_size = "5GB", .staging_mb = 1024};
    int first;
    int rc = cli_parse("moe-train export", export_options, N_EXPORT_OPTIONS, &o, argc, argv, &first);
    if (rc)
        return rc;
    if (o.help) {
        printf("Usage: %s\n\n", EXPORT_USAGE);
        export_print_options(stdout);
        return -1;
    }
    if (first < argc) {
        fprintf(stderr, "moe-train export: unexpected argument '%s' (see moe-train export --help)\n",
                argv[first]);
        return MOE_EXIT_USAGE;
    }
    if (!o.checkpoint || !o.out) {
        fprintf(stderr, "moe-train export: missing %s (usage: %s)\n",
                !o.checkpoint && !o.out ? "--checkpoint DIR and --out DIR"
                : !o.checkpoint         ? "--checkpoint DIR"
                                        : "--out DIR",
                EXPORT_USAGE);
        return MOE_EXIT_USAGE;
    }
    if (!o.checkpoint[0] || !o.out[0]) { /* refused now, not after the whole export */
        fprintf(stderr, "moe-train export: %s is empty: name a directory\n",
                o.out[0] ? "--checkpoint" : "--out");
        return MOE_EXIT_USAGE;
    }
    if (parse_size(o.max_shard_size, &a->o.max_shard_bytes)) {
        fprintf(stderr, "moe-train export: --max-shard-size '%s' is not a size like 5GB\n",
                o.max_shard_size);
        return MOE_EXIT_USAGE;
    }
    if (o.staging_mb < 1) {
        fprintf(stderr, "moe-train export: --staging-mb must be at least 1\n");
        return MOE_EXIT_USAGE;
    }
    a->ckpt = o.checkpoint;
    a->out = o.out;
    a->o.dtype = strcmp(o.dtype, "bf16") ? ST_F32 : ST_BF16;
    a->staging_mb = o.staging_mb;
    return 0;
}

/* A checkpoint root stands for its newest checkpoint. */
static int resolve_source(const char *in, char *dir, size_t n, moe_err *e)
{
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", in);
    int64_t step;
    if (access(cfg, F_OK) != 0) {
        int rc = ckpt_latest(in, dir, n, &step, e);
        if (rc < 0)
            return -1;
        if (rc == 1)
            return moe_errf(e, "%s: no config.json and no checkpoint%s%s", in,
                            e->msg[0] ? ": " : "", e->msg);
        return 0;
    }
    snprintf(dir, n, "%s", in);
    /* a single-file checkpoint is verified whole; a sharded one as it is read */
    char index[4200], manifest[4200];
    snprintf(index, sizeof index, "%s/%s", in, CKPT_INDEX_FILE);
    snprintf(manifest, sizeof manifest, "%s/%s", in, CKPT_MANIFEST);
    if (access(manifest, F_OK) == 0 && access(index, F_OK) != 0)
        return ckpt_verify(in, e);
    return 0;
}

static int run_export(export_args *a, moe_err *e)
{
    char src[4096], tmp[4200];
    struct stat st;
    if (stat(a->out, &st) == 0)
        return moe_errf(e, "--out %s exists: choose a new directory", a->out);
    if (resolve_source(a->ckpt, src, sizeof src, e))
        return -1;
    moe_model_cfg mc;
    if (weights_check(src, NULL, &mc, 1, e))
        return -1;
    a->o.staging_bytes = (size_t)a->staging_mb << 20;
    a->o.staging = malloc(a->o.staging_bytes);
    if (!a->o.staging)
        return moe_errf(e, "out of memory for a %d MiB staging buffer", a->staging_mb);
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", a->out, (int)getpid()); /* same file system */
    int rc = fsio_rm_rf(tmp, e) || fsio_mkdir_p(tmp, 0755, e) ||
             hf_export_shards(src, tmp, &a->o, 0, 1, NULL, e) || hf_export_finish(src, tmp, &a->o, e) ||
             hf_export_publish(tmp, a->out, e);
    if (rc)
        fsio_rm_rf(tmp, NULL);
    free(a->o.staging);
    if (!rc)
        printf("moe-train export: %s -> %s (%s)\n", src, a->out,
               a->o.dtype == ST_BF16 ? "bf16" : "fp32");
    return rc ? -1 : 0;
}

int export_main(int argc, char **argv)
{
    export_args a;
    memset(&a, 0, sizeof a);
    int u = parse_args(argc, argv, &a);
    if (u)
        return u < 0 ? MOE_EXIT_OK : u;
    moe_err e = {{0}};
    if (run_export(&a, &e)) {
        fprintf(stderr, "moe-train export: %s\n", e.msg);
        return MOE_EXIT_FAILURE;
    }
    return MOE_EXIT_OK;
}

/* moe-data: prepare FASTA collections into token stores that moe-train
 * memory-maps, and show what a store holds.
 *
 *   moe-data prepare --out STORE [options] INPUT...
 *   moe-data info [--files] [--verify] STORE
 */
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config_scale.h"
#include "../data/inputs.h"
#include "../data/store.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moe-data prepare --out STORE [options] INPUT...\n"
            "       moe-data info [--files] [--verify] STORE\n"
            "\n"
            "prepare tokenizes FASTA (plain or .gz) into a token store, a directory that\n"
            "moe-train reads with data.store = \"STORE\". INPUT is a file, a directory\n"
            "(its .fa/.fasta/.fna/.ffn/.frn/.fas[.gz] files, recursively), a glob, or\n"
            "@LIST (one input per line). Re-running with unchanged inputs does nothing.\n"
            "\n"
            "  --out STORE              the store directory to write\n"
            "  --threads N              worker threads (default: all CPUs)\n"
            "  --max-record-bases N     longest record allowed (default 4G)\n"
            "  --max-total-bases N      largest store allowed (default 1T)\n"
            "  --max-inflate-ratio X    gzip text/compressed size that counts as a bomb\n"
            "                           (default 1000; 0 = no check)\n"
            "  --force                  rebuild even when up to date\n"
            "  --quiet                  no progress line\n"
            "N takes a suffix k, M, G or T (powers of 1000).\n"
            "\n"
            "info prints what a store holds; --files lists its files, --verify checks\n"
            "the whole index (every chunk and entry) and the tokens against their\n"
            "checksums (opening reads only the header: training checks a chunk of the\n"
            "index the first time it reads it).\n");
}

static int parse_count(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1e3; end++; break;
    case 'M': mult = 1e6; end++; break;
    case 'G': mult = 1e9; end++; break;
    case 'T': mult = 1e12; end++; break;
    default: break;
    }
    if (end == s || *end || !(v > 0) || v * mult > 1.8e19) {
        fprintf(stderr, "moe-data: %s '%s': expected a positive count like 4G\n", opt, s);
        return -1;
    }
    *out = (uint64_t)(v * mult);
    return 0;
}

static int prepare_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'}, {"threads", required_argument, 0, 't'},
        {"max-record-bases", required_argument, 0, 'r'},
        {"max-total-bases", required_argument, 0, 'T'},
        {"max-inflate-ratio", required_argument, 0, 'i'}, {"force", no_argument, 0, 'f'},
        {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    store_prepare_opts o;
    store_prepare_defaults(&o);
    const char *out = NULL;
    char *end;
    int c;
    while ((c = getopt_long(argc, argv, "+o:t:fqh", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 't':
            o.threads = (int)strtol(optarg, &end, 10);
            if (*end || end == optarg || o.threads < 1 || o.threads > MOE_MAX_THREADS) {
                fprintf(stderr, "moe-data: --threads '%s': expected 1..%d\n", optarg, MOE_MAX_THREADS);
                return 2;
            }
            break;
        case 'r': if (parse_count("--max-record-bases", optarg, &o.max_record_bases)) return 2; break;
        case 'T': if (parse_count("--max-total-bases", optarg, &o.max_total_bases)) return 2; break;
        case 'i':
            o.max_inflate_ratio = strtod(optarg, &end);
            if (*end || !(o.max_inflate_ratio >= 0)) {
                fprintf(stderr, "moe-data: --max-inflate-ratio '%s': expected a number >= 0\n",
                        optarg);
                return 2;
            }
            break;
        case 'f': o.force = 1; break;
        case 'q': o.progress = 0; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (out && !out[0]) { /* refused now, not after the whole store is written */
        fprintf(stderr, "moe-data prepare: --out is empty: name the store directory\n");
        return 2;
    }
    if (!out || optind >= argc) {
        fprintf(stderr, "moe-data prepare: %s\n", out ? "no INPUT given" : "--out STORE is required");
        usage(stderr);
        return 2;
    }
    moe_path_list list = {0};
    moe_err e = {{0}};
    store_prepare_result res;
    int rc = 1;
    for (int i = optind; i < argc; i++)
        if (inputs_expand(&list, argv[i], NULL, &e) < 0)
            goto out;
    if (store_prepare(out, (const char *const *)list.paths, list.n, &o, &res, &e) < 0)
        goto out;
    if (res.up_to_date)
        printf("moe-data: %s is up to date (%" PRIu64 " files unchanged): nothing to do\n", out,
               res.n_files);
    else
        printf("moe-data: wrote %s: %" PRIu64 " files, %" PRIu64 " records, %" PRIu64 " bases in "
               "%.1f s (%.0f MB/s of sequence, %.0f MB/s of input)\n", out, res.n_files,
               res.n_records, res.n_bases, res.seconds, (double)res.n_bases / 1e6 / res.seconds,
               (double)res.input_bytes / 1e6 / res.seconds);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "moe-data prepare: %s\n", e.msg);
    path_list_free(&list);
    return rc;
}

static int info_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"files", no_argument, 0, 'f'}, {"verify", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    int files = 0, verify = 0, c;
    while ((c = getopt_long(argc, argv, "+fvh", opts, NULL)) != -1) {
        switch (c) {
        case 'f': files = 1; break;
        case 'v': verify = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "moe-data info: name one STORE\n");
        return 2;
    }
    moe_store s;
    moe_err e = {{0}};
    if (store_open(&s, argv[optind], &e) < 0 || (verify && store_verify_index(&s, &e) < 0) ||
        store_print_info(&s, files, verify, &e) < 0 || (verify && store_verify_tokens(&s, &e) < 0)) {
        fprintf(stderr, "moe-data info: %s\n", e.msg);
        if (s.hdr)
            store_close(&s);
        return 1;
    }
    if (verify)
        printf("verified   every chunk of the index, every entry, and every file's tokens match\n");
    store_close(&s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "prepare")) {
        /* every file allocates the same few MiB of buffers: keep them in the
         * heap for reuse instead of fresh (zero-filled, faulted-in) mappings */
        mallopt(M_MMAP_THRESHOLD, 64 << 20);
        mallopt(M_TRIM_THRESHOLD, 256 << 20);
        return prepare_main(argc - 1, argv + 1);
    }
    if (!strcmp(argv[1], "info"))
        return info_main(argc - 1, argv + 1);
    fprintf(stderr, "moe-data: unknown command '%s' (prepare or info)\n", argv[1]);
    return 2;
}

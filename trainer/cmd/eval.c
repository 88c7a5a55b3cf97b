/* moekit: `moe-train eval --checkpoint DIR --tokens FILE | --fasta FILE`. */
#include "eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../common/exit_codes.h"
#include "../backend/select.h"
#include "../build/run_build.h"
#include "cli.h"
#include "../ckpt/shard_read.h"
#include "../data/data.h"
#include "../model/dims_config.h"
#include "../model/model.h"
#include "../model/model_slices.h"
#include "../train/trainer.h"
#include "../train/weights_io.h"

int eval_read_tokens(const char *path, int vocab, int32_t **tokens, int *rows, int *len,
                     moe_err *e)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return moe_err_errno(e, errno, "cannot open token file %s", path);
    size_t cap = 0, n = 0;
    int32_t *buf = NULL;
    char *line = NULL;
    size_t lcap = 0;
    int r = 0, L = -1, lineno = 0, rc = 0;
    while (!rc && getline(&line, &lcap, f) > 0) {
        lineno++;
        char *p = line;
        int count = 0;
        for (;;) {
            while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
                p++;
            if (!*p)
                break;
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\n' &&
                                      *end != '\r')) {
                rc = moe_errf(e, "%s:%d: '%.20s' is not a token id", path, lineno, p);
                break;
            }
            if (v < 0 || v >= vocab) {
                rc = moe_errf(e, "%s:%d: token id %ld is outside the vocabulary (0..%d)", path,
                              lineno, v, vocab - 1);
                break;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 4096;
                int32_t *nb = realloc(buf, cap * sizeof *buf);
                if (!nb) {
                    rc = moe_errf(e, "out of memory reading %s", path);
                    break;
                }
                buf = nb;
            }
            buf[n++] = (int32_t)v;
            count++;
            p = end;
        }
        if (rc || count == 0)
            continue; /* blank lines are allowed */
        if (L < 0)
            L = count;
        if (count != L) {
            rc = moe_errf(e, "%s:%d: %d tokens, but the first sequence has %d (all lines must "
                             "have the same length)",
                          path, lineno, count, L);
            break;
        }
        r++;
    }
    free(line);
    fclose(f);
    if (!rc && r == 0)
        rc = moe_errf(e, "%s holds no sequence", path);
    if (!rc && L < 2)
        rc = moe_errf(e, "%s: sequences need at least 2 tokens to predict one", path);
    if (rc) {
        free(buf);
        return -1;
    }
    *tokens = buf;
    *rows = r;
    *len = L;
    return 0;
}

/* FASTA tokenized exactly as training reads it (data.h): records become BOS,
 * bases, EOS, laid end to end in windows of T + 1 tokens every T tokens
 * (packed), or cut into windows of their own (padded; the last one padded),
 * targets -1 on PAD, across records and on bases other than ACGT
 * (data.mask_degenerate_bases, on by default). Every window is evaluated:
 * no validation split, no shuffle. */
static int eval_read_fasta(const char *path, int T, int packed, int32_t **in, int32_t **tg,
                           int *rows, moe_err *e)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return moe_errf(e, "--fasta %s: is a directory, not a FASTA file", path);
    const char *files[1] = {path};
    moe_data_cfg dc = {.n_files = 1, .files = files, .mask_degenerate_bases = 1};
    dc.pack = packed ? MOE_PACK_PACKED : MOE_PACK_PADDED;
    moe_dataset *ds = NULL;
    moe_data_stats st;
    if (dataset_open(&ds, &dc, T, 0, 0, 1, ".", e))
        return -1;
    dataset_stats(ds, &st);
    int rc = -1;
    if (st.train_windows > (uint64_t)INT32_MAX / (uint64_t)T) {
        moe_errf(e, "%s: %llu windows of %d tokens: too many for one evaluation", path,
                 (unsigned long long)st.train_windows, T);
        goto out;
    }
    *rows = (int)st.train_windows;
    *in = malloc(sizeof(int32_t) * (size_t)*rows * (size_t)T);
    *tg = malloc(sizeof(int32_t) * (size_t)*rows * (size_t)T);
    if (!*in || !*tg) {
        moe_errf(e, "%s: out of memory for %d windows", path, *rows);
        goto out;
    }
    for (int r = 0; r < *rows; r++)
        if (dataset_next_train(ds, 1, *in + (size_t)r * T, *tg + (size_t)r * T, e))
            goto out;
    rc = 0;
out:
    dataset_close(ds);
    return rc;
}

/* Token-id lines: every token goes through the model, as in transformers (the
 * router of the last one counts in the aux loss); the last has no target. */
static int eval_token_rows(const char *tokfile, int vocab, int32_t **in, int32_t **tg, int *rows,
                           int *T, moe_err *e)
{
    int32_t *tok = NULL;
    int L;
    if (eval_read_tokens(tokfile, vocab, &tok, rows, &L, e))
        return -1;
    *T = L;
    size_t N = (size_t)*rows * (size_t)L;
    *in = malloc(sizeof(int32_t) * N);
    *tg = malloc(sizeof(int32_t) * N);
    if (!*in || !*tg) {
        free(tok);
        return moe_errf(e, "out of memory");
    }
    for (int r = 0; r < *rows; r++)
        for (int t = 0; t < L; t++) {
            (*in)[r * L + t] = tok[r * L + t];
            (*tg)[r * L + t] = t + 1 < L ? tok[r * L + t + 1] : -1;
        }
    free(tok);
    return 0;
}

typedef struct {
    moe_backend *be;
    moe_build run;          /* one rank: a local dispatcher, the model keeps its state */
    moe_model *m;           /* run.model */
    int m_rows;
    real *host; /* the checkpoint's weights */
    moe_dims d;
    int packed;             /* windows of several records: the model is told their sequences */
    int32_t *seg_pos, *seg_cu;
} eval_ctx;

/* The model for batches of `rows` x T tokens, built as a run is (one rank,
 * a local dispatcher, the model's own fp32 state, nothing recomputed); the
 * one before it goes. */
static int eval_build(eval_ctx *c, int rows, int T, moe_err *e)
{
    build_close(&c->run);
    c->m = NULL;
    moe_build_spec s = {.dims = c->d, .B = rows, .T = T, .moments = MOE_MOMENTS_DTYPE_FP32};
    if (build_run(&c->run, &s, c->be, e))
        return -1;
    c->m = c->run.model;
    c->m_rows = rows;
    return 0;
}

/* rows windows through the model, batch rows at a time; the model is
 * (re)built for the size of the batch, so no padded row enters the aux loss. */
static int eval_batches(eval_ctx *c, const int32_t *in, const int32_t *tg, int rows, int T,
                        int batch, double *loss, int64_t *tokens, double *aux, moe_err *e)
{
    *loss = *aux = 0;
    *tokens = 0;
    for (int r0 = 0; r0 < rows; r0 += batch) {
        int n = rows - r0 < batch ? rows - r0 : batch;
        if (c->m_rows != n && (eval_build(c, n, T, e) || model_set_masters(c->m, c->host, e)))
            return -1;
        double ls;
        int64_t nv;
        int max_len, n_seg = c->packed ? tok_segments(in + (size_t)r0 * T, n, T, c->seg_pos,
                                                      c->seg_cu, &max_len)
                                       : 0;
        if (model_set_segments(c->m, c->packed ? c->seg_pos : NULL, c->seg_cu, n_seg, max_len, e) ||
            model_forward(c->m, in + (size_t)r0 * T, tg + (size_t)r0 * T, &ls, &nv, NULL, e))
            return -1;
        *loss += ls;
        *tokens += nv;
        *aux += c->m->aux_loss * n / rows;
    }
    return 0;
}

/* The checkpoint's weights, in any layout shard_read.h reads (sharded,
 * single-file or a Hugging Face directory), into c->host in the model's flat
 * layout through a bounded staging buffer. */
static int load_weights(eval_ctx *c, const char *dir, int T, moe_err *e)
{
    shard_set *s = NULL;
    ckpt_slice_list l = {0};
    size_t staging_bytes = (size_t)64 << 20;
    void *staging = NULL;
    int rc = -1;
    if (eval_build(c, 1, T, e) || shard_set_open(dir, &s, e))
        goto out;
    if (!(c->host = malloc(sizeof(real) * c->m->n_elems)) || !(staging = malloc(staging_bytes))) {
        moe_errf(e, "out of memory");
        goto out;
    }
    /* the model of one row stays for a one-row evaluation: it needs the weights too */
    if (model_all_slices(c->m, "", SLICE_SRC_HOST, c->host, &l, e) ||
        shard_set_fill(s, &l, staging, staging_bytes, e) || model_set_masters(c->m, c->host, e))
        goto out;
    rc = 0;
out:
    free(staging);
    ckpt_slices_free(&l);
    shard_set_close(s);
    return rc;
}

/* No config file here: the backend runs with the built-in runtime.* values
 * and the legacy environment variables read as those keys (MOE_CUDNN_LIB). */
static int eval_run_opts(moe_backend *be, moe_err *e)
{
    moe_config *c = malloc(sizeof *c);
    if (!c)
        return moe_errf(e, "out of memory");
    config_defaults(c);
    moe_backend_opts o;
    int rc = config_apply_env(c, e) || config_validate(c, e) ? -1 : 0;
    if (!rc && be->set_run_opts) {
        o = backend_opts_from_config(&c->runtime);
        rc = be->set_run_opts(be, &o, e);
    }
    free(c);
    return rc;
}

static int run_eval(const char *dir, const char *tokfile, const char *fasta, int seq_length,
                    moe_backend_choice backend, moe_pack_mode pack, moe_err *e)
{
    moe_model_cfg mc;
    /* config.json and the weights agree before anything is sized by them */
    if (weights_check(dir, NULL, &mc, 1, e))
        return -1;
    int32_t *in = NULL, *tg = NULL;
    int rows = 0, T = seq_length, batch;
    eval_ctx c = {.d = model_dims_from_config(&mc)};
    char why[128];
    int rc = -1;
    if (backend_open(backend, 0, 0, &c.be, why, sizeof why, e) || eval_run_opts(c.be, e))
        goto out;
    /* --fasta packs as training packs a collection (auto: where the backend
     * can); token lines are sequences as transformers reads them */
    if (fasta && pack == MOE_PACK_PACKED && c.be->segments == MOE_SEGMENTS_NONE) {
        moe_errf(e, "--pack packed: the %s backend's attention does not take sequence boundaries "
                 "(--pack padded, or auto)", c.be->name);
        goto out;
    }
    c.packed = fasta && (pack == MOE_PACK_PACKED ||
                         (pack == MOE_PACK_AUTO && c.be->segments == MOE_SEGMENTS_FAST));
    if (fasta ? eval_read_fasta(fasta, T, c.packed, &in, &tg, &rows, e)
              : eval_token_rows(tokfile, mc.vocab_size, &in, &tg, &rows, &T, e))
        goto out;
    batch = fasta ? 64 : rows; /* token lines: one forward over all, as before */
    c.seg_pos = malloc(sizeof(int32_t) * (size_t)batch * T);
    c.seg_cu = malloc(sizeof(int32_t) * ((size_t)batch * T + 1));
    if (!c.seg_pos || !c.seg_cu) {
        moe_errf(e, "out of memory");
        goto out;
    }
    double loss, aux;
    int64_t nv;
    if (load_weights(&c, dir, T, e) ||
        eval_batches(&c, in, tg, rows, T, batch, &loss, &nv, &aux, e))
        goto out;
    printf("{\"lm_loss\": %.9g, \"aux_loss\": %.9g, \"tokens\": %lld, \"sequences\": %d, "
           "\"backend\": \"%s\"%s}\n",
           loss / nv, aux, (long long)nv, rows, c.be->name,
           !fasta ? "" : c.packed ? ", \"windows\": \"packed\"" : ", \"windows\": \"padded\"");
    rc = 0;
out:
    free(c.host);
    free(c.seg_pos);
    free(c.seg_cu);
    build_close(&c.run);
    if (c.be)
        c.be->destroy(c.be);
    free(in);
    free(tg);
    return rc;
}

typedef struct {
    const char *checkpoint, *tokens, *fasta;
    int backend, pack; /* moe_backend_choice, moe_pack_mode */
    int seq_length, help;
} eval_opts;

#define EVAL_USAGE                                                                                 \
    "moe-train eval --checkpoint DIR (--tokens FILE | --fasta FILE [--seq-length T] [--pack P]) "   \
    "[--backend B]"

#define OPT(name, kind, field, max, choices, metavar, help)                                         \
    CLI_OPT(name, kind, eval_opts, field, max, choices, metavar, help)
static const cli_option eval_options[] = {
    OPT("checkpoint", CLI_STRING, checkpoint, 0, NULL, "DIR",
        "a checkpoint or Hugging Face model directory (required)"),
    OPT("tokens", CLI_STRING, tokens, 0, NULL, "FILE",
        "token-id sequences, one per line (or --fasta)"),
    OPT("fasta", CLI_STRING, fasta, 0, NULL, "FILE",
        "a FASTA file (or .gz), tokenized and windowed as training does"),
    OPT("seq-length", CLI_COUNT, seq_length, 1 << 20, NULL, "T",
        "--fasta: window length in tokens (default 128)"),
    OPT("pack", CLI_ENUM, pack, 0, config_pack_names, NULL,
        "--fasta: records end to end in every window, or one record a window (data.pack; "
        "auto packs where the backend can)"),
    OPT("backend", CLI_ENUM, backend, 0, config_backend_names, NULL, "as for training"),
    OPT("help", CLI_FLAG, help, 0, NULL, NULL, "this text (also -h)"),
};
#undef OPT
#define N_EVAL_OPTIONS (sizeof eval_options / sizeof eval_options[0])

void eval_print_options(FILE *f)
{
    cli_print_options(f, eval_options, N_EVAL_OPTIONS);
}

int eval_main(int argc, char **argv)
{
    eval_opts o = {.backend = MOE_BACKEND_AUTO, .pack = MOE_PACK_AUTO, .seq_length = 128};
    int first;
    int rc = cli_parse("moe-train eval", eval_options, N_EVAL_OPTIONS, &o, argc, argv, &first);
    if (rc)
        return rc;
    if (o.help) {
        printf("Usage: %s\n\n", EVAL_USAGE);
        eval_print_options(stdout);
        return MOE_EXIT_OK;
    }
    if (first < argc) {
        fprintf(stderr, "moe-train eval: unexpected argument '%s' (see moe-train eval --help)\n",
                argv[first]);
        return MOE_EXIT_USAGE;
    }
    const char *missing = !o.checkpoint && !o.tokens && !o.fasta
                              ? "--checkpoint DIR and --tokens FILE or --fasta FILE"
                          : !o.checkpoint          ? "--checkpoint DIR"
                          : !o.tokens && !o.fasta  ? "--tokens FILE or --fasta FILE"
                                                   : NULL;
    if (missing || (o.tokens && o.fasta)) {
        fprintf(stderr, "moe-train eval: %s%s (usage: %s)\n", missing ? "missing " : "",
                missing ? missing : "--tokens and --fasta exclude each other", EVAL_USAGE);
        return MOE_EXIT_USAGE;
    }
    if (o.seq_length < 1) {
        fprintf(stderr, "moe-train eval: --seq-length must be at least 1\n");
        return MOE_EXIT_USAGE;
    }
    moe_err e = {{0}};
    if (run_eval(o.checkpoint, o.tokens, o.fasta, o.seq_length, (moe_backend_choice)o.backend,
                 (moe_pack_mode)o.pack, &e)) {
        fprintf(stderr, "moe-train eval: %s\n", e.msg);
        return MOE_EXIT_FAILURE;
    }
    return MOE_EXIT_OK;
}

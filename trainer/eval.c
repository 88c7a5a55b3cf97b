/* moekit: `moe-train eval --checkpoint DIR --tokens FILE`. */
#include "eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/exit_codes.h"
#include "backend/select.h"
#include "cli.h"
#include "ckpt/hf_config.h"
#include "ckpt/hf_dir.h"
#include "model/model.h"
#include "train/trainer.h"
#include "train/weights_io.h"

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

static int run_eval(const char *dir, const char *tokfile, const char *backend, moe_err *e)
{
    char path[4200];
    moe_model_cfg mc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hf_config_read(path, &mc, e))
        return -1;
    int32_t *tok = NULL;
    int rows, L;
    if (eval_read_tokens(tokfile, mc.vocab_size, &tok, &rows, &L, e))
        return -1;
    /* every token goes through the model, as in transformers (the router of
     * the last one counts in the aux loss); the last has no target */
    int T = L, N = rows * T;
    int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
    moe_backend *be = NULL;
    moe_dispatcher *disp = NULL;
    moe_model *m = NULL;
    hf_dir *hd = NULL;
    real *host = NULL;
    char why[128];
    int rc = -1;
    if (!in || !tg) {
        moe_errf(e, "out of memory");
        goto out;
    }
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < T; t++) {
            in[r * T + t] = tok[r * L + t];
            tg[r * T + t] = t + 1 < L ? tok[r * L + t + 1] : -1;
        }
    moe_dims d = trainer_model_dims(&mc);
    if (backend_open(backend, 0, 0, &be, why, sizeof why, e) || dispatcher_local_create(&disp, e) ||
        model_create(&m, &d, be, disp, rows, T, e) || hf_dir_open(dir, &hd, e))
        goto out;
    host = malloc(sizeof(real) * m->n_elems);
    if (!host) {
        moe_errf(e, "out of memory");
        goto out;
    }
    if (weights_read(m, weights_source_hf(hd, dir), "", 1, host, e) ||
        model_set_masters(m, host, e))
        goto out;
    double ls;
    int64_t nv;
    if (model_forward(m, in, tg, &ls, &nv, NULL, e))
        goto out;
    printf("{\"lm_loss\": %.9g, \"aux_loss\": %.9g, \"tokens\": %lld, \"sequences\": %d, "
           "\"backend\": \"%s\"}\n",
           ls / nv, m->aux_loss, (long long)nv, rows, be->name);
    rc = 0;
out:
    free(host);
    if (hd)
        hf_dir_close(hd);
    if (m)
        model_destroy(m);
    if (disp)
        disp->destroy(disp);
    if (be)
        be->destroy(be);
    free(in);
    free(tg);
    free(tok);
    return rc;
}

typedef struct {
    const char *checkpoint, *tokens, *backend;
    int help;
} eval_opts;

#define OPT(name, kind, field, max, choices, metavar, help)                                         \
    CLI_OPT(name, kind, eval_opts, field, max, choices, metavar, help)
static const cli_option eval_options[] = {
    OPT("checkpoint", CLI_STRING, checkpoint, 0, NULL, "DIR",
        "a checkpoint or Hugging Face model directory (required)"),
    OPT("tokens", CLI_STRING, tokens, 0, NULL, "FILE",
        "token-id sequences, one per line (required)"),
    OPT("backend", CLI_CHOICE, backend, 0, "auto|cpu|cuda", NULL, "as for training"),
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
    eval_opts o = {.backend = "auto"};
    int first;
    int rc = cli_parse("moe-train eval", eval_options, N_EVAL_OPTIONS, &o, argc, argv, &first);
    if (rc)
        return rc;
    if (o.help) {
        printf("Usage: moe-train eval --checkpoint DIR --tokens FILE [--backend B]\n\n");
        eval_print_options(stdout);
        return MOE_EXIT_OK;
    }
    if (first < argc) {
        fprintf(stderr, "moe-train eval: unexpected argument '%s' (see moe-train eval --help)\n",
                argv[first]);
        return MOE_EXIT_USAGE;
    }
    const char *missing = !o.checkpoint && !o.tokens ? "--checkpoint DIR and --tokens FILE"
                          : !o.checkpoint            ? "--checkpoint DIR"
                          : !o.tokens                ? "--tokens FILE"
                                                     : NULL;
    if (missing) {
        fprintf(stderr, "moe-train eval: missing %s (usage: moe-train eval --checkpoint DIR "
                        "--tokens FILE [--backend B])\n", missing);
        return MOE_EXIT_USAGE;
    }
    moe_err e = {{0}};
    if (run_eval(o.checkpoint, o.tokens, o.backend, &e)) {
        fprintf(stderr, "moe-train eval: %s\n", e.msg);
        return MOE_EXIT_FAILURE;
    }
    return MOE_EXIT_OK;
}

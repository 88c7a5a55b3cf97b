/* moekit: `moe-train eval --checkpoint DIR --tokens FILE`. */
#include "eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "ckpt/shard_read.h"
#include "model/model_slices.h"
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
    moe_model_cfg mc;
    /* config.json and the weights agree before anything is sized by them */
    if (weights_check(dir, NULL, &mc, 1, e))
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
    shard_set *s = NULL;
    ckpt_slice_list l = {0};
    size_t staging_bytes = (size_t)64 << 20;
    void *staging = NULL;
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
        model_create(&m, &d, be, disp, rows, T, e) || shard_set_open(dir, &s, e) ||
        model_all_slices(m, "", SLICE_SRC_MASTERS, NULL, &l, e))
        goto out;
    if (!(staging = malloc(staging_bytes))) {
        moe_errf(e, "out of memory");
        goto out;
    }
    if (shard_set_fill(s, &l, staging, staging_bytes, e))
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
    free(staging);
    ckpt_slices_free(&l);
    shard_set_close(s);
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

int eval_main(int argc, char **argv)
{
    const char *dir = NULL, *tokens = NULL, *backend = "auto";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--checkpoint") ? &dir
                            : !strcmp(a, "--tokens")   ? &tokens
                            : !strcmp(a, "--backend")  ? &backend
                                                       : NULL;
        if (!slot) {
            fprintf(stderr, "moe-train eval: unknown argument '%s'\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "moe-train eval: %s needs a value\n", a);
            return 2;
        }
        *slot = argv[++i];
    }
    if (!dir || !tokens) {
        fprintf(stderr, "usage: moe-train eval --checkpoint DIR --tokens FILE [--backend B]\n");
        return 2;
    }
    moe_err e = {{0}};
    if (run_eval(dir, tokens, backend, &e)) {
        fprintf(stderr, "moe-train eval: %s\n", e.msg);
        return 1;
    }
    return 0;
}

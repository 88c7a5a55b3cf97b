/* Causal GQA attention, forward + backward, at the genomic benchmark's long
 * sequences: Mixtral's 32 query / 8 key heads of 128, bf16, micro-batch 1,
 * once per kernel family (cuDNN's fused flash attention, moekit's mma.sync
 * kernels). CUDA events around each repetition after a warm-up, median of 5.
 * TFLOP/s counts the causal forward as 2 * 2 * S^2 * HD / 2 a head and the
 * backward as twice that (3x the forward in all), as bench/attn_sdpa.py
 * counts torch's SDPA, so the two print comparable rates.
 *   build/tests/gpu/bench_attention [S ...]      (default 8192 32768)
 *   MOE_BENCH_ATTN_FAMILIES="cudnn mma"          (the families to time) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/backend/backend.h"

enum { NH = 32, NKV = 8, HD = 128, REPS = 5 };
static moe_backend *be;
static moe_err err;

static void *dev_rand(size_t n, int is_act, float scale, unsigned long long seed)
{
    float *h = malloc(sizeof(float) * n);
    unsigned long long s = 0x9E3779B97F4A7C15ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = scale * ((float)((s >> 40) & 0xffffff) / 16777216.0f - 0.5f);
    }
    void *d = be->alloc(be, is_act ? be->act_bytes(be, n) : n * sizeof(float), &err);
    if (d && (is_act ? be->act_from_real(be, d, h, n, &err) : be->upload(be, d, h, n * sizeof(float), &err)))
        d = NULL;
    free(h);
    return d;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* median ms of forward, backward and both, for sequence T */
static int time_family(int T, double ms[3])
{
    size_t nq = (size_t)T * NH * HD, nk = (size_t)T * NKV * HD;
    void *q = dev_rand(nq, 1, 2, 1), *k = dev_rand(nk, 1, 2, 2), *v = dev_rand(nk, 1, 2, 3);
    void *d = dev_rand(nq, 1, 1, 4), *o = dev_rand(nq, 1, 1, 5), *lse = dev_rand((size_t)NH * T, 0, 1, 6);
    void *dq = dev_rand(nq, 1, 1, 7), *dk = dev_rand(nk, 1, 1, 8), *dv = dev_rand(nk, 1, 1, 9);
    int rc = !(q && k && v && d && o && lse && dq && dk && dv);
    float t[2][REPS];
    cudaEvent_t ev[3];
    for (int i = 0; i < 3; i++)
        cudaEventCreate(&ev[i]);
    for (int r = -1; r < REPS && !rc; r++) { /* r = -1: warm-up (plans, scratch) */
        cudaEventRecord(ev[0], (cudaStream_t)cuda_backend_stream(be));
        be->attention_fwd(be, o, lse, q, k, v, 1, T, NH, NKV, HD, NULL);
        cudaEventRecord(ev[1], (cudaStream_t)cuda_backend_stream(be));
        be->attention_bwd(be, dq, dk, dv, d, q, k, v, o, lse, 1, T, NH, NKV, HD, NULL);
        cudaEventRecord(ev[2], (cudaStream_t)cuda_backend_stream(be));
        rc = be->sync(be, &err) != 0;
        if (r >= 0 && !rc) {
            cudaEventElapsedTime(&t[0][r], ev[0], ev[1]);
            cudaEventElapsedTime(&t[1][r], ev[1], ev[2]);
        }
    }
    if (!rc) {
        float both[REPS];
        for (int r = 0; r < REPS; r++)
            both[r] = t[0][r] + t[1][r];
        qsort(t[0], REPS, sizeof(float), cmp_float);
        qsort(t[1], REPS, sizeof(float), cmp_float);
        qsort(both, REPS, sizeof(float), cmp_float);
        ms[0] = t[0][REPS / 2], ms[1] = t[1][REPS / 2], ms[2] = both[REPS / 2];
    }
    void *bufs[] = {q, k, v, d, o, lse, dq, dk, dv};
    for (int i = 0; i < 9; i++)
        if (bufs[i])
            be->free(be, bufs[i]);
    for (int i = 0; i < 3; i++)
        cudaEventDestroy(ev[i]);
    return rc;
}

int main(int argc, char **argv)
{
    if (cuda_backend_create(&be, 0, &err)) {
        fprintf(stderr, "bench_attention: %s\n", err.msg);
        return 1;
    }
    const char *fams = getenv("MOE_BENCH_ATTN_FAMILIES");
    char list[128];
    snprintf(list, sizeof list, "%s", fams && *fams ? fams : "cudnn mma");
    const char *dflt[] = {"8192", "32768"};
    int n = argc > 1 ? argc - 1 : 2;
    printf("%-8s %-7s %10s %10s %10s %12s\n", "S", "kernels", "fwd ms", "bwd ms", "fwd+bwd ms",
           "TFLOP/s");
    for (int i = 0; i < n; i++) {
        int T = atoi(argc > 1 ? argv[i + 1] : dflt[i]);
        double flop = 3.0 * 4.0 * NH * (double)T * T / 2 * HD;
        char fl[128], *save = NULL;
        snprintf(fl, sizeof fl, "%s", list);
        for (char *f = strtok_r(fl, " ", &save); f; f = strtok_r(NULL, " ", &save)) {
            static const char *const names[] = {"cudnn", "mma", "wmma", "simt"};
            moe_backend_opts o = backend_opts_default();
            int known = 0;
            for (int k = 0; k < 4; k++)
                if (!strcmp(f, names[k]))
                    o.attention = (moe_rt_attention)k, known = 1;
            if (!known) {
                fprintf(stderr, "bench_attention: '%s' is none of cudnn, mma, wmma, simt\n", f);
                return 2;
            }
            double ms[3];
            if (be->set_run_opts(be, &o, &err) || time_family(T, ms)) {
                fprintf(stderr, "bench_attention: S=%d %s: %s\n", T, f, err.msg);
                return 1;
            }
            printf("%-8d %-7s %10.3f %10.3f %10.3f %12.1f\n", T, f, ms[0], ms[1], ms[2],
                   flop / ms[2] / 1e9);
            fflush(stdout);
        }
    }
    be->destroy(be);
    return 0;
}

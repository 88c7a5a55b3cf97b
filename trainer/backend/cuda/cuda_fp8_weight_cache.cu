/* moekit CUDA backend: the FP8 copies of the weights (cuda_fp8_weight_cache.h). */
#include "cuda_fp8_weight_cache.h"

#include <stdint.h>
#include <stdlib.h>

#include "cuda_internal.h"

struct cuda_fp8_wcopy {
    const void *w;
    size_t out, in;
    int transposed;
    void *codes, *scales;
    size_t codes_bytes, scale_bytes;
    lowp_fp8_operand op;
    unsigned gen; /* current when equal to the cache's */
    int made;     /* op holds a quantisation */
};

/* A linear list: a run has a few hundred copies at most (layers x local
 * experts x 3 weights x 2 orientations, and the attention projections), and
 * a lookup costs less than the kernel launch it spares. */
struct cuda_fp8_wcache {
    int on;
    unsigned gen;
    cuda_fp8_wcopy *copies;
    int n, cap;
    size_t bytes;
};

static struct cuda_fp8_wcache *cache_of(moe_backend *be, int make)
{
    cuda_ctx *c = CTX(be);
    if (!c->wcache && make)
        c->wcache = (struct cuda_fp8_wcache *)calloc(1, sizeof *c->wcache);
    return c->wcache;
}

static cuda_fp8_wcopy *lookup(struct cuda_fp8_wcache *k, const void *w, size_t out, size_t in,
                              int transposed)
{
    for (int i = 0; i < k->n; i++) {
        cuda_fp8_wcopy *c = &k->copies[i];
        if (c->w == w && c->out == out && c->in == in && c->transposed == transposed)
            return c;
    }
    return NULL;
}

int cuda_wcache_find(moe_backend *be, const void *w, size_t out, size_t in, int transposed,
                     lowp_fp8_operand *o)
{
    struct cuda_fp8_wcache *k = cache_of(be, 0);
    if (!k || !k->on)
        return 0;
    cuda_fp8_wcopy *c = lookup(k, w, out, in, transposed);
    if (!c || !c->made || c->gen != k->gen)
        return 0;
    *o = c->op;
    return 1;
}

cuda_fp8_wcopy *cuda_wcache_claim(moe_backend *be, const void *w, size_t out, size_t in,
                                  int transposed, size_t codes_bytes, size_t scale_bytes,
                                  void **codes, void **scales)
{
    struct cuda_fp8_wcache *k = cache_of(be, 0);
    if (!k || !k->on)
        return NULL;
    cuda_fp8_wcopy *c = lookup(k, w, out, in, transposed);
    if (c && (c->codes_bytes < codes_bytes || c->scale_bytes < scale_bytes))
        return NULL; /* (the same shape needs the same bytes; a recipe change frees all first) */
    if (!c) {
        if (k->n == k->cap) {
            int cap = k->cap ? 2 * k->cap : 64;
            cuda_fp8_wcopy *g = (cuda_fp8_wcopy *)realloc(k->copies, sizeof *g * (size_t)cap);
            if (!g)
                return NULL;
            k->copies = g, k->cap = cap;
        }
        void *cd = NULL, *sc = NULL;
        if (cudaMalloc(&cd, codes_bytes) != cudaSuccess) {
            cudaGetLastError(); /* not sticky: the run goes on quantising into scratch */
            return NULL;
        }
        if (cudaMalloc(&sc, scale_bytes ? scale_bytes : 16) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(cd);
            return NULL;
        }
        c = &k->copies[k->n++];
        *c = (cuda_fp8_wcopy){w, out, in, transposed, cd, sc, codes_bytes, scale_bytes,
                              {NULL, NULL, LOWP_BLK_128X128}, 0, 0};
        k->bytes += codes_bytes + scale_bytes;
    }
    *codes = c->codes, *scales = c->scales;
    c->made = 0;
    return c;
}

void cuda_wcache_keep(moe_backend *be, cuda_fp8_wcopy *c, const lowp_fp8_operand *o)
{
    c->op = *o;
    c->gen = cache_of(be, 0)->gen;
    c->made = 1;
}

void cuda_wcache_weights_changed(moe_backend *be)
{
    struct cuda_fp8_wcache *k = cache_of(be, 0);
    if (k)
        k->gen++;
}

void cuda_wcache_wrote(moe_backend *be, const void *p, size_t bytes)
{
    struct cuda_fp8_wcache *k = cache_of(be, 0);
    if (!k || !k->n || !bytes)
        return;
    const uintptr_t a = (uintptr_t)p, b = a + bytes;
    for (int i = 0; i < k->n; i++) {
        const cuda_fp8_wcopy *c = &k->copies[i];
        const uintptr_t w0 = (uintptr_t)c->w, w1 = w0 + c->out * c->in * 2; /* bf16 weights */
        if (a < w1 && w0 < b) {
            k->gen++;
            return;
        }
    }
}

void cuda_wcache_forget(moe_backend *be, const void *p, size_t bytes)
{
    struct cuda_fp8_wcache *k = cache_of(be, 0);
    if (!k || !k->n)
        return;
    const uintptr_t a = (uintptr_t)p, b = a + (bytes ? bytes : 1);
    int kept = 0;
    for (int i = 0; i < k->n; i++) {
        cuda_fp8_wcopy *c = &k->copies[i];
        if ((uintptr_t)c->w >= a && (uintptr_t)c->w < b) {
            cudaFree(c->codes);
            cudaFree(c->scales);
            k->bytes -= c->codes_bytes + c->scale_bytes;
        } else {
            k->copies[kept++] = *c;
        }
    }
    k->n = kept;
    k->gen++;
}

static void release(struct cuda_fp8_wcache *k)
{
    for (int i = 0; i < k->n; i++) {
        cudaFree(k->copies[i].codes);
        cudaFree(k->copies[i].scales);
    }
    k->n = 0;
    k->bytes = 0;
    k->gen++;
}

void cuda_wcache_set(moe_backend *be, int on)
{
    struct cuda_fp8_wcache *k = cache_of(be, on);
    if (!k)
        return;
    if (!on && k->n)
        release(k); /* off where memory is short: give it back */
    k->on = on;
    k->gen++;
}

size_t cuda_wcache_bytes(moe_backend *be)
{
    struct cuda_fp8_wcache *k = cache_of(be, 0);
    return k ? k->bytes : 0;
}

void cuda_wcache_destroy(moe_backend *be)
{
    struct cuda_fp8_wcache *k = cache_of(be, 0);
    if (!k)
        return;
    release(k);
    free(k->copies);
    free(k);
    CTX(be)->wcache = NULL;
}

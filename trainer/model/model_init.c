/* moekit: the seeded initialisation of the model's weights (Hugging Face
 * Mixtral's: N(0, std) matrices, unit norms), on the host or the device. */
#include <stdlib.h>

#include "../numerics/init_normal.h"
#include "model.h"
#include "params.h"
#include "../numerics/rng.h"

#define INIT_BLOCK 2048 /* values a host thread makes at a time */

/* Where the device can fill the split masters itself, the weights never
 * cross PCIe: seconds of host libm and a 4-byte-a-parameter upload saved
 * (28 GB a rank for Mixtral-8x7B at EP=8). A sharded optimizer keeps the low
 * halves (masters_fill), else the model does. m->init_on_host
 * (runtime.init_on=host) forces the host path (the same bits; for
 * comparison). */
static int init_on_device(const moe_model *m)
{
    return !m->init_on_host && m->split_master && m->be->masters_init &&
           (m->master || m->masters_fill);
}

typedef struct {
    moe_model *m;
    uint64_t seed;
    double std;
} init_args;

/* the stream key of expert x's copy of parameter p: one stream per named
 * matrix, so the values are the same whatever the expert-parallel layout,
 * the backend or the thread count; 0 for norms, which start at 1 */
static uint64_t matrix_key(const moe_model *m, const moe_param *p, int x, uint64_t seed)
{
    if (p->ndim == 1)
        return 0;
    char name[160];
    model_param_name(m, p, x, name, sizeof name);
    return seed ^ rng_hash(name);
}

/* moe_masters_fill_fn: every matrix's overlap with [flat, flat + n) on the
 * device, each from its place in its own stream */
static int fill_range(void *arg, size_t flat, size_t n, uint16_t *lo, moe_err *e)
{
    const init_args *a = arg;
    moe_model *m = a->m;
    moe_backend *be = m->be;
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        int nx = p->n_experts > 0 ? p->n_experts : 1;
        size_t per = params_matrix_elems(p);
        for (int x = 0; x < nx; x++) {
            size_t off = p->offset + (size_t)x * per;
            size_t from = off > flat ? off : flat;
            size_t to = off + per < flat + n ? off + per : flat + n;
            if (from >= to)
                continue;
            act *wc = (char *)m->wc + be->act_bytes(be, from);
            if (be->masters_init(be, lo + (from - flat), wc, to - from, from - off,
                                 p->ndim != 1, matrix_key(m, p, x, a->seed), a->std, 1.0f, e))
                return moe_err_prefix(e, "initialising %s on the device", p->name);
        }
    }
    return 0;
}

static int init_host(moe_model *m, uint64_t seed, double std, moe_err *e)
{
    real *host = malloc(sizeof(real) * m->n_elems);
    if (!host)
        return moe_errf(e, "out of memory initialising %zu parameters", m->n_elems);
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        int nx = p->n_experts > 0 ? p->n_experts : 1;
        size_t per = params_matrix_elems(p);
        for (int x = 0; x < nx; x++) {
            real *dst = host + p->offset + (size_t)x * per;
            int normal = p->ndim != 1;
            uint64_t key = matrix_key(m, p, x, seed);
            size_t n_blocks = (per + INIT_BLOCK - 1) / INIT_BLOCK;
#pragma omp parallel for schedule(static)
            for (size_t bk = 0; bk < n_blocks; bk++) {
                size_t j0 = bk * INIT_BLOCK, n = per - j0 < INIT_BLOCK ? per - j0 : INIT_BLOCK;
                float vals[INIT_BLOCK];
                if (normal)
                    init_weights(vals, key, j0, n, std);
                for (size_t k = 0; k < n; k++)
                    dst[j0 + k] = normal ? (real)vals[k] : 1;
            }
        }
    }
    int rc = model_set_masters(m, host, e);
    free(host);
    return rc;
}

int model_init_random(moe_model *m, uint64_t seed, double std, moe_err *e)
{
    if (!init_on_device(m))
        return init_host(m, seed, std, e);
    init_args a = {m, seed, std};
    if (m->master)
        return fill_range(&a, 0, m->n_elems, m->master, e);
    return m->masters_fill(m->masters_ctx, fill_range, &a, e);
}

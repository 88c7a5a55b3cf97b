/* moekit: the seeded initialisation of the model's weights (Hugging Face
 * Mixtral's: N(0, std) matrices, unit norms), on the host or the device. */
#include <stdlib.h>

#include "init_normal.h"
#include "model.h"
#include "params.h"
#include "rng.h"

#define INIT_BLOCK 2048 /* values a host thread makes at a time */

/* Where the device can fill the split masters itself, the weights never
 * cross PCIe: seconds of host libm and a 4-byte-a-parameter upload saved.
 * m->init_on_host (runtime.init_on=host) forces the host path (the same
 * bits; for comparison). */
static int init_on_device(const moe_model *m)
{
    return !m->init_on_host && m->split_master && m->master && m->be->masters_init;
}

int model_init_random(moe_model *m, uint64_t seed, double std, moe_err *e)
{
    moe_backend *be = m->be;
    int on_device = init_on_device(m);
    real *host = on_device ? NULL : malloc(sizeof(real) * m->n_elems);
    if (!on_device && !host)
        return moe_errf(e, "out of memory initialising %zu parameters", m->n_elems);
    char name[160];
    for (int i = 0; i < m->n_params; i++) {
        const moe_param *p = &m->params[i];
        int nx = p->n_experts > 0 ? p->n_experts : 1;
        size_t per = params_matrix_elems(p);
        for (int x = 0; x < nx; x++) {
            size_t off = p->offset + (size_t)x * per;
            /* one stream per named matrix: the same values whatever the
             * expert-parallel layout, the backend or the thread count */
            int normal = p->ndim != 1; /* norms start at 1 */
            uint64_t key = 0;
            if (normal) {
                model_param_name(m, p, x, name, sizeof name);
                key = seed ^ rng_hash(name);
            }
            if (on_device) {
                uint16_t *lo = (uint16_t *)m->master + off;
                act *wc = (char *)m->wc + be->act_bytes(be, off);
                if (be->masters_init(be, lo, wc, per, normal, key, std, 1.0f, e))
                    return moe_err_prefix(e, "initialising %s on the device", p->name);
                continue;
            }
            real *dst = host + off;
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
    if (on_device)
        return 0;
    int rc = model_set_masters(m, host, e);
    free(host);
    return rc;
}

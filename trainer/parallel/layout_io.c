/* moekit: rank layout <-> full layout of the parameters (see layout_io.h). */
#include "layout_io.h"

#include <stdlib.h>
#include <string.h>

#include "../model/params.h"

int layout_full_make(moe_model *full, const moe_model *local, moe_err *e)
{
    memset(full, 0, sizeof *full);
    full->d = local->d;
    full->ep_size = 1;
    full->E_local = local->d.E;
    if (params_layout(full, e)) {
        layout_full_free(full);
        return -1;
    }
    return 0;
}

void layout_full_free(moe_model *full)
{
    free(full->params);
    free(full->spans);
    full->params = NULL;
    full->spans = NULL;
}

/* elements of this rank's expert tensors, all layers */
static size_t local_expert_elems(const moe_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].n_experts > 0)
            n += m->params[i].n;
    return n;
}

int layout_gather_full(moe_par *p, const moe_model *local, const moe_model *full,
                       const real *local_host, real *full_host, moe_err *e)
{
    size_t X = local_expert_elems(local), P = (size_t)p->ep_size;
    real *send = malloc(sizeof(real) * (X + 1)), *recv = malloc(sizeof(real) * (X * P + 1));
    if (!send || !recv) {
        free(send);
        free(recv);
        return moe_errf(e, "out of memory gathering the experts of %zu ranks", P);
    }
    size_t o = 0;
    for (int i = 0; i < local->n_params; i++) {
        const moe_param *lp = &local->params[i];
        if (lp->n_experts > 0) {
            memcpy(send + o, local_host + lp->offset, sizeof(real) * lp->n);
            o += lp->n;
        }
    }
    int rc = comm_allgather(p->ep, send, recv, X, MOE_DT_REAL, e);
    if (!rc) {
        size_t lo = 0; /* offset of this tensor inside one rank's expert block */
        for (int i = 0; i < local->n_params; i++) {
            const moe_param *lp = &local->params[i];
            const moe_param *fp = params_find(full, lp->kind, lp->layer);
            if (lp->n_experts == 0) {
                memcpy(full_host + fp->offset, local_host + lp->offset, sizeof(real) * lp->n);
                continue;
            }
            for (size_t q = 0; q < P; q++) /* rank q holds experts [q E_local, ...) */
                memcpy(full_host + fp->offset + q * lp->n, recv + q * X + lo,
                       sizeof(real) * lp->n);
            lo += lp->n;
        }
    }
    free(send);
    free(recv);
    return rc;
}

void layout_slice_local(const moe_model *local, const moe_model *full, const real *full_host,
                        real *local_host)
{
    for (int i = 0; i < local->n_params; i++) {
        const moe_param *lp = &local->params[i];
        const moe_param *fp = params_find(full, lp->kind, lp->layer);
        size_t skip = lp->n_experts > 0 ? (size_t)local->e0 * params_matrix_elems(lp) : 0;
        memcpy(local_host + lp->offset, full_host + fp->offset + skip, sizeof(real) * lp->n);
    }
}

/* moekit tests: a model with its backend and dispatcher, as the model-level
 * tests build one (each opens it its own way) and close it all alike. */
#ifndef MOE_TEST_MODEL_RIG_H
#define MOE_TEST_MODEL_RIG_H

#include <stdint.h>
#include <stdio.h>

#include "../trainer/dispatch/dispatch.h"
#include "../trainer/model/model.h"
#include "../trainer/dispatch/dispatch_ep.h"

typedef struct {
    moe_backend *be;
    moe_dispatcher *disp;
    moe_model *m;
} rig;

static inline int rig_fail(const moe_err *e)
{
    fprintf(stderr, "  rig: %s\n", e->msg);
    return -1;
}

/* The rest of a rig on the backend the caller made (r->be): an EP dispatcher
 * over ep (capacity: its expert_capacity_factor; < 0 keeps the default) or,
 * without ep, the local one; a B x T model (model_create_parallel's
 * with_moments and recompute), initialised from seed at std (0: as made).
 * -1 with the reason printed. rig_build_overlapped: the EP dispatcher with
 * its exchange overlapped (dispatcher_ep_set_overlap). */
static inline int rig_build_overlapped(rig *r, const moe_dims *d, moe_comm *ep, double capacity,
                                       int overlap, int B, int T, int with_moments, int recompute,
                                       uint64_t seed, double std)
{
    moe_err e = {{0}};
    if (ep ? dispatcher_ep_create(&r->disp, ep, d->E, &e) : dispatcher_local_create(&r->disp, &e))
        return rig_fail(&e);
    if (ep && capacity >= 0)
        dispatcher_ep_set_capacity(r->disp, capacity);
    if (ep)
        dispatcher_ep_set_overlap(r->disp, overlap);
    if (model_create_parallel(&r->m, d, r->be, r->disp, B, T, 0, 1, with_moments, recompute, &e) ||
        (std != 0 && model_init_random(r->m, seed, std, &e)))
        return rig_fail(&e);
    return 0;
}

static inline int rig_build(rig *r, const moe_dims *d, moe_comm *ep, double capacity, int B, int T,
                            int with_moments, int recompute, uint64_t seed, double std)
{
    return rig_build_overlapped(r, d, ep, capacity, 0, B, T, with_moments, recompute, seed, std);
}

static inline void rig_close(rig *r)
{
    if (r->m)
        model_destroy(r->m);
    if (r->disp)
        r->disp->destroy(r->disp);
    if (r->be)
        r->be->destroy(r->be);
}

#endif

/* moekit tests: a model with its backend and dispatcher, as the model-level
 * tests build one (each opens it its own way) and close it all alike. */
#ifndef MOE_TEST_MODEL_RIG_H
#define MOE_TEST_MODEL_RIG_H

#include "../trainer/model/dispatch.h"
#include "../trainer/model/model.h"

typedef struct {
    moe_backend *be;
    moe_dispatcher *disp;
    moe_model *m;
} rig;

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

/* moekit checkpoints: the state a rank owns, as a list of tensor slices.
 *
 * Whatever keeps training state (the model's masters, an optimizer's
 * moments, whatever layout or device they live in) describes it to the
 * checkpoint writer and reader as slices of named full tensors:
 *   name, dtype, full shape   the tensor as a single-rank run would hold it
 *   start, count              the elements of its row-major flattening this
 *                             slice covers (a row range is start = r0 * cols)
 *   get / put                 copy elements [start + first, start + first + n)
 *                             to / from a host buffer of that dtype, in
 *                             pieces as small as the staging buffer
 * The writer streams every slice of a rank through one staging buffer into
 * that rank's file; the reader fills the slices a rank asks for from
 * whichever files and ranks wrote them. Slices never leave their owner: no
 * rank holds more than its slices and the staging buffer.
 *
 * owner, base, base2 and at are the owner's to use in get/put (say, a
 * backend, a device pointer and an element offset). */
#ifndef MOE_CKPT_SLICES_H
#define MOE_CKPT_SLICES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/err.h"
#include "safetensors.h"

#define CKPT_NAME_MAX 200

typedef struct ckpt_slice ckpt_slice;

typedef int (*ckpt_slice_get)(const ckpt_slice *s, uint64_t first, uint64_t n, void *host,
                              moe_err *e);
typedef int (*ckpt_slice_put)(const ckpt_slice *s, uint64_t first, uint64_t n, const void *host,
                              moe_err *e);

struct ckpt_slice {
    char name[CKPT_NAME_MAX];
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t start, count;
    ckpt_slice_get get; /* NULL in a list only read into */
    ckpt_slice_put put; /* NULL in a list only written */
    void *owner, *base, *base2;
    size_t at;
};

typedef struct {
    ckpt_slice *v;
    int n, cap;
} ckpt_slice_list;

/* Elements of the full tensor. */
static inline uint64_t ckpt_slice_numel(const ckpt_slice *s)
{
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= (uint64_t)s->shape[d];
    return n;
}

static inline int ckpt_slices_add(ckpt_slice_list *l, const ckpt_slice *s, moe_err *e)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        ckpt_slice *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return moe_errf(e, "out of memory listing checkpoint slices");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *s;
    return 0;
}

static inline void ckpt_slices_free(ckpt_slice_list *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

#endif

/* Where a dataset's tokens come from: one part per data.blend entry, or one
 * for data.store or data.files, each opened by the sequence source the
 * registry picks for it (seq_source.h: data.files read into memory, token
 * stores mapped read-only), then its window layout built. */
#include "data_internal.h"

#include <stdlib.h>

int parts_open(moe_dataset *ds, const moe_data_cfg *dc, const char *data_dir, moe_err *e)
{
    int n = dc->n_blend ? dc->n_blend : 1;
    ds->parts = calloc((size_t)n, sizeof *ds->parts);
    if (!ds->parts)
        return moe_errf(e, "out of memory for the dataset");
    ds->n_parts = n;
    for (int i = 0; i < n; i++) {
        data_part *p = &ds->parts[i];
        p->seq_length = ds->seq_length;
        p->val_fraction = ds->val_fraction;
        p->weight = dc->n_blend ? dc->blend[i].weight : 1.0;
        seq_source_spec spec;
        seq_source_spec_for(&spec, dc, dc->n_blend ? i : -1, data_dir);
        p->src = seq_source_pick(&spec);
        int rc = p->src->open(p, &spec, e);
        if (rc == 0)
            layout_plan_holdout(p);
        if (rc < 0 || split_build(&p->train, p, 0, ds->stride, ds->pack, e) < 0 ||
            /* validation windows do not overlap */
            split_build(&p->val, p, 1, ds->seq_length, ds->pack, e) < 0)
            return -1;
        p->src->release_index(p);
        p->order.n = p->train.n_windows;
    }
    return 0;
}

void parts_close(moe_dataset *ds)
{
    for (int i = 0; ds->parts && i < ds->n_parts; i++) {
        data_part *p = &ds->parts[i];
        split_free(&p->train);
        split_free(&p->val);
        order_free(&p->order);
        if (p->src)
            p->src->close(p);
    }
    free(ds->parts);
    ds->parts = NULL;
}

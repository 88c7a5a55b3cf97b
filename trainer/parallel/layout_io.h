/* moekit: moving parameter buffers between a rank's layout (its EP
 * group's share of the experts) and the full layout of one rank holding
 * every expert, in which checkpoints are written whatever EP/DP was. */
#ifndef MOE_LAYOUT_IO_H
#define MOE_LAYOUT_IO_H

#include "../model/model.h"
#include "parallel.h"

/* A parameter table of the same model with all E experts on one rank (no
 * buffers; for weights_write/weights_read). Free with layout_full_free. */
int layout_full_make(moe_model *full, const moe_model *local, moe_err *e);
void layout_full_free(moe_model *full);

/* Collective over the EP group: full_host (full->n_elems) receives every
 * expert of the group from local_host (local->n_elems). */
int layout_gather_full(moe_par *p, const moe_model *local, const moe_model *full,
                       const real *local_host, real *full_host, moe_err *e);
/* Local: this rank's part of a full-layout buffer. */
void layout_slice_local(const moe_model *local, const moe_model *full, const real *full_host,
                        real *local_host);

#endif

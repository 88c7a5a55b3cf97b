/* moekit: a step's collectives on the GPUs.
 *
 * When the ranks met over MPI (host memory) and compute on GPUs, the world,
 * EP and DP groups are made again over NCCL (the id broadcast over the MPI
 * world, the groups split from NCCL's world), so the experts' all-to-all,
 * the distributed optimizer's reduce-scatter and all-gather, the router
 * statistics, the gradient norm, the step's sums and its barriers run GPU to
 * GPU. The MPI groups stay for what lives in host memory (checkpoints). */
#ifndef MOE_DEV_GROUPS_H
#define MOE_DEV_GROUPS_H

#include "parallel.h"

/* d: p's layout with its three groups over NCCL. */
int par_device_groups(moe_par *d, const moe_par *p, moe_err *e);
void par_device_groups_close(moe_par *d);

#endif

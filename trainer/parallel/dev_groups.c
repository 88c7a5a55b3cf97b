/* moekit: the step's groups over NCCL (see dev_groups.h). */
#include "dev_groups.h"

#include <string.h>

#include "../comm/comm_nccl.h"

int par_device_groups(moe_par *d, const moe_par *p, moe_err *e)
{
    *d = *p;
    d->world = d->ep = d->dp = NULL;
    if (comm_nccl_create(&d->world, p->rank, p->size, p->world, e))
        return moe_err_prefix(e, "the world over NCCL");
    /* the same colours and keys as the MPI groups: the same members and ranks */
    if (comm_split(d->world, p->rank / p->ep_size, p->rank, "ep", &d->ep, e) ||
        comm_split(d->world, p->rank % p->ep_size, p->rank, "dp", &d->dp, e)) {
        par_device_groups_close(d);
        return moe_err_prefix(e, "the EP and DP groups over NCCL");
    }
    return 0;
}

void par_device_groups_close(moe_par *d)
{
    comm_destroy(d->dp);
    comm_destroy(d->ep);
    comm_destroy(d->world);
    d->world = d->ep = d->dp = NULL;
}

/* moekit: joining the job's ranks (see parallel.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"
#include "../comm/watchdog.h"

/* -1 when unset, -2 when not a number */
static int env_count(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || v < 0 || v > 1 << 24) ? -2 : (int)v;
}

/* What the launcher promised, to compare with what MPI found. */
static int check_size(const moe_par *p, moe_err *e)
{
    struct { const char *var, *hint; } promised[] = {
        {"MOE_WORLD_SIZE", "the moekit plugin set MOE_WORLD_SIZE"},
        {"OMPI_COMM_WORLD_SIZE", "mpirun started"},
    };
    for (size_t i = 0; i < sizeof promised / sizeof *promised; i++) {
        int n = env_count(promised[i].var);
        if (n == -2)
            return moe_errf(e, "%s='%s' is not a rank count", promised[i].var,
                            getenv(promised[i].var));
        if (n > 0 && n != p->size)
            return moe_errf(e, "%s = %d ranks but MPI sees %d: under srun use --mpi=pmix (Debian's "
                               "Open MPI has no pmi2; the wrong --mpi starts single-rank worlds)",
                            promised[i].hint, n, p->size);
    }
    /* under srun every task is its own step task; under mpirun inside an
     * allocation SLURM_NTASKS describes the allocation, not us */
    int ntasks = env_count("SLURM_NTASKS");
    if (ntasks > 0 && !getenv("OMPI_COMM_WORLD_SIZE") && getenv("SLURM_STEP_ID") &&
        ntasks != p->size)
        return moe_errf(e, "srun started %d tasks (SLURM_NTASKS) but MPI sees %d ranks: use srun "
                           "--mpi=pmix (or MpiDefault=pmix)", ntasks, p->size);
    int want_rank = env_count("MOE_RANK");
    if (want_rank >= 0 && want_rank != p->rank)
        return moe_errf(e, "the moekit plugin placed this task as rank %d (MOE_RANK) but MPI "
                           "numbers it %d: the launcher and the plugin disagree on the order",
                        want_rank, p->rank);
    return 0;
}

static int par_groups(moe_par *p, int local_rank, int ep, int dp, double timeout_s, moe_err *e);

int par_open(moe_par *p, int ep, int dp, double timeout_s, moe_err *e)
{
    return par_open_world(p, NULL, -1, ep, dp, timeout_s, e);
}

int par_open_world(moe_par *p, moe_comm *world, int local_rank, int ep, int dp, double timeout_s,
                   moe_err *e)
{
    memset(p, 0, sizeof *p);
    if (world) {
        p->world = world;
        return par_groups(p, local_rank, ep, dp, timeout_s, e);
    }
    int promised = env_count("MOE_WORLD_SIZE");
    int use_mpi = comm_mpi_launched() || promised > 1;
    if (use_mpi) {
        if (!comm_mpi_built())
            return moe_errf(e, "%s asks for %d ranks, but this moe-train was built without MPI, "
                               "which CPU ranks need: install Open MPI (openmpi-bin, "
                               "libopenmpi-dev) and rebuild",
                            promised > 1 ? "MOE_WORLD_SIZE" : "the MPI launcher",
                            promised > 1 ? promised : env_count("OMPI_COMM_WORLD_SIZE"));
        if (comm_mpi_create(&p->world, e))
            return moe_err_prefix(e, "starting MPI");
    } else if (comm_single_create(&p->world, e)) {
        return -1;
    }
    if (use_mpi && check_size(&(moe_par){.rank = p->world->rank, .size = p->world->size}, e)) {
        par_close(p);
        return -1;
    }
    return par_groups(p, local_rank, ep, dp, timeout_s, e);
}

/* The layout, local rank, EP/DP groups and watchdog over p->world. */
static int par_groups(moe_par *p, int local_rank, int ep, int dp, double timeout_s, moe_err *e)
{
    int rank = p->world->rank, size = p->world->size;
    if (size == 1) {
        ep = 1;
        dp = 1;
    }
    if (par_layout(p, rank, size, ep, dp, e))
        goto fail;
    int lr = local_rank >= 0 ? local_rank : env_count("MOE_LOCAL_RANK");
    if (lr < 0)
        lr = env_count("OMPI_COMM_WORLD_LOCAL_RANK");
    p->local_rank = lr > 0 ? lr : 0;
    if (comm_split(p->world, p->rank / p->ep_size, p->rank, "ep", &p->ep, e) ||
        comm_split(p->world, p->rank % p->ep_size, p->rank, "dp", &p->dp, e))
        goto fail;
    if (p->ep->size != p->ep_size || p->dp->size != p->dp_size) {
        moe_errf(e, "internal: EP/DP groups of %d/%d ranks, expected %d/%d", p->ep->size,
                 p->dp->size, p->ep_size, p->dp_size);
        goto fail;
    }
    if (size > 1 && watchdog_start(timeout_s, p->world, e))
        goto fail;
    return 0;
fail:
    par_close(p);
    return -1;
}

int par_bind(moe_par *p, struct moe_backend *be, moe_err *e)
{
    moe_comm *c[3] = {p->world, p->ep, p->dp};
    for (int i = 0; i < 3; i++)
        if (c[i] && !c[i]->be && comm_bind(c[i], be, e))
            return -1;
    return 0;
}

void par_close(moe_par *p)
{
    watchdog_stop();
    comm_destroy(p->dp);
    comm_destroy(p->ep);
    comm_destroy(p->world);
    p->dp = p->ep = p->world = NULL;
}

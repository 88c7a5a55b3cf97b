/* moekit: the ranks of a training job and their groups.
 *
 * world = EP x DP ranks. The ranks of one expert-parallel group are
 * contiguous (one node, NVLink): EP group g = world ranks [g EP, (g+1) EP),
 * so ep_rank = rank % EP and dp_rank = rank / EP; the DP group of a rank is
 * the ranks with its ep_rank, one per EP group (across nodes). This is the
 * layout the SPANK plugin's verdict and `moe-topo --check` describe.
 *
 * Ranks come from MPI when a launcher started us (mpirun, srun
 * --mpi=pmix); the sizes are checked against what the launcher promised
 * (MOE_WORLD_SIZE from the plugin, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS),
 * because an MPI started under the wrong launcher silently gives N
 * single-rank worlds. GPU ranks started without MPI (plain srun, torchrun)
 * take the world from the launcher's variables and meet over NCCL
 * (par_launch_from_env). Without a launcher the world is one rank. */
#ifndef MOE_PARALLEL_H
#define MOE_PARALLEL_H

#include "../comm/comm.h"

typedef struct {
    moe_comm *world, *ep, *dp;
    int rank, size;          /* world */
    int ep_rank, ep_size;    /* within this rank's EP group */
    int dp_rank, dp_size;    /* within this rank's DP group */
    int local_rank;          /* on this node (MOE_LOCAL_RANK / OMPI_COMM_WORLD_LOCAL_RANK) */
    char layout[160];        /* "EP=2 x DP=2 over 4 ranks (EP groups: ranks 0-1, 2-3)" */
} moe_par;

/* Join the job's ranks and split EP/DP groups. ep: parallel.ep; dp:
 * parallel.dp (0 = world / ep); timeout_s: parallel.timeout_s for the
 * collective watchdog. A world of one rank is always accepted (the caller
 * runs a multi-rank config's math on one rank). */
int par_open(moe_par *p, int ep, int dp, double timeout_s, moe_err *e);
/* The same over a world made elsewhere (NCCL without MPI, below): p owns
 * it from here, and closes it on failure too. local_rank < 0: from the
 * environment. */
int par_open_world(moe_par *p, moe_comm *world, int local_rank, int ep, int dp, double timeout_s,
                   moe_err *e);
/* A launch without MPI (launch_env.c): the world as a launcher's variables
 * give it, for ranks that meet over NCCL alone. */
typedef struct {
    int rank, size, local_rank;
    char source[96];     /* "torchrun (WORLD_SIZE, RANK)": for messages */
    char meet[300];      /* host:port the ranks meet at (NCCL_COMM_ID) */
    char meet_from[64];  /* where that came from: "NCCL_COMM_ID", "MOE_MASTER_ADDR:MOE_MASTER_PORT" */
} moe_launch;
/* The world from the moekit plugin's MOE_WORLD_SIZE / MOE_RANK /
 * MOE_LOCAL_RANK / MOE_MASTER_ADDR / MOE_MASTER_PORT, torchrun's WORLD_SIZE
 * / RANK / LOCAL_RANK / MASTER_ADDR / MASTER_PORT (NCCL meets at
 * MASTER_PORT+1, beside torchrun's store), or an srun step's SLURM_NTASKS /
 * SLURM_PROCID / SLURM_LOCALID (meeting at MOE_MASTER_*), in that order;
 * NCCL_COMM_ID, when set, is where the ranks meet. An MPI launch is never
 * one (MPI wins). Returns 1 with l filled for a world of more than one rank,
 * 0 when this is not such a launch, -1 naming what is missing or conflicting
 * (half of a set, two sets that disagree, no meeting point). */
int par_launch_from_env(moe_launch *l, moe_err *e);
void par_close(moe_par *p);
/* Bind the world, EP and DP groups to the backend whose buffers they carry
 * (comm_bind: their device collectives are ordered against its queue). */
int par_bind(moe_par *p, struct moe_backend *be, moe_err *e);

/* Pure layout arithmetic, for tests and messages: fills ep_rank/dp_rank and
 * the layout string for `rank` of `size`, or fails naming what is wrong. */
int par_layout(moe_par *p, int rank, int size, int ep, int dp, moe_err *e);

#endif

/* moekit: the world of a launch without MPI, read from the launcher's
 * environment (see parallel.h, par_launch_from_env).
 *
 * Three launchers describe a world in variables, each as one set:
 *   the moekit plugin  MOE_WORLD_SIZE, MOE_RANK, MOE_LOCAL_RANK, and
 *                      MOE_MASTER_ADDR / MOE_MASTER_PORT (the step's first node)
 *   torchrun           WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
 *   Slurm (srun step)  SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID
 * The plugin's placement wins over torchrun's, torchrun's over Slurm's (torchrun
 * under srun starts several ranks per Slurm task). A set given in part, or two
 * sets that disagree on the world, is refused: a rank that guessed would train
 * alone or hang in NCCL's bootstrap. The ranks meet at NCCL_COMM_ID when the
 * user set it, else at the launcher's master address. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"

/* -1 unset, -2 not a number in range */
static long env_num(const char *name, long max)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || v < 0 || v > max) ? -2 : v;
}

typedef struct {
    const char *who;                         /* for messages */
    const char *size_var, *rank_var, *local_var;
    long size, rank, local;                  /* -1 unset */
} env_set;

static int read_set(env_set *s, moe_err *e)
{
    const char *vars[3] = {s->size_var, s->rank_var, s->local_var};
    long *vals[3] = {&s->size, &s->rank, &s->local};
    for (int i = 0; i < 3; i++) {
        *vals[i] = env_num(vars[i], 1 << 24);
        if (*vals[i] == -2)
            return moe_errf(e, "%s='%s' (%s) is not a rank number", vars[i], getenv(vars[i]),
                            s->who);
    }
    if ((s->size < 0) != (s->rank < 0)) {
        const char *have = s->size >= 0 ? s->size_var : s->rank_var;
        const char *miss = s->size >= 0 ? s->rank_var : s->size_var;
        return moe_errf(e, "%s=%s is set but %s is not: %s sets both on every rank (a rank "
                           "without the other could only train alone); set %s or unset %s",
                        have, getenv(have), miss, s->who, miss, have);
    }
    if (s->size == 0)
        return moe_errf(e, "%s=0 (%s) is not a world size", s->size_var, s->who);
    if (s->size > 0 && s->rank >= s->size)
        return moe_errf(e, "%s=%ld is outside the world of %s=%ld ranks (%s)", s->rank_var,
                        s->rank, s->size_var, s->size, s->who);
    return 0;
}

/* An srun step's task (not the batch script, where SLURM_NTASKS describes
 * the job and this process is one of none of its ranks). */
static int in_srun_step(void)
{
    long step = env_num("SLURM_STEP_ID", 4294967200L); /* batch/extern steps are 0xfffffffe/d */
    return step >= 0;
}

static int agree(const env_set *a, const env_set *b, int compare_rank, moe_err *e)
{
    if (a->size < 0 || b->size < 0)
        return 0;
    if (a->size != b->size)
        return moe_errf(e, "%s=%ld (%s) but %s=%ld (%s): the launchers disagree on the world "
                           "size; unset the stale one",
                        a->size_var, a->size, a->who, b->size_var, b->size, b->who);
    if (compare_rank && a->rank != b->rank)
        return moe_errf(e, "%s=%ld (%s) but %s=%ld (%s): the launchers disagree on this "
                           "task's rank; unset the stale one",
                        a->rank_var, a->rank, a->who, b->rank_var, b->rank, b->who);
    return 0;
}

/* Where the ranks meet: NCCL_COMM_ID as given, else the chosen launcher's
 * master address. */
static int meeting_point(moe_launch *l, const env_set *chosen, int torch, moe_err *e)
{
    const char *id = getenv("NCCL_COMM_ID");
    if (id && *id) {
        if (!strchr(id, ':'))
            return moe_errf(e, "NCCL_COMM_ID='%s' is not host:port", id);
        snprintf(l->meet, sizeof l->meet, "%s", id);
        snprintf(l->meet_from, sizeof l->meet_from, "NCCL_COMM_ID");
        return 0;
    }
    const char *addr_var = torch ? "MASTER_ADDR" : "MOE_MASTER_ADDR";
    const char *port_var = torch ? "MASTER_PORT" : "MOE_MASTER_PORT";
    const char *addr = getenv(addr_var);
    long port = env_num(port_var, 65535);
    if (!addr || !*addr || port < 0)
        return moe_errf(e,
                        "%s gives a world of %ld ranks but not where they meet: %s is %s; "
                        "set %s and %s (%s), or NCCL_COMM_ID=host:port on every rank, or "
                        "launch over MPI (srun --mpi=pmix, mpirun)",
                        chosen->who, chosen->size,
                        (!addr || !*addr) ? addr_var : port_var,
                        port == -2 ? "not a port number" : "unset", addr_var, port_var,
                        torch ? "torchrun sets them" : "the moekit plugin sets them");
    /* torchrun's rendezvous store listens on MASTER_PORT: NCCL takes the next */
    if (torch && port == 65535)
        return moe_errf(e, "MASTER_PORT=65535 leaves no port for NCCL (moekit meets at "
                           "MASTER_PORT+1, beside torchrun's store)");
    snprintf(l->meet, sizeof l->meet, "%s:%ld", addr, torch ? port + 1 : port);
    snprintf(l->meet_from, sizeof l->meet_from, "%s:%s%s", addr_var, port_var,
             torch ? "+1" : "");
    return 0;
}

int par_launch_from_env(moe_launch *l, moe_err *e)
{
    memset(l, 0, sizeof *l);
    l->rank = l->size = l->local_rank = -1;
    if (comm_mpi_launched())
        return 0; /* MPI numbers the ranks (check_size compares the rest) */
    env_set plugin = {"the moekit plugin", "MOE_WORLD_SIZE", "MOE_RANK", "MOE_LOCAL_RANK",
                      -1, -1, -1};
    env_set torch = {"torchrun", "WORLD_SIZE", "RANK", "LOCAL_RANK", -1, -1, -1};
    env_set slurm = {"srun", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", -1, -1, -1};
    if (read_set(&plugin, e) || read_set(&torch, e))
        return -1;
    if (in_srun_step() && read_set(&slurm, e))
        return -1;
    /* the plugin numbers srun's tasks (it may reorder them, never recount) */
    if (agree(&plugin, &torch, 1, e) || agree(&plugin, &slurm, 0, e))
        return -1;
    const env_set *chosen = plugin.size >= 0 ? &plugin : torch.size >= 0 ? &torch : &slurm;
    if (chosen->size <= 1)
        return 0; /* one rank (or no launcher): nothing to join */
    l->rank = (int)chosen->rank;
    l->size = (int)chosen->size;
    l->local_rank = chosen->local >= 0 ? (int)chosen->local
                    : slurm.local >= 0 ? (int)slurm.local
                                       : l->rank;
    snprintf(l->source, sizeof l->source, "%s (%s, %s)", chosen->who, chosen->size_var,
             chosen->rank_var);
    if (meeting_point(l, chosen, chosen == &torch, e))
        return -1;
    return 1;
}

/* moekit: ranks as threads of one process, over their backends' memory.
 *
 * Each rank is a thread with its own backend (on a GPU: its own stream on
 * the same device, which NCCL refuses to share between ranks). A collective
 * is a rendezvous: every member syncs its backend, posts its buffers and
 * waits at a barrier; then each rank fills its own outputs by copying from
 * the peers' buffers (backend copy op: device to device, or host) and summing
 * them (backend accumulate op for reals; doubles and int64 are host
 * scalars), syncs, and meets the others at a second barrier before anyone
 * touches a buffer again. Sums run in rank order on every rank, so all
 * ranks see the same bits. For tests: the device-resident training path on
 * one GPU, and (cpu backend) the same logic in CI. */
#ifndef MOE_COMM_LOCAL_H
#define MOE_COMM_LOCAL_H

#include "../backend/backend.h"
#include "comm.h"

typedef struct moe_local_world moe_local_world;

/* The shared side of `size` ranks; each thread then takes its communicator. */
int comm_local_world_create(moe_local_world **out, int size, moe_err *e);
/* Free it after every rank's communicators are destroyed. */
void comm_local_world_destroy(moe_local_world *w);
/* Rank `rank`'s world communicator; be: the rank's backend (kept, not owned). */
int comm_local_create(moe_comm **out, moe_local_world *w, int rank, moe_backend *be, moe_err *e);

#endif

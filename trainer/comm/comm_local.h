/* moekit: ranks as threads of one process, over their backends' memory:
 * the test harness of the multi-rank step, as asynchronous as NCCL.
 *
 * Each rank is a thread with its own backend (on a GPU: its own stream on
 * the same device, which NCCL refuses to share between ranks) and its own
 * communicator queue (a second non-blocking stream). A collective on device
 * buffers keeps comm.h's stream order and nothing more: every member
 * records an event on its compute stream and posts its buffers (a host
 * rendezvous exchanges pointers, never device progress); each rank's queue
 * waits for every member's event, copies and sums from the peers' buffers,
 * and records a done event; comm_wait queues the compute stream behind every
 * member's done event (its outputs written, and the peers' reads of its
 * inputs over). No host synchronisation surrounds a collective.
 *
 * Delays (comm_local_world_set_delays): before each collective a spin of
 * random length goes on the producer's compute stream, and another on the
 * communicator's queue before its copies, so a kernel that is not ordered
 * before a collective, or a read of its output not ordered after it, sees
 * the wrong values instead of winning a race by luck. Two test switches
 * (comm_local_order) take half of the order away, and the harness must then
 * fail: without the input events (the host waits for each collective, as
 * moekit did before the stream order: producers still running on a GPU),
 * and without the output waits (comm_wait returns at once: a reader ahead
 * of the copies, on any backend with queues).
 *
 * On the cpu backend, cpu_backend_enable_queues gives each rank's queue a
 * thread of its own, so its copies run later than asked, as a GPU's do.
 * Host buffers (counts, scalars) and backends without queues are done
 * synchronously between two rendezvous. Sums run in rank order on
 * every rank, so all ranks see the same bits. A rendezvous that waits longer
 * than the world's timeout aborts every group of the world, naming the
 * collective, the group and the ranks that did not arrive. */
#ifndef MOE_COMM_LOCAL_H
#define MOE_COMM_LOCAL_H

#include "../backend/backend.h"
#include "comm.h"

typedef struct moe_local_world moe_local_world;

/* The shared side of `size` ranks; each thread then takes its communicator. */
int comm_local_world_create(moe_local_world **out, int size, moe_err *e);
/* Free it after every rank's communicators are destroyed. */
void comm_local_world_destroy(moe_local_world *w);
/* Rank `rank`'s world communicator; be: the rank's backend (kept, not owned,
 * and bound: comm.h's stream order is against its queue). */
int comm_local_create(moe_comm **out, moe_local_world *w, int rank, moe_backend *be, moe_err *e);

typedef enum {
    COMM_LOCAL_ORDERED,         /* comm.h's stream order, both ways */
    COMM_LOCAL_NO_INPUT_ORDER,  /* no input events; a host wait after each collective */
    COMM_LOCAL_NO_OUTPUT_ORDER, /* input events, but comm_wait orders nothing */
} comm_local_order;

/* Set before the ranks start. Delays of up to max_us microseconds, drawn
 * from `seed` (0 us: none); how long a rendezvous may wait (default 600 s);
 * the order the collectives keep (the test switches above). */
void comm_local_world_set_delays(moe_local_world *w, uint64_t seed, double max_us);
void comm_local_world_set_timeout(moe_local_world *w, double seconds);
void comm_local_world_set_order(moe_local_world *w, comm_local_order order);

#endif

/* moekit: ranks as threads of one process (see comm_local.h). */
#include "comm_local.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/host_wait.h"

/* events kept per rank: collective seq of a group uses slot seq % RING of
 * the group's lane, so the groups of a rank (world, ep, dp) never share a
 * slot and one never waits on another's collectives by accident (which
 * would hide a missing wait). A wait on a slot recorded again since waits
 * for a later collective of the same queue, never for too little (and never
 * in a cycle: see l_wait); past LANES groups, lanes repeat (more waiting,
 * never less). The ring is longer than the collectives a group keeps in
 * flight (the optimizer's weight all-gathers, one a bucket, waited for layer
 * by layer in the next forward): a wait that lands on a reused slot waits
 * for the later collective, and the overlap would be gone. */
enum { RING = 256, LANES = 8, SLOTS = RING * LANES, MAX_LOCAL = 64 };

typedef struct lgroup lgroup;

/* What one member posts for a collective. */
typedef struct {
    const void *send;
    void *recv;
    const size_t *counts, *displs; /* allgatherv, reduce_scatter; alltoallv: send side */
    const size_t *rcounts;         /* alltoallv: receive side, to check */
    int color, key;                /* split */
    lgroup *made;                  /* split: the group its leader made */
} slot;

struct moe_local_world {
    pthread_mutex_t mu;
    pthread_cond_t left; /* a rank is done with its events (teardown) */
    int leaving;
    lgroup *groups[MAX_LOCAL * 4]; /* every live group, to abort them together */
    int n_groups;
    int aborted;
    char why[MOE_ERR_LEN];
    double timeout_s, delay_us;
    uint64_t seed;
    comm_local_order order;
    /* per world rank: its events, for every group it is in */
    moe_event *ready[MAX_LOCAL][SLOTS], *done[MAX_LOCAL][SLOTS];
    int next_lane;
    int size;
    lgroup *root;
};

struct lgroup {
    moe_local_world *w;
    int size;
    int lane; /* its events' lane (above) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned gen;
    unsigned char *here; /* [size]: who reached the rendezvous in progress */
    int refs;
    int *world_ranks;    /* [size] */
    slot *slots;
};

typedef struct {
    lgroup *g;
    moe_backend *be;
    moe_queue *q;        /* this communicator's queue on this rank (each group its own, as
                            each NCCL communicator has its stream); NULL: synchronous */
    int wrank;           /* world rank */
    uint64_t rng;
    const char *op;      /* the collective in progress, for messages */
    uint64_t dev_seq[RING]; /* seq of the device collectives in flight (done recorded) */
    char *name;          /* the group's name (comm's) */
} lctx;

static lctx *LX(moe_comm *c) { return c->impl_ctx; }

/* ---- groups and their rendezvous ---- */

static int group_new(lgroup **out, moe_local_world *w, int size, const int *world_ranks,
                     moe_err *e)
{
    lgroup *g = calloc(1, sizeof *g);
    if (!g || !(g->slots = calloc((size_t)size, sizeof *g->slots)) ||
        !(g->here = calloc((size_t)size, 1)) ||
        !(g->world_ranks = malloc(sizeof(int) * (size_t)size))) {
        if (g) {
            free(g->slots);
            free(g->here);
        }
        free(g);
        return moe_errf(e, "out of memory for an in-process group of %d ranks", size);
    }
    g->w = w;
    g->size = size;
    g->refs = size;
    for (int r = 0; r < size; r++)
        g->world_ranks[r] = world_ranks ? world_ranks[r] : r;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    pthread_mutex_lock(&w->mu);
    int full = w->n_groups == (int)(sizeof w->groups / sizeof *w->groups);
    if (!full) {
        w->groups[w->n_groups++] = g;
        g->lane = w->next_lane++ % LANES;
    }
    pthread_mutex_unlock(&w->mu);
    if (full) {
        free(g->slots), free(g->here), free(g->world_ranks), free(g);
        return moe_errf(e, "too many in-process groups");
    }
    *out = g;
    return 0;
}

static void group_unref(lgroup *g)
{
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (!last)
        return;
    moe_local_world *w = g->w;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->n_groups; i++)
        if (w->groups[i] == g) {
            w->groups[i] = w->groups[--w->n_groups];
            break;
        }
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->slots);
    free(g->here);
    free(g->world_ranks);
    free(g);
}

/* Every group of the world stops: its waiters return the reason. */
static void world_abort(moe_local_world *w, const char *why)
{
    pthread_mutex_lock(&w->mu);
    if (!w->aborted) {
        w->aborted = 1;
        snprintf(w->why, sizeof w->why, "%s", why);
    }
    for (int i = 0; i < w->n_groups; i++) {
        pthread_mutex_lock(&w->groups[i]->mu);
        pthread_cond_broadcast(&w->groups[i]->cv);
        pthread_mutex_unlock(&w->groups[i]->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

static int aborted(moe_local_world *w, moe_err *e)
{
    pthread_mutex_lock(&w->mu);
    int a = w->aborted;
    if (a)
        moe_errf(e, "the in-process ranks were aborted: %s", w->why);
    pthread_mutex_unlock(&w->mu);
    return a;
}

/* All members meet; one that waits past the timeout aborts the world,
 * naming those that did not come. */
static int rendezvous(moe_comm *c, moe_err *e)
{
    lctx *x = LX(c);
    lgroup *g = x->g;
    moe_local_world *w = g->w;
    if (aborted(w, e))
        return -1;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)w->timeout_s;
    dl.tv_nsec += (long)((w->timeout_s - (double)(time_t)w->timeout_s) * 1e9);
    if (dl.tv_nsec >= 1000000000L)
        dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&g->mu);
    unsigned gen = g->gen;
    g->here[c->rank] = 1;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        memset(g->here, 0, (size_t)g->size);
        g->gen++;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return 0;
    }
    int timed_out = 0;
    while (g->gen == gen && !w->aborted && !timed_out)
        timed_out = pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT;
    int done = g->gen != gen;
    char missing[256] = "";
    size_t len = 0;
    if (!done && timed_out)
        for (int r = 0; r < g->size && len + 16 < sizeof missing; r++)
            if (!g->here[r])
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                        len ? ", " : "", g->world_ranks[r]);
    pthread_mutex_unlock(&g->mu);
    if (done)
        return 0;
    if (timed_out) {
        char why[MOE_ERR_LEN];
        snprintf(why, sizeof why,
                 "rank %d: %s on the %s group has waited %g s for rank%s %s, which did not "
                 "arrive: a peer rank died or hangs",
                 x->wrank, x->op ? x->op : "a collective", c->name, w->timeout_s,
                 strchr(missing, ',') ? "s" : "", missing);
        world_abort(w, why);
        return moe_errf(e, "waited %g s for rank%s %s, which did not arrive: a peer rank died "
                           "or hangs; every group of the in-process ranks is aborted",
                        w->timeout_s, strchr(missing, ',') ? "s" : "", missing);
    }
    return aborted(w, e) ? -1 : moe_errf(e, "internal: rendezvous woke without a reason");
}

/* ---- stream order on a device ---- */

static int device_path(moe_comm *c) { return LX(c)->q != NULL; }

static int slot_of(moe_comm *c, uint64_t seq)
{
    return LX(c)->g->lane * RING + (int)(seq % RING);
}

static double draw_us(lctx *x)
{
    double max = x->g->w->delay_us;
    if (!(max > 0))
        return 0;
    x->rng ^= x->rng << 13, x->rng ^= x->rng >> 7, x->rng ^= x->rng << 17;
    return max * (double)(x->rng >> 11) / 9007199254740992.0;
}

/* Member side, before the rendezvous: the producers stretched, then this
 * rank's "inputs ready" event behind them. */
static int post_ready(moe_comm *c, moe_err *e)
{
    lctx *x = LX(c);
    moe_backend *be = x->be;
    moe_local_world *w = x->g->w;
    if (be->spin(be, NULL, draw_us(x), e))
        return -1;
    return w->order == COMM_LOCAL_NO_INPUT_ORDER
               ? 0
               : be->event_record(be, NULL, w->ready[x->wrank][slot_of(c, c->issued)], e);
}

/* This rank's queue, after the rendezvous: behind every member's inputs,
 * stretched, then the copies queue on it. */
static int queue_after_inputs(moe_comm *c, moe_err *e)
{
    lctx *x = LX(c);
    moe_backend *be = x->be;
    moe_local_world *w = x->g->w;
    if (w->order != COMM_LOCAL_NO_INPUT_ORDER)
        for (int r = 0; r < c->size; r++)
            if (be->event_wait(be, x->q, w->ready[x->g->world_ranks[r]][slot_of(c, c->issued)],
                               e))
                return -1;
    return be->spin(be, x->q, draw_us(x), e);
}

static int record_done(moe_comm *c, moe_err *e)
{
    lctx *x = LX(c);
    moe_backend *be = x->be;
    moe_event *done = x->g->w->done[x->wrank][slot_of(c, c->issued)];
    if (be->event_record(be, x->q, done, e))
        return -1;
    x->dev_seq[c->issued % RING] = c->issued;
    /* A cpu backend's queues run copies only once waited for (cpu_queue.c),
     * so a reader queued after the start sees the outputs as they were. A GPU
     * may also finish them at once: with delays on, one collective in four
     * (by the seeded draw) runs its copies now, before the caller queues
     * anything after it, and a kernel queued after the start that reads or
     * writes the outputs without waiting meets the new values. Not more: a
     * queue runs in order, so an eager collective also finishes every one
     * queued before it, which a missing wait then reads in time. */
    if (!be->device_memory && x->g->w->delay_us > 0 && draw_us(x) > 0.75 * x->g->w->delay_us &&
        be->event_wait(be, NULL, done, e))
        return -1;
    if (x->g->w->order == COMM_LOCAL_NO_INPUT_ORDER) { /* moekit before the stream order */
        host_wait_begin("collective (unordered)");
        int rc = be->event_wait(be, NULL, done, e) ||
                 be->sync(be, e);
        host_wait_end();
        return rc ? -1 : 0;
    }
    return 0;
}

/* The compute stream behind every member's copies of collective seq: its
 * own outputs, and the peers' reads of its inputs. A member that already
 * recorded the slot again for seq + RING did so after its own later
 * rendezvous, which this rank joined before calling this: no cycle. */
static int l_wait(moe_comm *c, uint64_t seq, moe_err *e)
{
    lctx *x = LX(c);
    /* the slot's newest device collective is older than seq: seq was a host
     * collective, done on return; newer: wait for that one (never too little) */
    if (!device_path(c) || !seq || x->g->w->order != COMM_LOCAL_ORDERED ||
        x->dev_seq[seq % RING] < seq)
        return 0;
    for (int r = 0; r < c->size; r++)
        if (x->be->event_wait(x->be, NULL, x->g->w->done[x->g->world_ranks[r]][slot_of(c, seq)],
                              e))
            return -1;
    return 0;
}

/* ---- the collectives ---- */

/* A collective's two halves: post and meet; then (after this rank's copies)
 * meet again, so no member reposts before every peer has read its slot. */
static int enter(moe_comm *c, const char *op, slot s, int on_device, moe_err *e)
{
    lctx *x = LX(c);
    x->op = op;
    if (on_device) {
        if (post_ready(c, e))
            return -1;
    } else if (!device_path(c) && x->be->sync(x->be, e)) { /* cpu: ops are done already */
        return -1;
    }
    x->g->slots[c->rank] = s;
    return rendezvous(c, e);
}

static int leave(moe_comm *c, int rc, int on_device, moe_err *e)
{
    moe_err se = {{0}};
    int failed = rc;
    if (!failed && on_device)
        failed = record_done(c, &se);
    if (rendezvous(c, failed ? &se : e) && !failed)
        return -1;
    /* every other collective (by the seeded draw), the work this rank queues
     * next stretched by one to two delays: the producers of its next
     * collective's inputs, which a peer that skips this rank's "ready" then
     * reads before they are written (the peer's own stretch before its copies
     * is at most one delay). Queued after the rendezvous: before it, the wait
     * for the slowest member (its copies, its host) would use the stretch up.
     * Host collectives too: the expert exchange's producer (the permute) is
     * queued right after the host exchange of route counts, with the stream
     * drained by the host's read of the router's choices, so only a stretch
     * queued here makes it late. Not every time: a stretched consumer would
     * also hide a missing wait on a collective's outputs. Only where compute
     * runs behind the host (a device backend): the cpu backend's compute is
     * this thread, whose sleep would stretch nothing but the host. */
    double max_us = LX(c)->g->w->delay_us;
    if (!failed && LX(c)->be->device_memory && draw_us(LX(c)) > max_us / 2)
        failed = LX(c)->be->spin(LX(c)->be, NULL, max_us + draw_us(LX(c)), &se);
    if (failed && !rc)
        *e = se;
    return failed ? -1 : 0;
}

static const slot *peer(moe_comm *c, int r) { return &LX(c)->g->slots[r]; }

/* device buffers go through this rank's queue, host ones are copied here */
static int copy(moe_comm *c, int on_device, void *dst, const void *src, size_t bytes, moe_err *e)
{
    if (!bytes || dst == src)
        return 0;
    lctx *x = LX(c);
    if (on_device)
        return x->be->copy_on(x->be, x->q, dst, src, bytes, e);
    if (!device_path(c))
        return x->be->copy(x->be, dst, src, bytes, e);
    memcpy(dst, src, bytes);
    return 0;
}

/* dst += src: reals in backend memory, doubles and int64 on the host */
static int accumulate(moe_comm *c, int on_device, void *dst, const void *src, size_t n,
                      moe_dtype t, moe_err *e)
{
    lctx *x = LX(c);
    switch (t) {
    case MOE_DT_REAL:
        if (on_device)
            return x->be->accumulate_on(x->be, x->q, dst, src, n, e);
        if (device_path(c)) {
            for (size_t i = 0; i < n; i++)
                ((real *)dst)[i] += ((const real *)src)[i];
        } else {
            x->be->accumulate(x->be, dst, src, n);
        }
        break;
    case MOE_DT_DOUBLE:
        for (size_t i = 0; i < n; i++)
            ((double *)dst)[i] += ((const double *)src)[i];
        break;
    case MOE_DT_INT64:
        for (size_t i = 0; i < n; i++)
            ((int64_t *)dst)[i] += ((const int64_t *)src)[i];
        break;
    case MOE_DT_BYTE:
        break;
    }
    return 0;
}

/* device memory of this rank's backend (then its queue carries the copies) */
static int on_dev(moe_comm *c, const void *p)
{
    lctx *x = LX(c);
    return device_path(c) && p && x->be->owns && x->be->owns(x->be, p);
}

/* Host buffers (the trainer's scalars): summed in rank order into a
 * private copy first, since every member's buffer is also an input. */
static int l_allreduce(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e)
{
    if (t == MOE_DT_BYTE || on_dev(c, buf))
        return moe_errf(e, "the in-process communicator sums host doubles, int64 and reals in "
                           "all-reduces");
    size_t bytes = n * moe_dtype_size(t);
    char *sum = malloc(bytes ? bytes : 1);
    if (!sum)
        return moe_errf(e, "out of memory");
    if (enter(c, "allreduce", (slot){.send = buf}, 0, e)) {
        free(sum);
        return -1;
    }
    memcpy(sum, peer(c, 0)->send, bytes);
    for (int r = 1; r < c->size; r++)
        accumulate(c, 0, sum, peer(c, r)->send, n, t, e);
    int rc = rendezvous(c, e); /* every sum taken before any buffer changes */
    if (!rc)
        memcpy(buf, sum, bytes);
    free(sum);
    return rc ? -1 : leave(c, 0, 0, e);
}

static int l_allgatherv(moe_comm *c, const void *send, size_t n, void *recv, const size_t *counts,
                        const size_t *displs, moe_dtype t, moe_err *e)
{
    (void)n;
    size_t es = moe_dtype_size(t);
    int dev = on_dev(c, recv);
    if (enter(c, "allgatherv", (slot){.send = send}, dev, e))
        return -1;
    int rc = dev ? queue_after_inputs(c, e) : 0;
    for (int r = 0; r < c->size && !rc; r++)
        rc = copy(c, dev, (char *)recv + displs[r] * es, peer(c, r)->send, counts[r] * es, e);
    return leave(c, rc, dev, e);
}

static int l_allgather(moe_comm *c, const void *send, void *recv, size_t n, moe_dtype t,
                       moe_err *e)
{
    size_t S = (size_t)c->size, counts[S], displs[S];
    for (size_t r = 0; r < S; r++) {
        counts[r] = n;
        displs[r] = r * n;
    }
    return l_allgatherv(c, send, n, recv, counts, displs, t, e);
}

static int l_alltoallv(moe_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                       void *recv, const size_t *rcounts, const size_t *rdispls, moe_err *e)
{
    int dev = on_dev(c, recv) || on_dev(c, send);
    if (enter(c, "alltoallv",
              (slot){.send = send, .counts = scounts, .displs = sdispls, .rcounts = rcounts}, dev,
              e))
        return -1;
    int rc = dev ? queue_after_inputs(c, e) : 0, me = c->rank;
    for (int r = 0; r < c->size && !rc; r++) {
        const slot *p = peer(c, r);
        if (p->counts[me] != rcounts[r])
            rc = moe_errf(e, "alltoallv: rank %d sends %zu bytes, rank %d expects %zu", r,
                          p->counts[me], me, rcounts[r]);
        else
            rc = copy(c, dev, (char *)recv + rdispls[r], (const char *)p->send + p->displs[me],
                      rcounts[r], e);
    }
    return leave(c, rc, dev, e);
}

static int l_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e)
{
    int dev = on_dev(c, buf);
    if (enter(c, "broadcast", (slot){.send = buf}, dev, e))
        return -1;
    int rc = dev ? queue_after_inputs(c, e) : 0;
    if (!rc && c->rank != root)
        rc = copy(c, dev, buf, peer(c, root)->send, bytes, e);
    return leave(c, rc, dev, e);
}

static int l_barrier(moe_comm *c, moe_err *e)
{
    if (enter(c, "barrier", (slot){0}, 0, e))
        return -1;
    return leave(c, 0, 0, e);
}

/* This rank's block: its own part, then every peer's in rank order. Peers
 * read only their own blocks of the others' buffers, so in place is safe. */
static int l_reduce_scatter(moe_comm *c, const void *send, void *recv, const size_t *counts,
                            moe_dtype t, moe_err *e)
{
    size_t es = moe_dtype_size(t), off = 0;
    for (int r = 0; r < c->rank; r++)
        off += counts[r];
    int dev = on_dev(c, recv);
    if (enter(c, "reduce_scatter", (slot){.send = send}, dev, e))
        return -1;
    size_t n = counts[c->rank];
    int rc = dev ? queue_after_inputs(c, e) : 0;
    if (!rc)
        rc = copy(c, dev, recv, (const char *)send + off * es, n * es, e);
    for (int r = 0; r < c->size && !rc; r++)
        if (r != c->rank)
            rc = accumulate(c, dev, recv, (const char *)peer(c, r)->send + off * es, n, t, e);
    return leave(c, rc, dev, e);
}

static const moe_comm_ops LOCAL_OPS;

static int wrap(moe_comm **out, lgroup *g, int rank, int wrank, moe_backend *be, moe_queue *q,
                const char *name, moe_err *e)
{
    moe_comm *c = calloc(1, sizeof *c);
    lctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return moe_errf(e, "out of memory");
    }
    x->g = g;
    x->be = be;
    x->q = q;
    x->wrank = wrank;
    x->rng = (g->w->seed ^ 0x9E3779B97F4A7C15ull) * (2 * (uint64_t)wrank + 1) + 1;
    if (comm_init_fields(c, "local", name, rank, g->size, g->world_ranks, &LOCAL_OPS, x, e)) {
        free(c);
        free(x);
        return -1;
    }
    /* a cpu backend with queues is carried as a GPU's memory is: the
     * dispatcher then queues its exchanges on it, never staging them */
    c->device_memory = be->device_memory || q;
    c->be = be;
    *out = c;
    return 0;
}

/* Members of each color ordered by (key, rank); the first one makes the
 * group and the others pick it up from its slot. */
static int l_split(moe_comm *c, int color, int key, const char *name, moe_comm **out, moe_err *e)
{
    lgroup *g = LX(c)->g;
    if (enter(c, "split", (slot){.color = color, .key = key}, 0, e))
        return -1;
    int S = c->size, n = 0, my = 0, ranks[S], wr[S];
    for (int r = 0; r < S; r++)
        if (g->slots[r].color == color)
            ranks[n++] = r;
    for (int i = 1; i < n; i++) /* insertion sort by (key, rank) */
        for (int j = i; j > 0; j--) {
            const slot *a = &g->slots[ranks[j - 1]], *b = &g->slots[ranks[j]];
            if (a->key < b->key || (a->key == b->key && ranks[j - 1] < ranks[j]))
                break;
            int t = ranks[j];
            ranks[j] = ranks[j - 1];
            ranks[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        if (ranks[i] == c->rank)
            my = i;
        wr[i] = c->world_ranks[ranks[i]];
    }
    int rc = 0;
    lgroup *made = NULL;
    if (my == 0)
        rc = group_new(&made, g->w, n, wr, e);
    g->slots[c->rank].made = made;
    if (rendezvous(c, e))
        return -1;
    made = g->slots[ranks[0]].made;
    if (rendezvous(c, e)) /* every member has read its leader's slot */
        return -1;
    if (!made) /* the leader failed: its members say so too */
        return rc ? -1 : moe_errf(e, "split of the %s group: the new group's first rank failed",
                                  c->name);
    /* a queue of its own: a wait on this group's collectives never runs
     * another group's queued copies, which a missing wait there would read */
    moe_backend *be = LX(c)->be;
    moe_queue *q = NULL;
    if (LX(c)->q && !(q = be->queue_create(be, e))) {
        group_unref(made);
        return moe_err_prefix(e, "the %s group's queue", name);
    }
    if (wrap(out, made, my, LX(c)->wrank, be, q, name, e)) {
        if (q)
            be->queue_destroy(be, q);
        group_unref(made);
        return -1;
    }
    return 0;
}

static void l_abort_comm(moe_comm *c)
{
    world_abort(LX(c)->g->w, "the watchdog aborted them");
}

static void l_abort(moe_comm *c, int code)
{
    l_abort_comm(c);
    fprintf(stderr, "moe-train: aborting the in-process ranks\n");
    exit(code);
}

/* Peers wait on this rank's done events after their rendezvous (l_wait), so
 * its events go only once every rank is tearing down, or the world was
 * aborted; past the timeout they are left allocated instead (a few bytes),
 * never freed under a peer that may still wait on them. 1: safe to free. */
static int all_leaving(moe_local_world *w)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)w->timeout_s + 1;
    pthread_mutex_lock(&w->mu);
    w->leaving++;
    pthread_cond_broadcast(&w->left);
    int timed_out = 0;
    while (w->leaving < w->size && !w->aborted && !timed_out)
        timed_out = pthread_cond_timedwait(&w->left, &w->mu, &dl) == ETIMEDOUT;
    int safe = !timed_out || w->leaving == w->size;
    pthread_mutex_unlock(&w->mu);
    return safe;
}

/* every communicator owns its queue; the world's also the rank's events */
static void l_destroy(moe_comm *c)
{
    lctx *x = LX(c);
    if (x->q && x->g != x->g->w->root) { /* a split: its copies done, then its queue */
        x->be->sync(x->be, &(moe_err){{0}});
        x->be->queue_destroy(x->be, x->q);
    }
    if (x->q && x->g == x->g->w->root) {
        moe_local_world *w = x->g->w;
        x->be->sync(x->be, &(moe_err){{0}});
        if (!all_leaving(w)) {
            fprintf(stderr, "moe-train: in-process rank %d: a peer did not tear down within "
                            "%g s; its events are left allocated\n",
                    x->wrank, w->timeout_s);
            x->be->queue_destroy(x->be, x->q);
            goto out;
        }
        x->be->queue_destroy(x->be, x->q);
        for (int i = 0; i < SLOTS; i++) {
            x->be->event_destroy(x->be, w->ready[x->wrank][i]);
            x->be->event_destroy(x->be, w->done[x->wrank][i]);
            w->ready[x->wrank][i] = w->done[x->wrank][i] = NULL;
        }
    }
out:
    group_unref(x->g);
    free(c->impl_ctx);
    comm_free_fields(c);
    free(c);
}

static const moe_comm_ops LOCAL_OPS = {
    .allreduce_sum = l_allreduce,
    .allgather = l_allgather,
    .allgatherv = l_allgatherv,
    .alltoallv = l_alltoallv,
    .broadcast = l_broadcast,
    .barrier = l_barrier,
    .reduce_scatter_sum = l_reduce_scatter,
    .split = l_split,
    .abort_job = l_abort,
    .destroy = l_destroy,
    .wait = l_wait,
    .abort_comm = l_abort_comm,
};

int comm_local_world_create(moe_local_world **out, int size, moe_err *e)
{
    if (size < 1)
        return moe_errf(e, "an in-process world needs at least one rank, not %d", size);
    if (size > MAX_LOCAL)
        return moe_errf(e, "an in-process world of %d ranks: at most %d", size, MAX_LOCAL);
    moe_local_world *w = calloc(1, sizeof *w);
    if (!w)
        return moe_errf(e, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->left, NULL);
    w->size = size;
    w->timeout_s = 600;
    if (group_new(&w->root, w, size, NULL, e)) {
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

void comm_local_world_set_delays(moe_local_world *w, uint64_t seed, double max_us)
{
    w->seed = seed;
    w->delay_us = max_us > 0 ? max_us : 0;
}

void comm_local_world_set_timeout(moe_local_world *w, double seconds)
{
    if (seconds > 0)
        w->timeout_s = seconds;
}

void comm_local_world_set_order(moe_local_world *w, comm_local_order order) { w->order = order; }

void comm_local_world_destroy(moe_local_world *w)
{
    if (!w)
        return;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->left);
    free(w);
}

int comm_local_create(moe_comm **out, moe_local_world *w, int rank, moe_backend *be, moe_err *e)
{
    if (rank < 0 || rank >= w->size)
        return moe_errf(e, "rank %d of an in-process world of %d", rank, w->size);
    if (!be->copy || !be->accumulate)
        return moe_errf(e, "the %s backend has no copy/accumulate for in-process ranks", be->name);
    moe_queue *q = NULL;
    if (be->queue_create) { /* a device: the rank's queue and its events */
        if (!(q = be->queue_create(be, e)))
            return moe_err_prefix(e, "rank %d's communicator queue", rank);
        for (int i = 0; i < SLOTS; i++)
            if (!(w->ready[rank][i] = be->event_create(be, e)) ||
                !(w->done[rank][i] = be->event_create(be, e)))
                return moe_err_prefix(e, "rank %d's communicator events", rank);
    }
    return wrap(out, w->root, rank, rank, be, q, "world", e);
}

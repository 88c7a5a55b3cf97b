/* moekit: ranks as threads of one process (see comm_local.h). */
#include "comm_local.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one member posts for a collective. */
typedef struct {
    const void *send;
    void *recv;
    const size_t *counts, *displs; /* allgatherv, reduce_scatter; alltoallv: send side */
    const size_t *rcounts;         /* alltoallv: receive side, to check */
    int color, key;                /* split */
    struct lgroup *made;           /* split: the group its leader made */
} slot;

typedef struct lgroup {
    int size;
    pthread_barrier_t bar;
    pthread_mutex_t mu;
    int refs;
    slot *slots;
} lgroup;

struct moe_local_world {
    lgroup *g;
};

typedef struct {
    lgroup *g;
    moe_backend *be;
} lctx;

static lctx *LX(moe_comm *c) { return c->impl_ctx; }

static int group_new(lgroup **out, int size, moe_err *e)
{
    lgroup *g = calloc(1, sizeof *g);
    if (!g || !(g->slots = calloc((size_t)size, sizeof *g->slots))) {
        free(g);
        return moe_errf(e, "out of memory for an in-process group of %d ranks", size);
    }
    g->size = size;
    g->refs = size;
    int rc = pthread_barrier_init(&g->bar, NULL, (unsigned)size);
    if (rc) {
        free(g->slots);
        free(g);
        return moe_err_errno(e, rc, "pthread_barrier_init");
    }
    pthread_mutex_init(&g->mu, NULL);
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
    pthread_barrier_destroy(&g->bar);
    pthread_mutex_destroy(&g->mu);
    free(g->slots);
    free(g);
}

/* Post this rank's buffers once its backend's work on them is done, and
 * wait for every member. */
static int enter(moe_comm *c, slot s, moe_err *e)
{
    lctx *x = LX(c);
    if (x->be->sync(x->be, e))
        return -1;
    x->g->slots[c->rank] = s;
    pthread_barrier_wait(&x->g->bar);
    return 0;
}

/* This rank's copies and sums done; nobody touches a buffer before all are. */
static int leave(moe_comm *c, int rc, moe_err *e)
{
    lctx *x = LX(c);
    moe_err se = {{0}};
    int synced = x->be->sync(x->be, &se);
    pthread_barrier_wait(&x->g->bar);
    if (!rc && synced)
        *e = se;
    return rc || synced ? -1 : 0;
}

static const slot *peer(moe_comm *c, int r) { return &LX(c)->g->slots[r]; }

static int copy(moe_comm *c, void *dst, const void *src, size_t bytes, moe_err *e)
{
    if (!bytes || dst == src)
        return 0;
    return LX(c)->be->copy(LX(c)->be, dst, src, bytes, e);
}

/* dst += src: reals in backend memory, doubles and int64 on the host */
static void accumulate(moe_comm *c, void *dst, const void *src, size_t n, moe_dtype t)
{
    switch (t) {
    case MOE_DT_REAL:
        LX(c)->be->accumulate(LX(c)->be, dst, src, n);
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
}

/* Host buffers only (the trainer's scalars): summed in rank order into a
 * private copy first, since every member's buffer is also an input. */
static int l_allreduce(moe_comm *c, void *buf, size_t n, moe_dtype t, moe_err *e)
{
    if (t == MOE_DT_BYTE || (t == MOE_DT_REAL && strcmp(LX(c)->be->name, "cpu")))
        return moe_errf(e, "the in-process communicator sums doubles and int64 on the host "
                           "(and reals on the cpu backend) in all-reduces");
    size_t bytes = n * moe_dtype_size(t);
    char *sum = malloc(bytes ? bytes : 1);
    if (!sum)
        return moe_errf(e, "out of memory");
    if (enter(c, (slot){.send = buf}, e)) {
        free(sum);
        return -1;
    }
    memcpy(sum, peer(c, 0)->send, bytes);
    for (int r = 1; r < c->size; r++)
        accumulate(c, sum, peer(c, r)->send, n, t == MOE_DT_REAL ? MOE_DT_REAL : t);
    pthread_barrier_wait(&LX(c)->g->bar); /* every sum taken before any buffer changes */
    memcpy(buf, sum, bytes);
    free(sum);
    return leave(c, 0, e);
}

static int l_allgatherv(moe_comm *c, const void *send, size_t n, void *recv, const size_t *counts,
                        const size_t *displs, moe_dtype t, moe_err *e)
{
    size_t es = moe_dtype_size(t);
    if (enter(c, (slot){.send = send}, e))
        return -1;
    int rc = 0;
    for (int r = 0; r < c->size && !rc; r++)
        rc = copy(c, (char *)recv + displs[r] * es, peer(c, r)->send, counts[r] * es, e);
    return leave(c, rc, e);
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
    if (enter(c, (slot){.send = send, .counts = scounts, .displs = sdispls, .rcounts = rcounts}, e))
        return -1;
    int rc = 0, me = c->rank;
    for (int r = 0; r < c->size && !rc; r++) {
        const slot *p = peer(c, r);
        if (p->counts[me] != rcounts[r])
            rc = moe_errf(e, "alltoallv: rank %d sends %zu bytes, rank %d expects %zu", r,
                          p->counts[me], me, rcounts[r]);
        else
            rc = copy(c, (char *)recv + rdispls[r], (const char *)p->send + p->displs[me],
                      rcounts[r], e);
    }
    return leave(c, rc, e);
}

static int l_broadcast(moe_comm *c, void *buf, size_t bytes, int root, moe_err *e)
{
    if (enter(c, (slot){.send = buf}, e))
        return -1;
    int rc = c->rank == root ? 0 : copy(c, buf, peer(c, root)->send, bytes, e);
    return leave(c, rc, e);
}

static int l_barrier(moe_comm *c, moe_err *e)
{
    if (enter(c, (slot){0}, e))
        return -1;
    return leave(c, 0, e);
}

/* This rank's block: its own part, then every peer's in rank order. Peers
 * read only their own blocks of the others' buffers, so in place is safe. */
static int l_reduce_scatter(moe_comm *c, const void *send, void *recv, const size_t *counts,
                            moe_dtype t, moe_err *e)
{
    size_t es = moe_dtype_size(t), off = 0;
    for (int r = 0; r < c->rank; r++)
        off += counts[r];
    if (enter(c, (slot){.send = send}, e))
        return -1;
    size_t n = counts[c->rank];
    int rc = copy(c, recv, (const char *)send + off * es, n * es, e);
    for (int r = 0; r < c->size && !rc; r++)
        if (r != c->rank)
            accumulate(c, recv, (const char *)peer(c, r)->send + off * es, n, t);
    return leave(c, rc, e);
}

static const moe_comm_ops LOCAL_OPS;

static int wrap(moe_comm **out, lgroup *g, int rank, const int *world_ranks, moe_backend *be,
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
    if (comm_init_fields(c, "local", name, rank, g->size, world_ranks, &LOCAL_OPS, x, e)) {
        free(c);
        free(x);
        return -1;
    }
    c->device_memory = be->device_memory;
    *out = c;
    return 0;
}

/* Members of each color ordered by (key, rank); the first one makes the
 * group and the others pick it up from its slot. */
static int l_split(moe_comm *c, int color, int key, const char *name, moe_comm **out, moe_err *e)
{
    lgroup *g = LX(c)->g;
    if (enter(c, (slot){.color = color, .key = key}, e))
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
        rc = group_new(&made, n, e);
    g->slots[c->rank].made = made;
    pthread_barrier_wait(&g->bar);
    made = g->slots[ranks[0]].made;
    pthread_barrier_wait(&g->bar); /* every member has read its leader's slot */
    if (!made) /* the leader failed: its members say so too */
        return rc ? -1 : moe_errf(e, "split of the %s group: the new group's first rank failed",
                                  c->name);
    if (wrap(out, made, my, wr, LX(c)->be, name, e)) {
        group_unref(made);
        return -1;
    }
    return 0;
}

static void l_abort(moe_comm *c, int code)
{
    (void)c;
    fprintf(stderr, "moe-train: aborting the in-process ranks\n");
    exit(code);
}

static void l_destroy(moe_comm *c)
{
    group_unref(LX(c)->g);
    free(c->impl_ctx);
    comm_free_fields(c);
    free(c);
}

static const moe_comm_ops LOCAL_OPS = {l_allreduce, l_allgather, l_allgatherv, l_alltoallv,
                                       l_broadcast, l_barrier,   l_reduce_scatter, l_split,
                                       l_abort,     l_destroy};

int comm_local_world_create(moe_local_world **out, int size, moe_err *e)
{
    if (size < 1)
        return moe_errf(e, "an in-process world needs at least one rank, not %d", size);
    moe_local_world *w = calloc(1, sizeof *w);
    if (!w)
        return moe_errf(e, "out of memory");
    if (group_new(&w->g, size, e)) {
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

void comm_local_world_destroy(moe_local_world *w)
{
    if (!w)
        return;
    free(w);
}

int comm_local_create(moe_comm **out, moe_local_world *w, int rank, moe_backend *be, moe_err *e)
{
    if (rank < 0 || rank >= w->g->size)
        return moe_errf(e, "rank %d of an in-process world of %d", rank, w->g->size);
    if (!be->copy || !be->accumulate)
        return moe_errf(e, "the %s backend has no copy/accumulate for in-process ranks", be->name);
    return wrap(out, w->g, rank, NULL, be, "world", e);
}

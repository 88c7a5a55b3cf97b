/* moekit CPU reference backend: queues and events for the in-process ranks.
 *
 * The CPU backend computes on the calling thread, so its own queue is done
 * when an op returns. The in-process communicator needs more to be a fair
 * test of comm.h's stream order on CI machines: a second queue whose copies
 * and sums run LATER than the caller asks for them, as a communicator
 * stream's do. Each queue made here is a worker thread with a FIFO of tasks
 * (copy, accumulate, spin, record an event, wait for an event); an event
 * counts its records and its completions, and a wait targets the newest
 * record at the time it is queued, as cudaStreamWaitEvent does. A wait on
 * the backend's own queue (q NULL) blocks the calling thread, a named host
 * wait, since that queue is the thread.
 *
 * Freeing backend memory or syncing drains every queue first, as cudaFree
 * and cudaDeviceSynchronize do: a copy still queued never writes into
 * memory handed back. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../../common/host_wait.h"
#include "cpu_internal.h"

struct moe_event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, completed;
};

enum { TASK_COPY, TASK_ACCUMULATE, TASK_SPIN, TASK_RECORD, TASK_WAIT };

typedef struct task {
    int kind;
    void *dst;
    const void *src;
    size_t n; /* bytes (copy) or elements (accumulate) */
    double us;
    moe_event *ev;
    uint64_t gen;
    struct task *next;
} task;

struct moe_queue {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a task queued, one done, or stop */
    task *head, *tail;
    uint64_t queued, done;
    int stop;
    moe_queue *next; /* the backend's list */
};

struct cpu_queues {
    pthread_mutex_t mu;
    moe_queue *list;
};

static cpu_queues *QUEUES(moe_backend *be) { return ((cpu_ctx *)be->ctx)->queues; }

static void sleep_us(double us)
{
    if (!(us > 0))
        return;
    struct timespec t = {(time_t)(us / 1e6), (long)((us - 1e6 * (double)(time_t)(us / 1e6)) * 1e3)};
    nanosleep(&t, NULL);
}

static void event_complete(moe_event *ev, uint64_t gen)
{
    pthread_mutex_lock(&ev->mu);
    if (gen > ev->completed)
        ev->completed = gen;
    pthread_cond_broadcast(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
}

static void event_block(moe_event *ev, uint64_t gen)
{
    pthread_mutex_lock(&ev->mu);
    while (ev->completed < gen)
        pthread_cond_wait(&ev->cv, &ev->mu);
    pthread_mutex_unlock(&ev->mu);
}

static void run_task(const task *t)
{
    switch (t->kind) {
    case TASK_COPY:
        memmove(t->dst, t->src, t->n);
        break;
    case TASK_ACCUMULATE:
        for (size_t i = 0; i < t->n; i++)
            ((real *)t->dst)[i] += ((const real *)t->src)[i];
        break;
    case TASK_SPIN:
        sleep_us(t->us);
        break;
    case TASK_RECORD:
        event_complete(t->ev, t->gen);
        break;
    case TASK_WAIT:
        event_block(t->ev, t->gen);
        break;
    }
}

static void *worker(void *arg)
{
    moe_queue *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head)
            break; /* stopped and drained */
        task *t = q->head;
        q->head = t->next;
        if (!q->head)
            q->tail = NULL;
        pthread_mutex_unlock(&q->mu);
        run_task(t);
        free(t);
        pthread_mutex_lock(&q->mu);
        q->done++;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static int push(moe_queue *q, task t, moe_err *e)
{
    task *p = malloc(sizeof *p);
    if (!p)
        return moe_errf(e, "cpu queue: out of memory for a task");
    *p = t;
    p->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    q->queued++;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

static void drain(moe_queue *q)
{
    pthread_mutex_lock(&q->mu);
    while (q->done < q->queued)
        pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void cpu_queues_drain(moe_backend *be)
{
    cpu_queues *qs = QUEUES(be);
    if (!qs)
        return;
    pthread_mutex_lock(&qs->mu);
    for (moe_queue *q = qs->list; q; q = q->next)
        drain(q);
    pthread_mutex_unlock(&qs->mu);
}

static moe_queue *q_create(moe_backend *be, moe_err *e)
{
    cpu_queues *qs = QUEUES(be);
    moe_queue *q = calloc(1, sizeof *q);
    if (!q) {
        moe_errf(e, "cpu queue: out of memory");
        return NULL;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    int rc = pthread_create(&q->thread, NULL, worker, q);
    if (rc) {
        moe_errf(e, "cpu queue: cannot start its thread: %s", strerror(rc));
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        free(q);
        return NULL;
    }
    pthread_mutex_lock(&qs->mu);
    q->next = qs->list;
    qs->list = q;
    pthread_mutex_unlock(&qs->mu);
    return q;
}

static void q_destroy(moe_backend *be, moe_queue *q)
{
    if (!q)
        return;
    cpu_queues *qs = QUEUES(be);
    pthread_mutex_lock(&qs->mu);
    for (moe_queue **p = &qs->list; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    pthread_mutex_unlock(&qs->mu);
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL); /* it runs what was queued, then stops */
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}

static moe_event *ev_create(moe_backend *be, moe_err *e)
{
    (void)be;
    moe_event *ev = calloc(1, sizeof *ev);
    if (!ev) {
        moe_errf(e, "cpu event: out of memory");
        return NULL;
    }
    pthread_mutex_init(&ev->mu, NULL);
    pthread_cond_init(&ev->cv, NULL);
    return ev;
}

static void ev_destroy(moe_backend *be, moe_event *ev)
{
    (void)be;
    if (!ev)
        return;
    pthread_mutex_destroy(&ev->mu);
    pthread_cond_destroy(&ev->cv);
    free(ev);
}

static uint64_t next_record(moe_event *ev)
{
    pthread_mutex_lock(&ev->mu);
    uint64_t gen = ++ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    return gen;
}

static int ev_record(moe_backend *be, moe_queue *q, moe_event *ev, moe_err *e)
{
    (void)be;
    uint64_t gen = next_record(ev);
    if (!q) { /* the calling thread's work is done already */
        event_complete(ev, gen);
        return 0;
    }
    return push(q, (task){.kind = TASK_RECORD, .ev = ev, .gen = gen}, e);
}

static int ev_wait(moe_backend *be, moe_queue *q, moe_event *ev, moe_err *e)
{
    (void)be;
    pthread_mutex_lock(&ev->mu);
    uint64_t gen = ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    if (q)
        return push(q, (task){.kind = TASK_WAIT, .ev = ev, .gen = gen}, e);
    host_wait_begin("queue event");
    event_block(ev, gen);
    host_wait_end();
    return 0;
}

static int q_copy(moe_backend *be, moe_queue *q, void *dst, const void *src, size_t bytes,
                  moe_err *e)
{
    if (!q)
        return be->copy(be, dst, src, bytes, e);
    return bytes && dst != src
               ? push(q, (task){.kind = TASK_COPY, .dst = dst, .src = src, .n = bytes}, e)
               : 0;
}

static int q_accumulate(moe_backend *be, moe_queue *q, real *dst, const real *src, size_t n,
                        moe_err *e)
{
    if (!q) {
        be->accumulate(be, dst, src, n);
        return 0;
    }
    return n ? push(q, (task){.kind = TASK_ACCUMULATE, .dst = dst, .src = src, .n = n}, e) : 0;
}

static int q_spin(moe_backend *be, moe_queue *q, double us, moe_err *e)
{
    (void)be;
    if (!(us > 0))
        return 0;
    if (!q) {
        sleep_us(us);
        return 0;
    }
    return push(q, (task){.kind = TASK_SPIN, .us = us}, e);
}

static int q_owns(moe_backend *be, const void *p)
{
    return p && alloc_ledger_holds(&((cpu_ctx *)be->ctx)->ledger, p);
}

int cpu_backend_enable_queues(moe_backend *be, moe_err *e)
{
    cpu_ctx *c = be->ctx;
    if (c->queues)
        return 0;
    if (!(c->queues = calloc(1, sizeof *c->queues)))
        return moe_errf(e, "cpu backend: out of memory for its queues");
    pthread_mutex_init(&c->queues->mu, NULL);
    be->queue_create = q_create;
    be->queue_destroy = q_destroy;
    be->event_create = ev_create;
    be->event_destroy = ev_destroy;
    be->event_record = ev_record;
    be->event_wait = ev_wait;
    be->copy_on = q_copy;
    be->accumulate_on = q_accumulate;
    be->owns = q_owns;
    be->spin = q_spin;
    return 0;
}

void cpu_queues_free(moe_backend *be)
{
    cpu_ctx *c = be->ctx;
    if (!c->queues)
        return;
    while (c->queues->list)
        q_destroy(be, c->queues->list);
    pthread_mutex_destroy(&c->queues->mu);
    free(c->queues);
    c->queues = NULL;
}

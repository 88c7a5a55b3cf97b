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
 * memory handed back.
 *
 * Lazy: a queue's worker runs its tasks only once something asks for them
 * (a host or queue wait on an event recorded there, a drain) or after a
 * grace of CPU_QUEUE_GRACE_US. A GPU may run a copy late by any amount; a
 * worker that ran at once would finish most copies before a careless reader
 * looked, and a missing wait would pass by luck. Here it almost never does:
 * the reader sees the buffer as it was, for the whole grace. Tasks the grace
 * ran are counted (cpu_queues_unwaited): work queued long before its wait
 * (a gradient bucket's reduce-scatter on oversubscribed cores) runs so too. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../../common/host_wait.h"
#include "cpu_internal.h"

enum { CPU_QUEUE_GRACE_US = 50000 };

struct moe_event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, completed;
    moe_queue *q; /* where the newest record was queued (NULL: the calling thread) */
    uint64_t q_task; /* and its number there: a wait asks for the tasks up to it */
};

static atomic_ullong unwaited_tasks; /* run by the grace, nobody having asked */

enum { TASK_COPY, TASK_ACCUMULATE, TASK_SPIN, TASK_RECORD, TASK_WAIT };

typedef struct task {
    int kind;
    void *dst;
    const void *src;
    size_t n; /* bytes (copy) or elements (accumulate) */
    double us;
    moe_event *ev;
    uint64_t gen;
    struct timespec queued_at;
    struct task *next;
} task;

struct moe_queue {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a task queued, one done, or stop */
    task *head, *tail;
    uint64_t queued, done;
    uint64_t wanted; /* tasks asked for: the worker runs up to here, or by the grace */
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

/* q's tasks up to number `upto` are wanted now. */
static void demand(moe_queue *q, uint64_t upto)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    if (upto > q->wanted)
        q->wanted = upto;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static void event_block(moe_event *ev, uint64_t gen)
{
    pthread_mutex_lock(&ev->mu);
    moe_queue *q = ev->completed < gen ? ev->q : NULL;
    uint64_t upto = ev->q_task;
    pthread_mutex_unlock(&ev->mu);
    demand(q, upto); /* its record is queued already (ev_record queues it under ev->mu) */
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

/* The head task's grace ends at (its queueing + the grace). */
static struct timespec grace_end(const task *t)
{
    struct timespec d = t->queued_at;
    long ns = d.tv_nsec + (long)CPU_QUEUE_GRACE_US * 1000L;
    d.tv_sec += ns / 1000000000L;
    d.tv_nsec = ns % 1000000000L;
    return d;
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
        /* lazy: the head runs once asked for, on stop, or after its grace */
        int by_grace = 0;
        while (q->done >= q->wanted && !q->stop) {
            struct timespec until = grace_end(q->head);
            if (pthread_cond_timedwait(&q->cv, &q->mu, &until) == ETIMEDOUT) {
                by_grace = q->done >= q->wanted && !q->stop;
                break;
            }
        }
        if (by_grace)
            atomic_fetch_add(&unwaited_tasks, 1);
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

static int push_numbered(moe_queue *q, task t, uint64_t *number, moe_err *e)
{
    task *p = malloc(sizeof *p);
    if (!p)
        return moe_errf(e, "cpu queue: out of memory for a task");
    *p = t;
    p->next = NULL;
    clock_gettime(CLOCK_REALTIME, &p->queued_at);
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    q->queued++;
    if (number)
        *number = q->queued;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

static int push(moe_queue *q, task t, moe_err *e) { return push_numbered(q, t, NULL, e); }

static void drain(moe_queue *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t all = q->queued;
    pthread_mutex_unlock(&q->mu);
    demand(q, all);
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
    if (!q) { /* the calling thread's work is done already */
        event_complete(ev, next_record(ev));
        return 0;
    }
    /* the generation and its task together: a waiter that sees the one finds the other */
    pthread_mutex_lock(&ev->mu);
    uint64_t gen = ++ev->recorded;
    ev->q = q;
    int rc = push_numbered(q, (task){.kind = TASK_RECORD, .ev = ev, .gen = gen}, &ev->q_task, e);
    pthread_mutex_unlock(&ev->mu);
    return rc;
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

uint64_t cpu_queues_unwaited(void) { return atomic_load(&unwaited_tasks); }

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

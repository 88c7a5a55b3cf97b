/* moekit: the collective watchdog (see watchdog.h). */
#include "watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/host_wait.h"

/* One thread's wait in progress (a rank, or a rank that is a thread). */
typedef struct wd_rec {
    struct wd_rec *next;
    int active, by_host_wait;
    const moe_comm *c; /* the collective waited in, or NULL in a host wait */
    const char *op;    /* its operation, or the host wait's name */
    double since, extra, next_extra;
    unsigned long seq;           /* collectives entered on this thread: names the one that hung */
    const moe_comm *last_c;      /* the collective started last (a host wait is stuck behind it) */
    const char *last_op;
} wd_rec;

enum { MAX_TRACKED = 256 };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    pthread_once_t key_once;
    pthread_key_t key;
    int running, stop;
    double timeout_s;
    moe_comm *world;
    wd_rec *recs;
    moe_comm *tracked[MAX_TRACKED];
    int n_tracked;
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
        .key_once = PTHREAD_ONCE_INIT};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void rec_free(void *p)
{
    pthread_mutex_lock(&wd.mu);
    for (wd_rec **r = &wd.recs; *r; r = &(*r)->next)
        if (*r == p) {
            *r = ((wd_rec *)p)->next;
            break;
        }
    pthread_mutex_unlock(&wd.mu);
    free(p);
}

static void make_key(void) { pthread_key_create(&wd.key, rec_free); }

/* this thread's record, made on first use; NULL only out of memory */
static wd_rec *self(void)
{
    pthread_once(&wd.key_once, make_key);
    wd_rec *r = pthread_getspecific(wd.key);
    if (r)
        return r;
    if (!(r = calloc(1, sizeof *r)))
        return NULL;
    pthread_setspecific(wd.key, r);
    pthread_mutex_lock(&wd.mu);
    r->next = wd.recs;
    wd.recs = r;
    pthread_mutex_unlock(&wd.mu);
    return r;
}

/* the peers of c, world ranks, as "1, 2, 3" */
static void peers_of(const moe_comm *c, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (int r = 0; r < c->size && len + 16 < cap; r++)
        if (r != c->rank)
            len += (size_t)snprintf(out + len, cap - len, "%s%d", len ? ", " : "",
                                    c->world_ranks ? c->world_ranks[r] : r);
}

static int me_of(const moe_comm *c) { return c->world_ranks ? c->world_ranks[c->rank] : c->rank; }

/* Called with wd.mu held: every communicator aborted, then the job ended. */
static void abort_all(void)
{
    for (int i = 0; i < wd.n_tracked; i++)
        if (wd.tracked[i]->ops->abort_comm)
            wd.tracked[i]->ops->abort_comm(wd.tracked[i]);
    fprintf(stderr, "moe-train: aborted %d communicator%s of this rank; ending the job\n",
            wd.n_tracked, wd.n_tracked == 1 ? "" : "s");
    fflush(stderr);
    if (wd.world)
        wd.world->ops->abort_job(wd.world, 1);
}

static void report_wait(const wd_rec *r)
{
    char peers[256];
    double waited = now_s() - r->since;
    if (r->c) {
        peers_of(r->c, peers, sizeof peers);
        fprintf(stderr,
                "moe-train: rank %d: %s on the %s group (collective #%lu) has waited %.1f s for "
                "rank%s %s, more than parallel.timeout_s = %g: a peer rank died or hangs; "
                "aborting the job\n",
                me_of(r->c), r->op, r->c->name, r->seq, waited, r->c->size > 2 ? "s" : "", peers,
                wd.timeout_s);
    } else if (r->last_c) {
        peers_of(r->last_c, peers, sizeof peers);
        fprintf(stderr,
                "moe-train: rank %d: waiting for the device (%s) for %.1f s, more than "
                "parallel.timeout_s = %g, behind %s on the %s group (collective #%lu), which "
                "waits for rank%s %s: a peer rank died or hangs; aborting the job\n",
                me_of(r->last_c), r->op, waited, wd.timeout_s, r->last_op, r->last_c->name,
                r->seq, r->last_c->size > 2 ? "s" : "", peers);
    } else {
        fprintf(stderr,
                "moe-train: waiting for the device (%s) for %.1f s, more than "
                "parallel.timeout_s = %g, with no collective queued: the device hangs; "
                "aborting the job\n",
                r->op, waited, wd.timeout_s);
    }
    fflush(stderr);
}

static void *watch(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wd.mu);
    while (!wd.stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000; /* checks five times a second */
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&wd.cv, &wd.mu, &ts);
        if (wd.stop)
            break;
        double t = now_s();
        for (wd_rec *r = wd.recs; r; r = r->next)
            if (r->active && t - r->since > wd.timeout_s + r->extra) {
                report_wait(r);
                r->active = 0; /* abort_job returned (single-rank world): do not repeat */
                abort_all();
            }
        for (int i = 0; i < wd.n_tracked; i++) {
            moe_comm *c = wd.tracked[i];
            moe_err e = {{0}};
            if (c->size > 1 && c->ops->async_error && c->ops->async_error(c, &e)) {
                char peers[256];
                peers_of(c, peers, sizeof peers);
                fprintf(stderr,
                        "moe-train: rank %d: the %s group (ranks %s besides this one) failed "
                        "after %s (collective #%llu): %s; aborting the job\n",
                        me_of(c), c->name, peers, c->last_op ? c->last_op : "its start",
                        (unsigned long long)c->issued, e.msg);
                abort_all();
                break;
            }
        }
    }
    pthread_mutex_unlock(&wd.mu);
    return NULL;
}

/* host waits (common/host_wait.h) are watched like collectives, unless a
 * collective of this thread is already being watched around them */
static void on_host_wait(const char *what, int begin)
{
    wd_rec *r = self();
    if (!r)
        return;
    pthread_mutex_lock(&wd.mu);
    if (begin && !r->active) {
        r->active = r->by_host_wait = 1;
        r->c = NULL;
        r->op = what;
        r->since = now_s();
        r->extra = 0;
    } else if (!begin && r->by_host_wait) {
        r->active = r->by_host_wait = 0;
    }
    pthread_mutex_unlock(&wd.mu);
}

int watchdog_start(double timeout_s, moe_comm *world, moe_err *e)
{
    if (!(timeout_s > 0))
        return moe_errf(e, "parallel.timeout_s = %g: must be > 0", timeout_s);
    pthread_mutex_lock(&wd.mu);
    wd.timeout_s = timeout_s;
    wd.world = world;
    int started = wd.running;
    wd.stop = 0;
    pthread_mutex_unlock(&wd.mu);
    if (started)
        return 0;
    int rc = pthread_create(&wd.thread, NULL, watch, NULL);
    if (rc)
        return moe_err_errno(e, rc, "cannot start the collective watchdog thread");
    wd.running = 1;
    host_wait_set_hook(on_host_wait);
    return 0;
}

void watchdog_stop(void)
{
    if (!wd.running)
        return;
    host_wait_set_hook(NULL);
    pthread_mutex_lock(&wd.mu);
    wd.stop = 1;
    pthread_cond_signal(&wd.cv);
    pthread_mutex_unlock(&wd.mu);
    pthread_join(wd.thread, NULL);
    wd.running = 0;
    pthread_mutex_lock(&wd.mu);
    for (wd_rec *r = wd.recs; r; r = r->next)
        r->active = 0;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_enter(const moe_comm *c, const char *op)
{
    if (!wd.running || c->size < 2)
        return;
    wd_rec *r = self();
    if (!r)
        return;
    pthread_mutex_lock(&wd.mu);
    r->active = 1;
    r->by_host_wait = 0;
    r->c = r->last_c = c;
    r->op = r->last_op = op;
    r->since = now_s();
    r->extra = r->next_extra;
    r->next_extra = 0;
    r->seq++;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_allow(double seconds)
{
    wd_rec *r = self();
    if (!r)
        return;
    pthread_mutex_lock(&wd.mu);
    r->next_extra = seconds > 0 ? seconds : 0;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_leave(void)
{
    if (!wd.running)
        return;
    wd_rec *r = self();
    if (!r)
        return;
    pthread_mutex_lock(&wd.mu);
    if (!r->by_host_wait)
        r->active = 0;
    r->c = NULL;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_track(moe_comm *c)
{
    pthread_mutex_lock(&wd.mu);
    if (wd.n_tracked < MAX_TRACKED)
        wd.tracked[wd.n_tracked++] = c;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_untrack(moe_comm *c)
{
    pthread_mutex_lock(&wd.mu);
    for (int i = 0; i < wd.n_tracked; i++)
        if (wd.tracked[i] == c) {
            wd.tracked[i] = wd.tracked[--wd.n_tracked];
            break;
        }
    if (wd.world == c)
        wd.world = NULL;
    pthread_mutex_unlock(&wd.mu);
}

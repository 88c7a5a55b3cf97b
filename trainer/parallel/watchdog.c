/* moekit: the collective watchdog (see watchdog.h). */
#include "watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int running, stop;
    double timeout_s;
    moe_comm *world;
    /* the collective in progress */
    const moe_comm *c;
    const char *op;
    double since;
    double extra, next_extra; /* allowance of the collective in progress / of the next one */
    unsigned long seq; /* collectives entered so far: names the one that hung */
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void report_and_abort(void)
{
    const moe_comm *c = wd.c;
    char peers[256] = "";
    size_t len = 0;
    for (int r = 0; r < c->size && len + 16 < sizeof peers; r++) {
        if (r == c->rank)
            continue;
        len += (size_t)snprintf(peers + len, sizeof peers - len, "%s%d", len ? ", " : "",
                                c->world_ranks ? c->world_ranks[r] : r);
    }
    int me = c->world_ranks ? c->world_ranks[c->rank] : c->rank;
    fprintf(stderr,
            "moe-train: rank %d: %s on the %s group (collective #%lu) has waited %.1f s for "
            "rank%s %s, more than parallel.timeout_s = %g: a peer rank died or hangs; "
            "aborting the job\n",
            me, wd.op, c->name, wd.seq, now_s() - wd.since, c->size > 2 ? "s" : "", peers,
            wd.timeout_s);
    fflush(stderr);
    wd.world->ops->abort_job(wd.world, 1);
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
        if (!wd.stop && wd.c && now_s() - wd.since > wd.timeout_s + wd.extra) {
            report_and_abort();
            wd.c = NULL; /* abort_job returned (single-rank world): do not repeat */
        }
    }
    pthread_mutex_unlock(&wd.mu);
    return NULL;
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
    return 0;
}

void watchdog_stop(void)
{
    if (!wd.running)
        return;
    pthread_mutex_lock(&wd.mu);
    wd.stop = 1;
    pthread_cond_signal(&wd.cv);
    pthread_mutex_unlock(&wd.mu);
    pthread_join(wd.thread, NULL);
    wd.running = 0;
    wd.c = NULL;
}

void watchdog_enter(const moe_comm *c, const char *op)
{
    if (!wd.running || c->size < 2)
        return;
    pthread_mutex_lock(&wd.mu);
    wd.c = c;
    wd.op = op;
    wd.since = now_s();
    wd.extra = wd.next_extra;
    wd.next_extra = 0;
    wd.seq++;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_allow(double seconds)
{
    pthread_mutex_lock(&wd.mu);
    wd.next_extra = seconds > 0 ? seconds : 0;
    pthread_mutex_unlock(&wd.mu);
}

void watchdog_leave(void)
{
    if (!wd.running)
        return;
    pthread_mutex_lock(&wd.mu);
    wd.c = NULL;
    pthread_mutex_unlock(&wd.mu);
}

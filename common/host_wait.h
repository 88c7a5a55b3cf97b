/* moekit: host waits, named, counted and watched.
 *
 * The device runs ahead of the host: kernels and collectives are queued and
 * the host goes on. A host wait is the host blocking until queued device work
 * has finished, because it needs a value the device computed (the route
 * counts a layer's exchange is sized by, the loss, the gradient norm) or
 * because a transfer must land. Every such wait is bracketed by
 * host_wait_begin / host_wait_end with a fixed name ("route counts",
 * "loss"); the counts per name, per thread (a rank, also a rank that is a
 * thread), tell a step's waits in the log and metrics.jsonl, and the
 * watchdog sees a wait that never ends (a collective queued earlier is
 * stuck on a dead peer) the way it sees a stuck collective. */
#ifndef MOE_HOST_WAIT_H
#define MOE_HOST_WAIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { HOST_WAIT_NAMES = 16 };

typedef struct {
    const char *what; /* a string literal: names are compared by pointer first */
    uint64_t n;
} host_wait_count;

/* `what` must outlive the thread (a string literal). Nested waits count
 * once, by the outermost name. */
void host_wait_begin(const char *what);
void host_wait_end(void);

/* This thread's counts since the last reset, most frequent first; returns
 * how many names were filled (at most max). */
int host_wait_counts(host_wait_count *out, int max);
uint64_t host_wait_total(void);
void host_wait_reset(void);

/* One observer for every thread (the watchdog): called with begin = 1 as a
 * wait starts (outermost only) and 0 as it ends. */
typedef void (*host_wait_hook)(const char *what, int begin);
void host_wait_set_hook(host_wait_hook h);

#ifdef __cplusplus
}
#endif

#endif

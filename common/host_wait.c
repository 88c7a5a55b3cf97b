/* moekit: host waits (see host_wait.h). */
#include "host_wait.h"

#include <string.h>

typedef struct {
    host_wait_count c[HOST_WAIT_NAMES];
    int n, depth;
} wait_table;

static _Thread_local wait_table tw;
static host_wait_hook hook;

void host_wait_set_hook(host_wait_hook h) { __atomic_store_n(&hook, h, __ATOMIC_RELEASE); }

static void count(const char *what)
{
    for (int i = 0; i < tw.n; i++)
        if (tw.c[i].what == what || !strcmp(tw.c[i].what, what)) {
            tw.c[i].n++;
            return;
        }
    int i = tw.n < HOST_WAIT_NAMES ? tw.n++ : HOST_WAIT_NAMES - 1; /* the last slot: "other" */
    if (i == HOST_WAIT_NAMES - 1 && tw.c[i].what && strcmp(tw.c[i].what, what))
        what = "other";
    tw.c[i].what = what;
    tw.c[i].n++;
}

void host_wait_begin(const char *what)
{
    if (tw.depth++)
        return;
    count(what);
    host_wait_hook h = __atomic_load_n(&hook, __ATOMIC_ACQUIRE);
    if (h)
        h(what, 1);
}

void host_wait_end(void)
{
    if (tw.depth <= 0 || --tw.depth)
        return;
    host_wait_hook h = __atomic_load_n(&hook, __ATOMIC_ACQUIRE);
    if (h)
        h(NULL, 0);
}

int host_wait_counts(host_wait_count *out, int max)
{
    int n = tw.n < max ? tw.n : max;
    host_wait_count all[HOST_WAIT_NAMES];
    memcpy(all, tw.c, sizeof all);
    for (int i = 1; i < tw.n; i++) /* insertion sort, most frequent first */
        for (int j = i; j > 0 && all[j].n > all[j - 1].n; j--) {
            host_wait_count t = all[j];
            all[j] = all[j - 1];
            all[j - 1] = t;
        }
    memcpy(out, all, sizeof *out * (size_t)n);
    return n;
}

uint64_t host_wait_total(void)
{
    uint64_t t = 0;
    for (int i = 0; i < tw.n; i++)
        t += tw.c[i].n;
    return t;
}

void host_wait_reset(void)
{
    int depth = tw.depth;
    memset(&tw, 0, sizeof tw);
    tw.depth = depth;
}

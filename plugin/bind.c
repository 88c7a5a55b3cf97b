/* moekit SPANK plugin: CPU and memory binding of a task (see bind.h). */
#include "bind.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* From <linux/mempolicy.h>, which glibc does not wrap. */
#define MOE_MPOL_PREFERRED 1

int bind_pick_gpu(int n_visible, int local_rank, int local_world_size)
{
    if (n_visible <= 1 || local_world_size <= 1 || local_rank < 0)
        return -1;
    return local_rank % n_visible;
}

int bind_list_count(const char *list)
{
    if (!list || !*list)
        return 0;
    int n = 1;
    for (const char *p = list; *p; p++)
        n += (*p == ',');
    return n;
}

int bind_list_entry(const char *list, int index, char *out, size_t n, moe_err *e)
{
    const char *p = list ? list : "";
    for (int i = 0; i < index && p; i++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (!p || !*p || *p == ',')
        return moe_errf(e, "device list '%s' has no entry %d", list ? list : "", index);
    size_t len = strcspn(p, ",");
    if (len >= n)
        return moe_errf(e, "device list '%s': entry %d too long", list, index);
    memcpy(out, p, len);
    out[len] = '\0';
    return 0;
}

int bind_parse_cpus(const char *list, cpu_set_t *set, moe_err *e)
{
    CPU_ZERO(set);
    if (!list || !*list)
        return moe_errf(e, "empty CPU list");
    const char *p = list;
    while (*p) {
        char *end;
        errno = 0;
        long lo = strtol(p, &end, 10);
        if (end == p || errno || lo < 0)
            return moe_errf(e, "CPU list '%s': expected a number at '%s'", list, p);
        long hi = lo;
        p = end;
        if (*p == '-') {
            const char *start = ++p;
            hi = strtol(start, &end, 10);
            if (end == start || hi < lo)
                return moe_errf(e, "CPU list '%s': bad range ending at '%s'", list, start);
            p = end;
        }
        if (hi >= CPU_SETSIZE)
            return moe_errf(e, "CPU list '%s': CPU %ld is beyond %d", list, hi, CPU_SETSIZE - 1);
        for (long c = lo; c <= hi; c++)
            CPU_SET((int)c, set);
        if (*p == ',')
            p++;
        else if (*p)
            return moe_errf(e, "CPU list '%s': unexpected '%c'", list, *p);
    }
    return 0;
}

static void note_add(char *note, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note_add(char *note, size_t n, const char *fmt, ...)
{
    size_t used = strlen(note);
    if (used + 2 >= n)
        return;
    if (used)
        note[used++] = ' ', note[used] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note + used, n - used, fmt, ap);
    va_end(ap);
}

static void bind_cpus(const char *gpu_cpus, char *note, size_t n)
{
    moe_err err;
    cpu_set_t want, have;
    if (bind_parse_cpus(gpu_cpus, &want, &err) < 0) {
        note_add(note, n, "CPU binding skipped: %s.", err.msg);
        return;
    }
    if (sched_getaffinity(0, sizeof have, &have) < 0) {
        note_add(note, n, "CPU binding skipped: sched_getaffinity: %s.", strerror(errno));
        return;
    }
    cpu_set_t both;
    CPU_AND(&both, &want, &have);
    if (CPU_COUNT(&both) == 0) {
        note_add(note, n,
                 "CPU binding skipped: the GPU's CPUs %s are none of the %d this task may use.",
                 gpu_cpus, CPU_COUNT(&have));
        return;
    }
    if (sched_setaffinity(0, sizeof both, &both) < 0) {
        note_add(note, n, "CPU binding to %s failed: sched_setaffinity: %s.", gpu_cpus,
                 strerror(errno));
        return;
    }
    note_add(note, n, "Bound to %d CPU(s) of the GPU's %s.", CPU_COUNT(&both), gpu_cpus);
}

static void bind_memory(int numa_node, char *note, size_t n)
{
    unsigned long mask[16] = {0};
    const int bits = (int)(8 * sizeof mask[0]);
    if (numa_node >= (int)(sizeof mask / sizeof mask[0]) * bits) {
        note_add(note, n, "Memory policy skipped: NUMA node %d is out of range.", numa_node);
        return;
    }
    mask[numa_node / bits] = 1ul << (numa_node % bits);
    unsigned long max_node = 8 * sizeof mask;
    if (syscall(SYS_set_mempolicy, MOE_MPOL_PREFERRED, mask, max_node) < 0) {
        note_add(note, n, "Memory policy for NUMA node %d not set: set_mempolicy: %s.", numa_node,
                 strerror(errno));
        return;
    }
    note_add(note, n, "Memory preferred on NUMA node %d.", numa_node);
}

void bind_apply(const char *gpu_cpus, int numa_node, char *note, size_t n)
{
    if (gpu_cpus && *gpu_cpus)
        bind_cpus(gpu_cpus, note, n);
    else
        note_add(note, n, "CPU binding skipped: the GPU's local CPUs are unknown.");
    if (numa_node >= 0)
        bind_memory(numa_node, note, n);
    else
        note_add(note, n, "Memory policy skipped: the GPU's NUMA node is unknown.");
}

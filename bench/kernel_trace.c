/* moekit: a kernel timeline of any CUDA process, for finding where a training
 * step's time goes (the device machines have no Nsight Systems).
 *
 *   LD_PRELOAD=build/bin/libkernel_trace.so MOE_TRACE_AFTER=adamw:4 moe-train ...
 *
 * CUPTI's activity API records every kernel, memcpy and memset with device
 * timestamps. At exit the tracer prints, over a window that opens after the
 * n-th kernel whose name contains MOE_TRACE_AFTER's text (so start-up and
 * warm-up steps stay out) and closes with the last marker (or the last kernel
 * without one):
 * - the time per marker (a step, when the marker is the optimizer's kernel),
 *   how much of it the GPU was busy, and the idle time between activities;
 * - each activity name's total, count and mean, largest first;
 * - the longest idle gaps, with the activities on either side.
 * MOE_TRACE_OUT names a file for the report (default stderr). */
#define _GNU_SOURCE
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t start, end;
    int name;
} span;

static span *spans;
static size_t n_spans, cap_spans;
static char **names;
static int n_names, cap_names;
static int report_registered;

/* names arrive as pointers CUPTI owns: keep one copy of each */
static int intern(const char *s)
{
    if (!s)
        s = "(unnamed)";
    for (int i = n_names - 1; i >= 0; i--)
        if (strcmp(names[i], s) == 0)
            return i;
    if (n_names == cap_names) {
        cap_names = cap_names ? 2 * cap_names : 256;
        names = realloc(names, sizeof *names * (size_t)cap_names);
        if (!names)
            abort();
    }
    names[n_names] = strdup(s);
    return n_names++;
}

static void add_span(uint64_t start, uint64_t end, int name)
{
    if (n_spans == cap_spans) {
        cap_spans = cap_spans ? 2 * cap_spans : 1 << 16;
        spans = realloc(spans, sizeof *spans * cap_spans);
        if (!spans)
            abort();
    }
    spans[n_spans++] = (span){start, end, name};
}

static const char *copy_name(uint8_t kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy DtoD]";
    default: return "[memcpy other]";
    }
}

static void report(void);

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    /* the first buffer is asked for once a context exists: registering the
     * report now puts it before the CUDA runtime's own exit handler */
    if (!report_registered) {
        report_registered = 1;
        atexit(report);
    }
    *size = 16u << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
            rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)rec;
            add_span(k->start, k->end, intern(k->name));
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            CUpti_ActivityMemcpy6 *c = (CUpti_ActivityMemcpy6 *)rec;
            add_span(c->start, c->end, intern(copy_name(c->copyKind)));
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            CUpti_ActivityMemset4 *s = (CUpti_ActivityMemset4 *)rec;
            char name[64]; /* by size: who set what shows in the sizes */
            snprintf(name, sizeof name, "[memset %.2f MiB]", s->bytes / 1048576.0);
            add_span(s->start, s->end, intern(name));
        }
    }
    free(buffer);
}

__attribute__((constructor)) static void trace_init(void)
{
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS)
        fprintf(stderr, "kernel_trace: CUPTI could not be enabled; no trace\n");
}

static int by_start(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

typedef struct {
    double total_us;
    long count;
    int name;
} name_total;

static int by_total(const void *a, const void *b)
{
    const name_total *x = a, *y = b;
    return x->total_us < y->total_us ? 1 : x->total_us > y->total_us ? -1 : 0;
}

typedef struct {
    double us;
    size_t after; /* index of the span before the gap */
} gap;

static int by_gap(const void *a, const void *b)
{
    const gap *x = a, *y = b;
    return x->us < y->us ? 1 : x->us > y->us ? -1 : 0;
}

static void report(void)
{
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    const char *path = getenv("MOE_TRACE_OUT");
    FILE *out = path ? fopen(path, "w") : stderr;
    if (!out)
        out = stderr;
    if (!n_spans) {
        fprintf(out, "kernel_trace: no GPU activity recorded\n");
        return;
    }
    qsort(spans, n_spans, sizeof *spans, by_start);

    /* the window: after the n-th marker kernel */
    char marker[256] = "";
    long skip = 0;
    const char *after = getenv("MOE_TRACE_AFTER");
    if (after) {
        const char *colon = strrchr(after, ':');
        size_t len = colon ? (size_t)(colon - after) : strlen(after);
        if (len >= sizeof marker)
            len = sizeof marker - 1;
        memcpy(marker, after, len);
        skip = colon ? atol(colon + 1) : 1;
    }
    size_t first = 0, last = n_spans;
    long seen = 0, markers_in_window = 0;
    for (size_t i = 0; i < n_spans && marker[0]; i++) {
        if (!strstr(names[spans[i].name], marker))
            continue;
        if (seen < skip) {
            if (++seen == skip)
                first = i + 1;
        } else {
            markers_in_window++;
            last = i + 1;
        }
    }
    if (marker[0] && seen < skip) {
        fprintf(out, "kernel_trace: marker '%s' seen %ld times, fewer than %ld; whole run shown\n",
                marker, seen, skip);
        first = 0, markers_in_window = 0;
    }
    if (first >= last) {
        fprintf(out, "kernel_trace: nothing after the marker\n");
        return;
    }

    name_total *totals = calloc((size_t)n_names, sizeof *totals);
    gap *gaps = malloc(sizeof *gaps * (last - first));
    if (!totals || !gaps)
        return;
    for (int i = 0; i < n_names; i++)
        totals[i].name = i;
    uint64_t t0 = spans[first].start, busy_end = t0;
    double busy_us = 0, idle_us = 0;
    size_t n_gaps = 0;
    for (size_t i = first; i < last; i++) {
        span *s = &spans[i];
        totals[s->name].total_us += (s->end - s->start) / 1e3;
        totals[s->name].count++;
        if (s->start > busy_end) {
            double g = (s->start - busy_end) / 1e3;
            idle_us += g;
            gaps[n_gaps++] = (gap){g, i - 1};
        }
        uint64_t from = s->start > busy_end ? s->start : busy_end;
        if (s->end > from)
            busy_us += (s->end - from) / 1e3;
        if (s->end > busy_end)
            busy_end = s->end;
    }
    double window_us = (busy_end - t0) / 1e3;
    double per = markers_in_window > 0 ? (double)markers_in_window : 1;
    fprintf(out, "kernel_trace: window %.3f ms after %s '%s' #%ld; %ld more marker(s) in it\n",
            window_us / 1e3, marker[0] ? "marker" : "start", marker, skip, markers_in_window);
    fprintf(out, "per marker: %.3f ms, GPU busy %.3f ms (%.1f%%), idle %.3f ms in %.1f gaps\n",
            window_us / per / 1e3, busy_us / per / 1e3, 100 * busy_us / window_us,
            idle_us / per / 1e3, n_gaps / per);

    qsort(totals, (size_t)n_names, sizeof *totals, by_total);
    fprintf(out, "\n%10s %8s %10s %6s  %s\n", "ms/marker", "count", "mean us", "%", "activity");
    for (int i = 0; i < n_names && totals[i].count; i++)
        fprintf(out, "%10.3f %8.1f %10.1f %5.1f%%  %.160s\n", totals[i].total_us / per / 1e3,
                totals[i].count / per, totals[i].total_us / totals[i].count,
                100 * totals[i].total_us / window_us, names[totals[i].name]);

    qsort(gaps, n_gaps, sizeof *gaps, by_gap);
    fprintf(out, "\nlongest idle gaps (us): after -> before\n");
    for (size_t i = 0; i < n_gaps && i < 25; i++)
        fprintf(out, "%9.1f  %.70s -> %.70s\n", gaps[i].us, names[spans[gaps[i].after].name],
                names[spans[gaps[i].after + 1].name]);
    if (out != stderr)
        fclose(out);
    free(totals);
    free(gaps);
}

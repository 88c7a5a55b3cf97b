/* CPU reference backend: memory and the operation table. Activations and
 * compute weights are `real`, so the compute copy is a plain copy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"
#include "../../../common/alloc_ledger.h"

/* the live allocations, so cpu_free takes their bytes off mem_bytes */
static alloc_ledger *LEDGER(moe_backend *be) { return &((cpu_ctx *)be->ctx)->ledger; }

static void *cpu_alloc(moe_backend *be, size_t bytes, moe_err *e)
{
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0)
        rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0) {
        moe_errf(e, "cpu backend: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    if (alloc_ledger_add(LEDGER(be), be->mem_bytes, p, bytes, be->mem_kind)) {
        free(p);
        moe_errf(e, "cpu backend: out of memory for the allocation table");
        return NULL;
    }
    return p;
}

static void cpu_free(moe_backend *be, void *p)
{
    if (!p)
        return;
    cpu_queues_drain(be); /* no queued copy writes into memory handed back */
    alloc_ledger_remove(LEDGER(be), be->mem_bytes, p);
    free(p);
}
static size_t cpu_act_bytes(moe_backend *be, size_t n) { return n * sizeof(real); }

static int cpu_copy(moe_backend *be, void *dst, const void *src, size_t bytes, moe_err *e)
{
    if (bytes)
        memmove(dst, src, bytes);
    return 0;
}

static void cpu_memset0(moe_backend *be, void *p, size_t bytes) { memset(p, 0, bytes); }

static int cpu_act_from_real(moe_backend *be, act *dst, const real *src, size_t n, moe_err *e)
{
    return cpu_copy(be, dst, src, n * sizeof(real), e);
}

static int cpu_act_to_real(moe_backend *be, real *dst, const act *src, size_t n, moe_err *e)
{
    return cpu_copy(be, dst, src, n * sizeof(real), e);
}

static void cpu_weights_from_master(moe_backend *be, act *wc, const real *master, size_t n)
{
    if (wc != (const void *)master)
        memcpy(wc, master, n * sizeof(real));
}

static int cpu_sync(moe_backend *be, moe_err *e)
{
    (void)e;
    cpu_queues_drain(be);
    return 0;
}

static void cpu_destroy(moe_backend *be)
{
    cpu_queues_free(be);
    alloc_ledger_free(LEDGER(be));
    free(be->ctx);
    free(be);
}

/* the process's resident set: what the CPU backend's "device" holds */
static size_t cpu_mem_in_use(moe_backend *be)
{
    (void)be;
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

int cpu_backend_create(moe_backend **out, int threads, moe_err *e)
{
    moe_backend *be = calloc(1, sizeof *be);
    cpu_ctx *l = calloc(1, sizeof *l);
    if (!be || !l) {
        free(be);
        free(l);
        return moe_errf(e, "cpu backend: out of memory");
    }
    be->ctx = l;
#ifdef _OPENMP
    if (threads > 0)
        omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    be->name = "cpu";
    be->kind = MOE_BACKEND_CPU;
    be->cc_major = be->cc_minor = -1;
    be->segments = MOE_SEGMENTS_FAST; /* the reference masks per segment at no extra cost */
    be->act_type = sizeof(real) == 8 ? "fp64" : "fp32";
    be->alloc = cpu_alloc;
    be->mem_in_use = cpu_mem_in_use;
    be->free = cpu_free;
    be->act_bytes = cpu_act_bytes;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->memset0 = cpu_memset0;
    be->copy = cpu_copy;
    be->act_from_real = cpu_act_from_real;
    be->act_to_real = cpu_act_to_real;
    be->weights_from_master = cpu_weights_from_master;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    cpu_fill_dense_ops(be);
    cpu_fill_attention_ops(be);
    cpu_fill_moe_ops(be);
    cpu_fill_optim_ops(be);
    *out = be;
    return 0;
}

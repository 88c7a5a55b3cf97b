/* moekit: the byte-counting backend (see count_backend.h). */
#include "count_backend.h"

#include <stdint.h>
#include <stdlib.h>

#include "../../common/alloc_ledger.h"
#include "../lowp/fp8.h"

typedef struct {
    moe_backend *shape; /* the backend whose buffer sizes this one counts, or NULL: a GPU */
    int fp8_saved;
    uintptr_t next;     /* the next address handed out: never mapped, never read */
    alloc_ledger live;  /* what is allocated now: a free takes its bytes off */
} count_ctx;

static count_ctx *CC(const moe_backend *be) { return be->ctx; }

static void *count_alloc(moe_backend *be, size_t bytes, moe_err *e)
{
    count_ctx *c = CC(be);
    uintptr_t p = c->next;
    c->next += ((bytes ? bytes : 1) + 255) & ~(uintptr_t)255;
    if (alloc_ledger_add(&c->live, be->mem_bytes, (void *)p, bytes, be->mem_kind)) {
        moe_errf(e, "memory plan: out of memory for the allocation table");
        return NULL;
    }
    return (void *)p;
}

static void count_free(moe_backend *be, void *p) { alloc_ledger_remove(&CC(be)->live, be->mem_bytes, p); }

static size_t count_act_bytes(moe_backend *be, size_t n)
{
    moe_backend *s = CC(be)->shape;
    return s ? s->act_bytes(s, n) : 2 * n; /* bf16 on a GPU */
}

static size_t count_expert_saved_bytes(moe_backend *be, size_t rows, int I)
{
    moe_backend *s = CC(be)->shape;
    if (s)
        return s->expert_saved_bytes ? s->expert_saved_bytes(s, rows, I)
                                     : s->act_bytes(s, rows * (size_t)I);
    return CC(be)->fp8_saved ? lowp_fp8blk_saved_bytes(rows, (size_t)I) : 2 * rows * (size_t)I;
}

/* the shape's answer; a GPU keeps one chunk of the SwiGLU output in its scratch */
static size_t count_expert_swiglu_rows(moe_backend *be, size_t rows)
{
    moe_backend *s = CC(be)->shape;
    if (s)
        return s->expert_swiglu_rows ? s->expert_swiglu_rows(s, rows) : rows;
    return 0;
}

/* copies and fills: there is nothing to copy */
static int count_copy(moe_backend *be, void *dst, const void *src, size_t bytes, moe_err *e)
{
    (void)be, (void)dst, (void)src, (void)bytes, (void)e;
    return 0;
}
static void count_memset0(moe_backend *be, void *p, size_t bytes) { (void)be, (void)p, (void)bytes; }
static int count_sync(moe_backend *be, moe_err *e) { (void)be, (void)e; return 0; }
static void count_destroy(moe_backend *be)
{
    alloc_ledger_free(&CC(be)->live);
    free(be->ctx);
    free(be);
}

/* present where the shape splits its masters: the model then plans them split */
static int count_masters_upload(moe_backend *be, uint16_t *lo, act *wc, const real *host, size_t n,
                                moe_err *e)
{
    (void)be, (void)lo, (void)wc, (void)host, (void)n, (void)e;
    return 0;
}
static int count_masters_download(moe_backend *be, real *host, const uint16_t *lo, const act *wc,
                                  size_t n, moe_err *e)
{
    (void)be, (void)host, (void)lo, (void)wc, (void)n, (void)e;
    return 0;
}
static void count_adamw_split(moe_backend *be, uint16_t *lo, act *wc, const real *grad, void *m,
                              void *v, const moe_param_span *spans, int n_spans,
                              const moe_adamw_hyper *h)
{
    (void)be, (void)lo, (void)wc, (void)grad, (void)m, (void)v, (void)spans, (void)n_spans, (void)h;
}

int count_backend_create(moe_backend **out, moe_backend *shape, int fp8_saved, moe_err *e)
{
    moe_backend *be = calloc(1, sizeof *be);
    count_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return moe_errf(e, "out of memory");
    }
    c->shape = shape;
    c->fp8_saved = fp8_saved != 0;
    c->next = (uintptr_t)1 << 20;
    be->ctx = c;
    be->name = "count";
    be->kind = shape ? shape->kind : MOE_BACKEND_CUDA;
    be->act_type = shape ? shape->act_type : "bf16";
    be->device_memory = 1; /* it counts for a GPU */
    be->counts_only = 1;
    be->alloc = count_alloc;
    be->free = count_free;
    be->act_bytes = count_act_bytes;
    be->expert_saved_bytes = count_expert_saved_bytes;
    be->expert_swiglu_rows = count_expert_swiglu_rows;
    be->upload = count_copy;
    be->download = count_copy;
    be->copy = count_copy;
    be->memset0 = count_memset0;
    be->sync = count_sync;
    be->destroy = count_destroy;
    if (!shape || (shape->masters_upload && shape->masters_download && shape->adamw_split)) {
        be->masters_upload = count_masters_upload;
        be->masters_download = count_masters_download;
        be->adamw_split = count_adamw_split;
    }
    *out = be;
    return 0;
}

size_t count_backend_total(const moe_backend *be)
{
    size_t t = 0;
    for (int k = 0; k < MOE_MEM_KINDS; k++)
        t += be->mem_bytes[k];
    return t;
}

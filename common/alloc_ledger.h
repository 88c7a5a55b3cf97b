/* moekit: the live allocations of a backend, so that freeing a buffer takes
 * its bytes off the figure it was counted in (the memory plan and the
 * start-up's "allocated" must agree after a buffer is replaced, e.g. the
 * moments of another dtype). */
#ifndef MOE_ALLOC_LEDGER_H
#define MOE_ALLOC_LEDGER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const void *p;
    size_t bytes;
    int kind;
} alloc_ledger_entry;

typedef struct {
    alloc_ledger_entry *e;
    size_t n, cap;
} alloc_ledger;

/* Note p (bytes of `kind`) and add them to totals[kind]. -1: out of host
 * memory for the table (nothing noted, totals unchanged). */
int alloc_ledger_add(alloc_ledger *l, size_t *totals, const void *p, size_t bytes, int kind);
/* Forget p, taking its bytes off totals[its kind]; a pointer never noted
 * changes nothing. */
void alloc_ledger_remove(alloc_ledger *l, size_t *totals, const void *p);
/* 1 when p lies inside a noted allocation (a slice of a buffer counts) */
int alloc_ledger_holds(const alloc_ledger *l, const void *p);
void alloc_ledger_free(alloc_ledger *l);

#ifdef __cplusplus
}
#endif

#endif

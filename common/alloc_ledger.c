/* moekit: a backend's live allocations (see alloc_ledger.h). A model has a
 * few hundred buffers and frees few of them, so a list searched from its
 * newest end is enough. */
#include "alloc_ledger.h"

#include <stdlib.h>

int alloc_ledger_add(alloc_ledger *l, size_t *totals, const void *p, size_t bytes, int kind)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        alloc_ledger_entry *ne = realloc(l->e, sizeof *ne * cap);
        if (!ne)
            return -1;
        l->e = ne;
        l->cap = cap;
    }
    l->e[l->n++] = (alloc_ledger_entry){p, bytes, kind};
    totals[kind] += bytes;
    return 0;
}

void alloc_ledger_remove(alloc_ledger *l, size_t *totals, const void *p)
{
    for (size_t i = l->n; i-- > 0;)
        if (l->e[i].p == p) {
            totals[l->e[i].kind] -= l->e[i].bytes;
            l->e[i] = l->e[--l->n];
            return;
        }
}

int alloc_ledger_holds(const alloc_ledger *l, const void *p)
{
    const char *c = p;
    for (size_t i = 0; i < l->n; i++) {
        const char *b = l->e[i].p;
        if (c >= b && c < b + (l->e[i].bytes ? l->e[i].bytes : 1))
            return 1;
    }
    return 0;
}

void alloc_ledger_free(alloc_ledger *l)
{
    free(l->e);
    *l = (alloc_ledger){0};
}

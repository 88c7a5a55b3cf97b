/* moekit: a token store's mappings guarded against the store changing
 * under a running job (map_guard.h). Every window reads the index through
 * its mapping; a store truncated in place would otherwise end the job with
 * a bare SIGBUS. */
#ifndef MOE_STORE_GUARD_H
#define MOE_STORE_GUARD_H

#include <stddef.h>

#include "../../common/err.h"

/* Guard the mapping [p, p + size) of the store file path; on failure it
 * is unmapped. */
int store_guard_map(void *p, size_t size, const char *path, moe_err *e);
/* Unguard and unmap. */
void store_unmap(void *p, size_t size);

#endif

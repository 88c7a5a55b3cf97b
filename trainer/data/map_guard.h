/* moekit: a file mapping that shrinks under the process ends it with a
 * message naming the file, instead of a bare "Bus error".
 *
 * A read-only MAP_SHARED mapping (a token store's index, read on every
 * window) turns every page past a truncation into a SIGBUS. A guarded
 * mapping's SIGBUS writes the message given at map_guard_add and exits 1;
 * checkpoints already saved are untouched (they are published atomically).
 * Any other SIGBUS goes to the disposition there was before (the default
 * core dump, a sanitizer's report). The handler calls only write(2) and
 * _exit(2); slots are published with atomics, so guarding and unguarding
 * from any thread is safe against a fault in any other. */
#ifndef MOE_MAP_GUARD_H
#define MOE_MAP_GUARD_H

#include <stddef.h>

#include "../../common/err.h"

#define MAP_GUARD_SLOTS 64 /* mappings guarded at once */

/* Guard [base, base + len). file names it in the message; why says what
 * the user should know (e.g. how the file must be replaced). */
int map_guard_add(const void *base, size_t len, const char *file, const char *why, moe_err *e);
/* Stop guarding the mapping at base (before munmap). */
void map_guard_remove(const void *base);

#endif

/* moekit: a token store's guarded mappings (store_guard.h). */
#include "store_guard.h"

#include <sys/mman.h>

#include "map_guard.h"

int store_guard_map(void *p, size_t size, const char *path, moe_err *e)
{
    if (map_guard_add(p, size, path,
                      "a token store must not change under a running job (moe-data prepare "
                      "--out writes a new store and renames it into place, which a job that "
                      "has it open never sees)", e) < 0) {
        munmap(p, size);
        return -1;
    }
    return 0;
}

void store_unmap(void *p, size_t size)
{
    map_guard_remove(p);
    munmap(p, size);
}

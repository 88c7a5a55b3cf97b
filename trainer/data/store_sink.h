/* A bounded output buffer for one worker of moe-data prepare: bytes collect
 * in memory; past the limit they spill to a temporary file, or, once the
 * worker's file is the next to be written into the store, go straight to
 * the store's file. Draining copies spill then memory to the store's file,
 * in order, passing every piece through an optional fix-up (the records'
 * offsets become absolute there). */
#ifndef MOE_STORE_SINK_H
#define MOE_STORE_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

typedef void (*sink_fixup_fn)(uint8_t *data, size_t n, void *ctx);

typedef struct {
    const char *what;         /* for messages: "tokens", "records", "names" */
    uint8_t *buf;
    size_t len, cap;
    size_t unit;              /* fix-ups see whole units (record size), 1 otherwise */
    int spill_fd;             /* -1 until the first spill */
    char spill_path[4300];
    uint64_t spilled, total;  /* bytes in the spill file; bytes appended since the reset */
    int direct_fd;            /* >= 0: drain there instead of spilling */
    const char *direct_path;
    sink_fixup_fn fixup;
    void *fixup_ctx;
} store_sink;

int sink_init(store_sink *s, const char *what, size_t cap, size_t unit, const char *spill_path,
              moe_err *e);
void sink_free(store_sink *s);
int sink_append(store_sink *s, const void *data, size_t n, moe_err *e);
/* Copy everything appended so far to fd (path for messages), in order, and
 * empty the sink. */
int sink_drain(store_sink *s, int fd, const char *path, moe_err *e);
/* Forget everything (the next file starts). */
void sink_reset(store_sink *s);

/* write(2) all of it, naming path on failure (a full disk included). */
int write_all(int fd, const void *data, size_t n, const char *path, moe_err *e);

#endif

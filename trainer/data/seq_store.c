/* The "store" sequence source: a token store (data.store, or one entry of
 * data.blend) mapped read-only: nothing of it is copied, so start-up and
 * memory do not grow with the corpus. Records are read from the mapped
 * index on demand, tokens with pread (store.h says why). */
#include "data_internal.h"

#include <stdlib.h>

#include "store.h"

static int store_src_open(data_part *p, const seq_source_spec *spec, moe_err *e)
{
    moe_store *s = calloc(1, sizeof *s);
    if (!s)
        return moe_errf(e, "out of memory for the dataset");
    if (store_open(s, spec->path, e) < 0) {
        free(s);
        return moe_err_prefix(e, "%s", spec->what);
    }
    p->src_state = s;
    p->tokens = s->tokens;
    p->n_tokens = s->hdr->n_tokens;
    p->n_records = s->hdr->n_records;
    p->n_bases = s->hdr->n_bases;
    p->n_files = s->hdr->n_files;
    return 0;
}

static int store_src_record(data_part *p, uint64_t r, uint64_t *offset, uint64_t *length,
                            moe_err *e)
{
    return store_record_at(p->src_state, r, offset, length, e);
}

static size_t store_src_read(const data_part *p, uint64_t offset, size_t n, uint8_t *out,
                             moe_err *e)
{
    return store_read_tokens(p->src_state, offset, n, out, e) < 0 ? 0 : n;
}

/* The store's checksum stands for its tokens (reading them all is what a
 * store is there to avoid), with its blend weight and the count of parts. */
static uint64_t store_src_fingerprint(const data_part *p, uint64_t h, int n_parts)
{
    const moe_store *s = p->src_state;
    h = rng_hash3(h, s->hdr->tokens_crc32, p->n_tokens);
    return rng_hash3(h, fingerprint_weight_word(p->weight), (uint64_t)n_parts);
}

static void store_src_release_index(data_part *p)
{
    store_release_index(p->src_state);
}

static void store_src_close(data_part *p)
{
    if (p->src_state) {
        store_close(p->src_state);
        free(p->src_state);
    }
    p->src_state = NULL;
    p->tokens = NULL;
}

const seq_source_ops seq_store_ops = {
    .name = "store",
    .reads_on_demand = 1,
    .packs_by_default = 1,
    .open = store_src_open,
    .record = store_src_record,
    .read = store_src_read,
    .fingerprint = store_src_fingerprint,
    .release_index = store_src_release_index,
    .close = store_src_close,
};

/* The registry of sequence sources: which one opens a config entry. A new
 * format adds its row here (before the rows it must win over) and its
 * operations in a file of its own (seq_source.h). */
#include "seq_source.h"

#include <stdio.h>

void seq_source_spec_for(seq_source_spec *s, const moe_data_cfg *dc, int entry,
                         const char *data_dir)
{
    s->dc = dc;
    s->entry = entry;
    s->data_dir = data_dir;
    if (entry >= 0) {
        s->path = dc->blend[entry].store;
        snprintf(s->what, sizeof s->what, "data.blend[%d].store", entry);
    } else if (dc->store[0]) {
        s->path = dc->store;
        snprintf(s->what, sizeof s->what, "data.store");
    } else {
        s->path = NULL;
        snprintf(s->what, sizeof s->what, "data.files");
    }
}

/* data.store and data.blend name token stores; without either, data.files. */
static int claims_store(const seq_source_spec *s) { return s->path != NULL; }
static int claims_files(const seq_source_spec *s) { return s->path == NULL; }

static const struct {
    const seq_source_ops *ops;
    int (*claims)(const seq_source_spec *s);
} SOURCES[] = {
    {&seq_store_ops, claims_store},
    {&seq_fasta_ops, claims_files},
};

const seq_source_ops *seq_source_pick(const seq_source_spec *s)
{
    for (size_t i = 0; i < sizeof SOURCES / sizeof SOURCES[0]; i++)
        if (SOURCES[i].claims(s))
            return SOURCES[i].ops;
    return &seq_fasta_ops; /* not reached: claims_files takes what the others leave */
}

int seq_sources_pack_by_default(const moe_data_cfg *dc)
{
    int n = dc->n_blend ? dc->n_blend : 1;
    for (int i = 0; i < n; i++) {
        seq_source_spec s;
        seq_source_spec_for(&s, dc, dc->n_blend ? i : -1, NULL);
        if (seq_source_pick(&s)->packs_by_default)
            return 1;
    }
    return 0;
}

/* moekit data: where a part's tokens come from. A sequence source is one
 * row of operations (seq_source_ops) and the state its open leaves on the
 * part; the rest of the data code (layout, windows, fingerprint) reaches the
 * tokens only through the row, so a new format (Parquet, 2-bit packed) is
 * one file implementing it plus a row in seq_source.c's registry.
 *
 * The sources now: "fasta" (seq_fasta.c: data.files read into memory) and
 * "store" (seq_store.c: a token store mapped read-only, data.store or one
 * entry of data.blend). */
#ifndef MOE_SEQ_SOURCE_H
#define MOE_SEQ_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "data_cfg.h"

typedef struct data_part data_part;

/* The config entry a part is opened from: what the registry matches on and
 * what the source's open reads. */
typedef struct {
    const moe_data_cfg *dc;
    int entry;            /* the data.blend index; -1 for data.store or data.files */
    const char *path;     /* data.store or data.blend[entry].store; NULL for data.files */
    char what[64];        /* the config key, for messages ("data.blend[2].store") */
    const char *data_dir; /* where relative data.files resolve */
} seq_source_spec;

/* Every field is set in every row; the callers do not test for NULL. */
typedef struct {
    const char *name;      /* "fasta", "store": for messages and tests */
    /* 1: tokens are read from the source for each window (a store's pread),
     * so reading all of them costs the corpus; 0: all of them are in memory
     * at p->tokens already. Start-up then samples the held-out windows for
     * their entropy instead of reading every one (dataset.c). */
    int reads_on_demand;
    /* data.pack = auto packs this source: genome collections (stores) pack,
     * data.files pad, as each always did. */
    int packs_by_default;

    /* Fill the part's tokens, n_tokens, n_records, n_bases, n_files and its
     * src_state from spec. On failure e names the config entry; whatever
     * it left in src_state is freed by close. */
    int (*open)(data_part *p, const seq_source_spec *spec, moe_err *e);
    /* Record r (< n_records): where its tokens (BOS .. EOS) start among the
     * part's tokens and how many. A store reads its index entry on demand,
     * which may find it damaged: -1 with e filled (part_record then marks
     * the part failed). */
    int (*record)(data_part *p, uint64_t r, uint64_t *offset, uint64_t *length, moe_err *e);
    /* Copy tokens [offset, offset + n) to out: a memcpy from memory, or a
     * store's pread (a mapping's faults would grow the RSS: store.h).
     * Returns how many it copied: n, or fewer with e filled. */
    size_t (*read)(const data_part *p, uint64_t offset, size_t n, uint8_t *out, moe_err *e);
    /* Mix what stands for the part's tokens into the dataset fingerprint h:
     * a store's checksum (its tokens are never all read) with its blend
     * weight and the count of parts, in-memory tokens hashed themselves.
     * Resume checks compare the result: a source's rule never changes. */
    uint64_t (*fingerprint)(const data_part *p, uint64_t h, int n_parts);
    /* Drop this process's pages of the record index after a pass over
     * every record (split_build, the entropy sample): the page cache keeps
     * them. A no-op for records held in memory. */
    void (*release_index)(data_part *p);
    /* Free src_state (also after a failed open) and unmap what open mapped. */
    void (*close)(data_part *p);
} seq_source_ops;

extern const seq_source_ops seq_fasta_ops, seq_store_ops;

/* The entry of dc a part opens: entry is the data.blend index, or -1 for
 * data.store / data.files. */
void seq_source_spec_for(seq_source_spec *s, const moe_data_cfg *dc, int entry,
                         const char *data_dir);
/* The registry's source for spec: the first row that claims it. */
const seq_source_ops *seq_source_pick(const seq_source_spec *s);
/* data.pack = auto: 1 when any part's source packs by default. */
int seq_sources_pack_by_default(const moe_data_cfg *dc);

/* A blend weight in the fingerprint (dataset.c): for sources that can be a
 * blend entry. */
uint64_t fingerprint_weight_word(double weight);

#endif

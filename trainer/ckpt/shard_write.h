/* moekit checkpoints: one rank's file of a sharded checkpoint.
 *
 * The rank's slices (slices.h) go into one safetensors file, in list order:
 * a slice that covers its whole tensor under the tensor's own name and
 * shape, a part of one as a 1-D tensor "<name>@<start>". The data streams
 * from the slices' get() through the caller's staging buffer and is hashed
 * as it is written (hashed_file.h). What the index needs about the file is
 * appended to `record` as one JSON object:
 *   {"file", "size", "sha256", "blocks": [block digests],
 *    "pieces": [{"name", "dtype", "shape", "start", "count", "offset"}]}
 * with "offset" the piece's first byte in the file. */
#ifndef MOE_CKPT_SHARD_WRITE_H
#define MOE_CKPT_SHARD_WRITE_H

#include "json.h"
#include "slices.h"

int shard_write(const char *dir, const char *file_name, const ckpt_slice_list *slices,
                uint64_t block_bytes, void *staging, size_t staging_bytes, json_writer *record,
                moe_err *e);

/* The checkpoint's index (shard_read.h's CKPT_INDEX_FILE in dir) from the n
 * ranks' records, in rank order: `texts` holds them one after another,
 * lens[r] bytes each. */
int shard_index_write(const char *dir, const char *layout, uint64_t block_bytes,
                      const char *texts, const size_t *lens, int n, moe_err *e);

#endif

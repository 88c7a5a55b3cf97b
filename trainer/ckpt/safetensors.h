/* moekit checkpoints: the safetensors tensor file format.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
 *    ..., "__metadata__": {"key": "value"}}
 * (padded with spaces), then the data buffer; offsets are relative to the
 * buffer's start, tensors are little-endian, row-major and tile the buffer
 * with no gaps, as the reference (Rust/Python) implementation requires.
 *
 * The reader trusts nothing: st_open checks the whole header (lengths,
 * dtypes, shapes, offsets, overlaps, duplicates) before returning, and every
 * error names the file and the tensor. Data is read with pread on demand, so
 * opening a multi-GB shard costs only its header, and a file truncated under
 * us gives an error instead of SIGBUS. */
#ifndef MOE_CKPT_SAFETENSORS_H
#define MOE_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER_BYTES ((uint64_t)100000000) /* 100 MB, the reference limit */

typedef enum {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_F8_E8M0,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_NUM_DTYPES
} st_dtype;

/* A tensor to write. data holds numel values of dtype, row-major, unless
 * data_is_f32: then it holds fp32 values that the writer converts to dtype
 * (F32, BF16 or F16) while writing, with no full-size temporary. */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim; /* 0 = scalar */
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* may be NULL only when the tensor has no elements */
    int data_is_f32;
} st_tensor;

typedef struct {
    const char *key;
    const char *value;
} st_meta;

/* A tensor as found in an opened file. */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    uint64_t nbytes;
    uint64_t offset; /* from the start of the file */
} st_info;

typedef struct st_file st_file;

size_t st_dtype_size(st_dtype t);
const char *st_dtype_name(st_dtype t);
/* 0 and *out set when name is a dtype this reader knows. */
int st_dtype_parse(const char *name, st_dtype *out);

/* Open and validate; on failure *out is NULL. */
int st_open(const char *path, st_file **out, moe_err *e);
void st_close(st_file *f);
const char *st_path(const st_file *f);

/* Tensors are indexed 0..st_count-1 in name order (byte-wise). */
int st_count(const st_file *f);
int st_find(const st_file *f, const char *name); /* index or -1 */
const st_info *st_tensor_info(const st_file *f, int index); /* NULL if out of range */

/* The __metadata__ strings. */
int st_meta_count(const st_file *f);
const st_meta *st_meta_at(const st_file *f, int index);
const char *st_meta_get(const st_file *f, const char *key); /* NULL if absent */

/* Read tensor name converted to fp32 (from F32, BF16, F16 or F64) into dst,
 * which holds the numel floats of the expected shape; a different rank or
 * shape is an error naming both. */
int st_read_f32(st_file *f, const char *name, int ndim, const int64_t *shape, float *dst, moe_err *e);

/* Copy a tensor's raw little-endian bytes (any dtype); dst_bytes must equal
 * its size. */
int st_read_raw(st_file *f, const char *name, void *dst, size_t dst_bytes, moe_err *e);

/* Write n tensors (unique names, not "__metadata__") and n_meta metadata
 * strings to path, creating or truncating it; the header lists names in
 * sorted order; the data buffer starts at a multiple of 8 bytes (the header
 * is padded with spaces) and tensors are laid out largest element size
 * first, so each starts aligned to its element size, ready for mmap. A
 * failed write removes the partial file. No fsync: see ckpt_dir.h. */
int st_write(const char *path, const st_tensor *tensors, int n, const st_meta *meta, int n_meta, moe_err *e);

/* For writers that stream the data themselves: the bytes before the data
 * (length prefix and header, *header malloc'd) of a file whose tensors are
 * laid out in the given order, and the data bytes that must follow. meta
 * must be sorted by key. The data pointers are not used. */
int st_header_make(const char *path, const st_tensor *tensors, int n, const st_meta *meta, int n_meta,
                   char **header, size_t *len, uint64_t *data_bytes, moe_err *e);

#endif

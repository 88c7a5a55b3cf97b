/* moekit: moving the model's flat parameter buffers to and from
 * safetensors under the Hugging Face Mixtral names (one tensor per expert
 * matrix), for checkpoints and for initialising from a Hub checkpoint. */
#ifndef MOE_WEIGHTS_IO_H
#define MOE_WEIGHTS_IO_H

#include "../ckpt/hf_dir.h"
#include "../ckpt/safetensors.h"
#include "../model/model.h"

/* Write buffers host[i] (each n_elems of the model's layout) into one
 * safetensors file as fp32, each tensor name prefixed by prefix[i]. */
int weights_write(const moe_model *m, const char *path, int n_buffers, const char *const *prefix,
                  const real *const *host, const st_meta *meta, int n_meta, moe_err *e);

/* Something tensors can be read from by name, converted to fp32. */
typedef struct {
    void *src;
    int (*read_f32)(void *src, const char *name, int ndim, const int64_t *shape, float *dst,
                    moe_err *e);
    int (*count)(void *src);       /* tensors in the source */
    const char *what;              /* for messages: the file or directory */
} weights_source;

weights_source weights_source_hf(hf_dir *d, const char *path);
weights_source weights_source_st(st_file *f, const char *path);

/* Fill host (n_elems of the model's layout) from the tensors prefix+name.
 * With exact = 1 the source must hold no tensor beyond those (a checkpoint
 * of another model shape is refused rather than half-loaded). */
int weights_read(const moe_model *m, weights_source src, const char *prefix, int exact, real *host,
                 moe_err *e);

#endif

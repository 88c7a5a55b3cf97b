/* moekit: the model's tensors in files under the Hugging Face Mixtral names
 * (one tensor per expert matrix): reading them into flat buffers (tests)
 * and checking a directory against a config before loading it. */
#ifndef MOE_WEIGHTS_IO_H
#define MOE_WEIGHTS_IO_H

#include "../ckpt/hf_dir.h"
#include "../ckpt/safetensors.h"
#include "../config/config.h"
#include "../model/model.h"

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

/* A model directory (checkpoint, Hugging Face export or Hub model) before
 * anything is allocated for it: *got from its config.json, which must
 * describe `want` when given; then every tensor of that model must be in
 * the directory's files with the shape config.json implies (a config.json
 * that lies about the sizes is refused here, not by an allocation), and
 * with exact = 1 no other model tensor (optimizer moments aside) may be. */
int weights_check(const char *dir, const moe_model_cfg *want, moe_model_cfg *got, int exact,
                  moe_err *e);

/* model.* sizes of a and b agree (b: the run's config; path names a). */
int weights_cfg_matches(const moe_model_cfg *a, const moe_model_cfg *b, const char *path,
                        moe_err *e);

#endif

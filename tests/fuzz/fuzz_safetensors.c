/* Fuzz the safetensors reader: open the input as a file, then read every
 * tensor it lists, raw and (for float dtypes) converted to fp32. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../trainer/ckpt/safetensors.h"

FUZZ_TARGET("safetensors");

static int is_float(st_dtype t) { return t == ST_F32 || t == ST_BF16 || t == ST_F16 || t == ST_F64; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_file("in.safetensors", data, size);
    st_file *f = NULL;
    moe_err e = {{0}};
    if (st_open(path, &f, &e) != 0) {
        if (f || e.msg[0] == '\0')
            abort(); /* failure leaves *out NULL and says why */
        return 0;
    }
    for (int i = 0; i < st_meta_count(f); i++) {
        const st_meta *m = st_meta_at(f, i);
        if (st_meta_get(f, m->key) == NULL)
            abort();
    }
    for (int i = 0; i < st_count(f); i++) {
        const st_info *t = st_tensor_info(f, i);
        if (st_find(f, t->name) != i || t->nbytes > size)
            abort(); /* names are unique and tensors lie inside the file */
        void *raw = malloc(t->nbytes ? t->nbytes : 1);
        if (st_read_raw(f, t->name, raw, t->nbytes, &e) != 0)
            abort(); /* the file is as st_open validated it */
        free(raw);
        if (is_float(t->dtype)) {
            float *dst = malloc(t->numel ? (size_t)t->numel * sizeof(float) : 1);
            if (st_read_f32(f, t->name, t->ndim, t->shape, dst, &e) != 0)
                abort();
            free(dst);
        }
    }
    st_close(f);
    return 0;
}

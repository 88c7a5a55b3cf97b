/* moekit: a backend that counts bytes instead of allocating them.
 *
 * The memory plan drives the real creation path (dispatcher, model,
 * optimizer) over this backend: alloc returns an address that is never
 * backed by memory and adds the bytes to mem_bytes[mem_kind], exactly as the
 * real backends' alloc does; nothing is computed (the compute ops are NULL,
 * the copies do nothing). A model of any size is planned in microseconds on
 * a machine without a GPU. The bytes of each buffer come from the backend
 * it stands for: `shape` (a real backend, whose act_bytes and
 * expert_saved_bytes are asked), or, with shape NULL, a GPU as the cuda
 * backend lays it out (bf16 compute copy, split masters, fp8_block's saved
 * SwiGLU inputs in E4M3 when `fp8_saved`). */
#ifndef MOE_PLAN_COUNT_BACKEND_H
#define MOE_PLAN_COUNT_BACKEND_H

#include "../backend/backend.h"

int count_backend_create(moe_backend **out, moe_backend *shape, int fp8_saved, moe_err *e);

/* Bytes counted so far, all kinds. */
size_t count_backend_total(const moe_backend *be);

#endif

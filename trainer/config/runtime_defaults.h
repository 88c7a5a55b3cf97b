/* moekit: the built-in values of the runtime.* keys that a backend also
 * needs before any config reaches it (backend.h's backend_opts_default).
 * The schema (config_schema.c) takes its defaults from here and the
 * validator its rule, so each is written once. */
#ifndef MOE_RUNTIME_DEFAULTS_H
#define MOE_RUNTIME_DEFAULTS_H

/* runtime.expert_chunk_rows and runtime.fp8_chunk_rows: an expert's rows
 * go through the forward's SwiGLU and down projection and the backward (or
 * the FP8 GEMMs) this many at a time */
#define MOE_DEFAULT_EXPERT_CHUNK_ROWS 8192
#define MOE_DEFAULT_FP8_CHUNK_ROWS 8192
/* both chunk sizes are multiples of this: a chunk cuts no 1x128 FP8 scale
 * block along the tokens */
#define MOE_CHUNK_ROWS_ALIGN 128

/* a default as the schema writes it, "8192" */
#define MOE_DEFAULT_TEXT(v) MOE_DEFAULT_TEXT_(v)
#define MOE_DEFAULT_TEXT_(v) #v

#endif

/* moekit: the precision vocabulary, one enum and one name table for the
 * config (precision.compute), the plugin (--moe-precision, the verdict) and
 * the backends, and the one rule of which recipe a GPU can run. */
#ifndef MOE_PRECISION_H
#define MOE_PRECISION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The order is the config's: config files and saved configs spell the
 * names, never the numbers. */
typedef enum {
    MOE_PREC_AUTO = 0,       /* the best recipe the hardware and policy allow */
    MOE_PREC_FP32,           /* the cpu backend */
    MOE_PREC_BF16,           /* any GPU of compute capability 8.0 or newer */
    MOE_PREC_FP8_BLOCK,      /* Hopper: E4M3 with 1x128 / 128x128 block scales */
    MOE_PREC_MXFP8,          /* data-centre Blackwell: E4M3 with 1x32 E8M0 scales */
    MOE_PREC_MXFP8_EMULATED, /* MXFP8 values through bf16 GEMMs, any GPU (accuracy studies) */
    MOE_PREC_COUNT
} moe_precision;

/* The names, indexed by moe_precision, NULL-terminated (the config schema's
 * choices). */
extern const char *const precision_names[MOE_PREC_COUNT + 1];

/* "mxfp8", ...; "invalid" outside the enum. */
const char *precision_name(moe_precision p);
/* 0 and *out for a name above, else -1 (*out unchanged). */
int precision_parse(const char *s, moe_precision *out);

/* Whether a GPU of compute capability cc_major.cc_minor (cc_major < 0:
 * unknown) can run recipe p. Returns 1, or 0 with the reason as one clause
 * naming the recipe and what it needs in why (n bytes; may be NULL). auto
 * and fp32 are no GPU recipe. The plugin's verdict, moe-topo --check and
 * the CUDA backend all ask this. */
int precision_gpu_can_run(moe_precision p, int cc_major, int cc_minor, char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif

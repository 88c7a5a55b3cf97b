/* moekit: a GPU's dense tensor-core peak for a recipe, the MFU's
 * denominator (metrics.jsonl's mfu). */
#ifndef MOE_DEVICE_PEAK_H
#define MOE_DEVICE_PEAK_H

#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TFLOP/s of a GPU of compute capability cc_major.cc_minor computing in
 * recipe p: bf16's peak times the recipe row's peak_vs_bf16 (2 for the E4M3
 * GEMMs) on GPUs with FP8 tensor cores; 0 where the GPU's peak is not known. */
double device_peak_tflops(int cc_major, int cc_minor, moe_precision p);

#ifdef __cplusplus
}
#endif

#endif

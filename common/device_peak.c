/* moekit: GPU peaks (device_peak.h). Dense tensor-core peaks from NVIDIA's
 * data sheets (SXM parts; H200 has H100's compute). */
#include "device_peak.h"

double device_peak_tflops(int cc_major, int cc_minor, moe_precision p)
{
    const double bf16 = cc_major == 9 && cc_minor == 0    ? 989.0  /* H100, H200 */
                        : cc_major == 10 && cc_minor == 0 ? 2250.0 /* B200 */
                        : cc_major == 8 && cc_minor == 0  ? 312.0  /* A100 */
                                                          : 0.0;
    const moe_recipe *r = precision_recipe(p);
    /* FP8 tensor cores from Hopper on; the recipe's row says what it gains */
    return r && cc_major >= 9 ? r->peak_vs_bf16 * bf16 : bf16;
}

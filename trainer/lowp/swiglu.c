/* moekit low precision: the SwiGLU x router-probability reference whose bf16
 * output the fused CUDA kernel quantises to MXFP8. */
#include "lowp_ref.h"

void lowp_swiglu_prob_bf16(const uint16_t *gate, const uint16_t *up, const float *prob, size_t rows,
                           size_t f, uint16_t *out)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < f; j++)
            out[r * f + j] = lowp_swiglu_prob(gate[r * f + j], up[r * f + j], prob[r]);
}

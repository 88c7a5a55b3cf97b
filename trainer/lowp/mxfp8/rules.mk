# trainer/lowp/mxfp8: MXFP8 (E4M3 values, an E8M0 scale per 32 along k):
# the C reference, cuBLASLt's scale swizzle, and beside them the GPU
# quantiser and the fused SwiGLU x probability -> MXFP8 kernel (when nvcc
# is here: trainer/lowp/cuda.mk builds LOWP_CUDA_SRCS).
LOWP_SRCS += trainer/lowp/mxfp8/mxfp8.c trainer/lowp/mxfp8/mx_swizzle.c
LOWP_CUDA_SRCS += trainer/lowp/mxfp8/mxfp8_kernels.cu trainer/lowp/mxfp8/swiglu_mxfp8.cu
LOWP_CUDA_HEADERS += trainer/lowp/mxfp8/mx_tile.cuh

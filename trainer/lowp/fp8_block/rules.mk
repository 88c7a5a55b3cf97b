# trainer/lowp/fp8_block: FP8 block scaling for Hopper (E4M3 values, fp32
# scales per 1x128 or 128x128): the C reference and beside it the GPU
# quantisers (when nvcc is here: trainer/lowp/cuda.mk builds LOWP_CUDA_SRCS).
LOWP_SRCS += trainer/lowp/fp8_block/fp8_block.c
LOWP_CUDA_SRCS += trainer/lowp/fp8_block/fp8_block_kernels.cu

# trainer/lowp: the low-precision reference quantisers (E4M3, E8M0, MXFP8 with
# cuBLASLt's scale layout, FP8 1x128 / 128x128 block scaling, SwiGLU x router
# probability) and, when CUDA=1, their CUDA kernels (bit-identical to them).
LOWP_SRCS := trainer/lowp/mxfp8.c trainer/lowp/mx_swizzle.c trainer/lowp/fp8_block.c \
	trainer/lowp/swiglu.c
LOWP_LIB := $(B)/lib/libmoe_lowp.a
$(LOWP_LIB): $(call obj,$(LOWP_SRCS))
ALL_LIBS += $(LOWP_LIB)
# one rounding per fp32 operation, whatever the compiler's default (the CUDA
# side uses the __f*_rn intrinsics): the reference and the kernels agree to
# the bit only if neither fuses a multiply-add
$(call obj,$(LOWP_SRCS) tests/unit/test_lowp.c tests/gpu/test_lowp_cuda.c): CFLAGS += -ffp-contract=off

UNIT_TESTS += $(B)/tests/test_lowp
$(B)/tests/test_lowp: $(call obj,tests/unit/test_lowp.c) $(LOWP_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

ifeq ($(CUDA),1)
# The kernels: their own library, for the same GPUs as the backend (Hopper
# sm_90a, Blackwell sm_100a, PTX for newer). --fmad=false on top of the
# explicit __f*_rn intrinsics: no contraction anywhere in this file.
# LOWP_HW_CVT=1 (default): E4M3 codes from the cvt.rn.satfinite instruction,
# byte-identical to the integer encoder on all 2^32 inputs (checked by the GPU
# test on every run); LOWP_HW_CVT=0 uses the integer encoder in the kernels too.
# LOWP_FAST_DIV=1 (default): the FP8 block quantisers divide by a block's
# scale as v * (1/s) plus one fma correction with the exact remainder, giving
# IEEE division's E4M3 code on every (value, amax) pair (checked by the GPU
# test on every run); LOWP_FAST_DIV=0 keeps __fdiv_rn.
LOWP_HW_CVT ?= 1
LOWP_FAST_DIV ?= 1
# the same choices for every kernel that includes fp8_blk_device.cuh
LOWP_DEVICE_DEFS := $(if $(filter 1,$(LOWP_HW_CVT)),-DLOWP_CUDA_HW_CVT) \
	$(if $(filter 1,$(LOWP_FAST_DIV)),-DLOWP_CUDA_FAST_DIV)
LOWP_NVCCFLAGS := -O3 -lineinfo --fmad=false $(LOWP_DEVICE_DEFS) \
	-Xcompiler -fPIC -Xcompiler -Wall,-Wextra \
	$(MOE_CUDA_GENCODE)
LOWP_CUDA_OBJS := $(B)/obj/trainer/lowp/lowp_cuda.o
$(B)/obj/trainer/lowp/lowp_cuda.o: trainer/lowp/lowp_cuda.cu trainer/lowp/lowp_cuda.h \
		trainer/lowp/fp8_scalar.h trainer/lowp/fp8_blk_device.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(LOWP_NVCCFLAGS) -c $< -o $@
# The FP8 block-scaled GEMMs: host C over cuBLASLt (fp8_gemm.h).
LOWP_CUDA_OBJS += $(call obj,trainer/lowp/fp8_gemm.c)
$(call obj,trainer/lowp/fp8_gemm.c): CFLAGS += -I$(CUDA_HOME)/include
LOWP_CUDA_LIB := $(B)/lib/libmoe_lowp_cuda.a
$(LOWP_CUDA_LIB): $(LOWP_CUDA_OBJS)
LOWP_CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++

# The E4M3 conversions against cuda_fp8.h on all 2^32 inputs: host code, no
# GPU needed, so it is a unit test (when nvcc is here).
UNIT_TESTS += $(B)/tests/test_lowp_cuda_fp8
$(B)/tests/test_lowp_cuda_fp8: tests/unit/test_lowp_cuda_fp8.cu trainer/lowp/fp8_scalar.h tests/check.h
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -Xcompiler -fopenmp,-Wall,-Wextra $< -o $@ -lgomp

# The GPU test: every output byte against the C reference, and timings (run
# on a GPU machine: build/tests/gpu/test_lowp_cuda).
$(call obj,tests/gpu/test_lowp_cuda.c): CFLAGS += -I$(CUDA_HOME)/include
$(B)/tests/gpu/test_lowp_cuda: $(call obj,tests/gpu/test_lowp_cuda.c) $(LOWP_CUDA_LIB) \
		$(LOWP_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LOWP_CUDA_LDLIBS) $(LDLIBS_BASE)
everything: $(B)/tests/gpu/test_lowp_cuda

# The FP8 GEMMs against float64 on the dequantised operands, and their speed
# beside bf16 (run on a GPU machine: build/tests/gpu/test_fp8_gemm).
$(call obj,tests/gpu/test_fp8_gemm.c): CFLAGS += -I$(CUDA_HOME)/include
$(B)/tests/gpu/test_fp8_gemm: $(call obj,tests/gpu/test_fp8_gemm.c) $(LOWP_CUDA_LIB) \
		$(LOWP_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -L$(CUDA_HOME)/lib64 -lcublas $(LOWP_CUDA_LDLIBS) $(LDLIBS_BASE)
everything: $(B)/tests/gpu/test_fp8_gemm
endif

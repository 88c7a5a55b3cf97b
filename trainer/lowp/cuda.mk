# trainer/lowp on the GPU: the formats' quantiser kernels (LOWP_CUDA_SRCS,
# from each format's rules.mk: mxfp8/mxfp8_kernels.cu, mxfp8/swiglu_mxfp8.cu,
# fp8_block/fp8_block_kernels.cu), the shared e4m3_check.cu, bit-identical to the C
# references beside them, and the E4M3 scaled GEMMs over cuBLASLt
# (fp8_gemm.c). Included after rules.mk and before the backend's rules.mk,
# which links them in and uses LOWP_DEVICE_DEFS.
ifeq ($(CUDA),1)
# The kernels: their own library, for the same GPUs as the backend (Hopper
# sm_90a, Blackwell sm_100a, PTX for newer). --fmad=false on top of the
# explicit __f*_rn intrinsics: no contraction anywhere in these files.
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
LOWP_CUDA_DIR := trainer/lowp
LOWP_CUDA_SRCS += $(LOWP_CUDA_DIR)/e4m3_check.cu
# (a format's kernels are FORMAT_kernels.cu beside its FORMAT.c: one
# object name each)
LOWP_CUDA_OBJS := $(patsubst %.cu,$(B)/obj/%.o,$(LOWP_CUDA_SRCS))
# a pattern rule of its own (more specific than the backend's): these flags, these headers
$(B)/obj/$(LOWP_CUDA_DIR)/%.o: $(LOWP_CUDA_DIR)/%.cu $(LOWP_CUDA_DIR)/lowp_cuda.h \
		$(LOWP_CUDA_DIR)/lowp_kernels.cuh $(LOWP_CUDA_HEADERS) \
		$(LOWP_CUDA_DIR)/fp8_blk_device.cuh $(LOWP_CUDA_DIR)/fp8_scalar.h
	@mkdir -p $(dir $@)
	$(NVCC) $(LOWP_NVCCFLAGS) -c $< -o $@
# The FP8 block-scaled GEMMs: host C over cuBLASLt (fp8_gemm.h).
LOWP_CUDA_OBJS += $(call obj,$(LOWP_CUDA_DIR)/fp8_gemm.c)
$(call obj,$(LOWP_CUDA_DIR)/fp8_gemm.c): CFLAGS += -I$(CUDA_HOME)/include
LOWP_CUDA_LIB := $(B)/lib/libmoe_lowp_cuda.a
$(LOWP_CUDA_LIB): $(LOWP_CUDA_OBJS)
LOWP_CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++

# the test's host arithmetic as the reference's: one rounding per operation
$(call obj,tests/gpu/test_lowp_cuda.c): CFLAGS += -ffp-contract=off
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

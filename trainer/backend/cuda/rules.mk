# The CUDA backend, built whenever nvcc is present (CUDA=0 to skip). Kernels
# for Hopper (sm_90a) and Blackwell (sm_100a) plus PTX for newer chips.
ifeq ($(CUDA),1)
NVCCFLAGS ?= -O3 -lineinfo -Xcompiler -fPIC -Xcompiler -Wall \
	$(MOE_CUDA_GENCODE)
CUDA_SRCS := trainer/backend/cuda/cuda_backend.cu trainer/backend/cuda/cuda_dense.cu \
	trainer/backend/cuda/cuda_attention.cu trainer/backend/cuda/cuda_attention_tc.cu \
	trainer/backend/cuda/cuda_attention_mma.cu trainer/backend/cuda/cuda_attention_cudnn.cu \
	trainer/backend/cuda/cuda_cudnn.cu \
	trainer/backend/cuda/cuda_moe.cu trainer/backend/cuda/cuda_moe_fp8.cu \
	trainer/backend/cuda/cuda_fp8_ops.cu trainer/backend/cuda/cuda_linear_lowp.cu \
	trainer/backend/cuda/cuda_moe_mxemu.cu trainer/backend/cuda/cuda_lowp_select.cu \
	trainer/backend/cuda/cuda_optim.cu trainer/backend/cuda/cuda_gemm.cu \
	trainer/backend/cuda/cuda_fp8_weight_cache.cu
# the host-side route plan builder is shared with the CPU backend (also in libmoe_cpu.a, so
# either library links alone)
CUDA_OBJS := $(patsubst %.cu,$(B)/obj/%.o,$(CUDA_SRCS)) $(call obj,trainer/backend/route_plan.c)
LOWP_CUDA_H := $(LOWP_CUDA_DIR)/lowp_cuda.h
FP8_GEMM_H := $(LOWP_CUDA_DIR)/fp8_gemm.h
$(B)/obj/trainer/backend/cuda/cuda_moe_fp8.o: trainer/lowp/fp8.h $(FP8_GEMM_H) $(LOWP_CUDA_H) \
	trainer/backend/cuda/cuda_fp8_ops.h
$(B)/obj/trainer/backend/cuda/cuda_fp8_ops.o: trainer/lowp/fp8.h $(FP8_GEMM_H) $(LOWP_CUDA_H) \
	trainer/backend/cuda/cuda_fp8_ops.h
$(B)/obj/trainer/backend/cuda/cuda_linear_lowp.o: $(FP8_GEMM_H) trainer/backend/cuda/cuda_fp8_ops.h
$(B)/obj/trainer/backend/cuda/cuda_moe_mxemu.o: $(LOWP_CUDA_H)
# the SwiGLU kernel quantises fp8_block's saved h with the quantisers' own arithmetic
$(B)/obj/trainer/backend/cuda/cuda_moe.o: $(LOWP_CUDA_DIR)/fp8_blk_device.cuh trainer/lowp/fp8_scalar.h
$(B)/obj/trainer/backend/cuda/cuda_moe.o: NVCCFLAGS += $(LOWP_DEVICE_DEFS)
$(B)/obj/trainer/backend/cuda/cuda_lowp_select.o: $(FP8_GEMM_H)
$(B)/obj/trainer/backend/cuda/cuda_cudnn.o $(B)/obj/trainer/backend/cuda/cuda_attention_cudnn.o: \
	trainer/backend/cuda/cuda_cudnn.h
$(B)/obj/%.o: %.cu trainer/backend/cuda/cuda_internal.h trainer/backend/cuda/cuda_reduce.cuh \
		trainer/backend/backend.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
CUDA_LIB := $(B)/lib/libmoe_cuda.a
$(CUDA_LIB): $(CUDA_OBJS)
# what the backend links: the low-precision FFN's quantiser kernels and
# cuBLASLt GEMMs and the formats' scale-layout sizes (trainer/lowp/)
CUDA_LIBS = $(CUDA_LIB) $(LOWP_CUDA_LIB) $(LOWP_LIB)
CFLAGS += -DMOE_WITH_CUDA -I$(CUDA_HOME)/include
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++

# The GPU test program: every op against the CPU reference (run on a GPU machine).
GPU_TESTS := $(B)/tests/gpu/test_cuda_ops
$(B)/tests/gpu/test_cuda_ops: $(call obj,tests/gpu/test_cuda_ops.c) $(CUDA_LIBS) \
		$(B)/lib/libmoe_cpu.a $(B)/lib/libmoe_common.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS_BASE)
# the attention projections in low precision against the C reference quantisers
GPU_TESTS += $(B)/tests/gpu/test_linear_lowp
$(B)/tests/gpu/test_linear_lowp: $(call obj,tests/gpu/test_linear_lowp.c) $(CUDA_LIBS) \
		$(B)/lib/libmoe_cpu.a $(B)/lib/libmoe_common.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS_BASE)
GPU_TESTS += $(B)/tests/gpu/bench_ops
$(B)/tests/gpu/bench_ops: $(call obj,tests/gpu/bench_ops.c) $(CUDA_LIBS) \
		$(B)/lib/libmoe_cpu.a $(B)/lib/libmoe_common.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS_BASE)
# attention forward + backward at the long sequences, cuDNN against moekit's kernels
GPU_TESTS += $(B)/tests/gpu/bench_attention
$(B)/tests/gpu/bench_attention: $(call obj,tests/gpu/bench_attention.c) $(CUDA_LIBS) \
		$(B)/lib/libmoe_model.a $(B)/lib/libmoe_common.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS_BASE)
# cuBLAS against cuBLASLt's candidates on the expert GEMM shapes
GPU_TESTS += $(B)/tests/gpu/bench_gemm
$(B)/tests/gpu/bench_gemm: $(call obj,tests/gpu/bench_gemm.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS_BASE)
everything: $(GPU_TESTS)
else
CUDA_LIB :=
CUDA_LIBS :=
CUDA_LDLIBS :=
endif

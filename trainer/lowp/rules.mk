# trainer/lowp: the low-precision formats, a folder each (mxfp8/, fp8_block/:
# the C reference quantiser and its CUDA kernels side by side, bit-identical),
# and what they share here: E4M3 / E8M0 scalars (fp8_scalar.h), the arrays'
# helpers and the SwiGLU x router probability reference (lowp_ref.h), and on
# the GPU the kernels' common code and the cuBLASLt scaled GEMMs (cuda.mk).
# A format's rules.mk adds its sources to LOWP_SRCS and LOWP_CUDA_SRCS.
LOWP_SRCS := trainer/lowp/swiglu.c
LOWP_CUDA_SRCS :=
LOWP_CUDA_HEADERS :=
include trainer/lowp/mxfp8/rules.mk
include trainer/lowp/fp8_block/rules.mk
LOWP_LIB := $(B)/lib/libmoe_lowp.a
$(LOWP_LIB): $(call obj,$(LOWP_SRCS))
ALL_LIBS += $(LOWP_LIB)
# one rounding per fp32 operation, whatever the compiler's default (the CUDA
# side uses the __f*_rn intrinsics): the reference and the kernels agree to
# the bit only if neither fuses a multiply-add
$(call obj,$(LOWP_SRCS) tests/unit/test_lowp.c): CFLAGS += -ffp-contract=off

UNIT_TESTS += $(B)/tests/test_lowp
$(B)/tests/test_lowp: $(call obj,tests/unit/test_lowp.c) $(LOWP_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

ifeq ($(CUDA),1)
# The E4M3 conversions against cuda_fp8.h on all 2^32 inputs: host code, no
# GPU needed, so it is a unit test (when nvcc is here).
UNIT_TESTS += $(B)/tests/test_lowp_cuda_fp8
$(B)/tests/test_lowp_cuda_fp8: tests/unit/test_lowp_cuda_fp8.cu trainer/lowp/fp8_scalar.h tests/check.h
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -Xcompiler -fopenmp,-Wall,-Wextra $< -o $@ -lgomp
endif

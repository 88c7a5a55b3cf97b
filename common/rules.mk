# The GPU code a CUDA build of moekit carries: machine code (SASS) for these
# architectures and PTX of the last, which the driver compiles for newer GPUs.
# The nvcc rules build from these lists, and common/precision.c is told them,
# so the verdict offers a recipe only where the binary has code for the GPU.
MOE_CUDA_SASS := 90a 100a
MOE_CUDA_PTX := 90
MOE_CUDA_GENCODE := $(foreach a,$(MOE_CUDA_SASS),-gencode arch=compute_$(a),code=sm_$(a)) \
	-gencode arch=compute_$(MOE_CUDA_PTX),code=compute_$(MOE_CUDA_PTX)
MOE_CUDA_ARCH_DEFS := -DMOE_CUDA_SASS='"$(MOE_CUDA_SASS)"' -DMOE_CUDA_PTX='"$(MOE_CUDA_PTX)"'
$(call obj,common/precision.c): CFLAGS += $(MOE_CUDA_ARCH_DEFS)
$(call obj,common/precision.c): common/rules.mk

COMMON_SRCS := common/err.c common/precision.c common/precision_choice.c common/device_peak.c \
	common/layout.c common/install_dirs.c \
	common/alloc_ledger.c common/host_wait.c
COMMON_LIB := $(B)/lib/libmoe_common.a
$(COMMON_LIB): $(call obj,$(COMMON_SRCS))
# the build directory, for binaries that run from it (install_dirs.h)
$(call obj,common/install_dirs.c): CFLAGS += -DMOE_BUILD_DIR='"$(abspath $(B))"'

# The shared rules' own test.
UNIT_TESTS += $(B)/tests/test_common
$(B)/tests/test_common: $(call obj,tests/unit/test_common.c) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

UNIT_TESTS += $(B)/tests/test_precision_choice
$(B)/tests/test_precision_choice: $(call obj,tests/unit/test_precision_choice.c) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

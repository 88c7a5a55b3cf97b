COMMON_SRCS := common/err.c common/precision.c common/layout.c common/install_dirs.c
COMMON_LIB := $(B)/lib/libmoe_common.a
$(COMMON_LIB): $(call obj,$(COMMON_SRCS))
# the build directory, for binaries that run from it (install_dirs.h)
$(call obj,common/install_dirs.c): CFLAGS += -DMOE_BUILD_DIR='"$(abspath $(B))"'

# The shared rules' own test.
UNIT_TESTS += $(B)/tests/test_common
$(B)/tests/test_common: $(call obj,tests/unit/test_common.c) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

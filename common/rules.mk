COMMON_SRCS := common/err.c common/precision.c common/layout.c
COMMON_LIB := $(B)/lib/libmoe_common.a
$(COMMON_LIB): $(call obj,$(COMMON_SRCS))

# The shared rules' own test.
UNIT_TESTS += $(B)/tests/test_common
$(B)/tests/test_common: $(call obj,tests/unit/test_common.c) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

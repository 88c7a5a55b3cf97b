COMMON_SRCS := common/err.c common/precision.c common/layout.c
COMMON_LIB := $(B)/lib/libmoe_common.a
$(COMMON_LIB): $(call obj,$(COMMON_SRCS))

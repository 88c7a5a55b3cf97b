COMMON_SRCS := common/err.c common/install_dirs.c
COMMON_LIB := $(B)/lib/libmoe_common.a
$(COMMON_LIB): $(call obj,$(COMMON_SRCS))
# the build directory, for binaries that run from it (install_dirs.h)
$(call obj,common/install_dirs.c): CFLAGS += -DMOE_BUILD_DIR='"$(abspath $(B))"'

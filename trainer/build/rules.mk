# The one builder of a run's dispatcher, model and optimizer (run_build.h):
# above trainer/model, trainer/dispatch and trainer/parallel, below trainer/plan and trainer/train.
BUILD_SRCS := trainer/build/run_build.c
BUILD_LIB := $(B)/lib/libmoe_build.a
$(BUILD_LIB): $(call obj,$(BUILD_SRCS))
ALL_LIBS += $(BUILD_LIB)

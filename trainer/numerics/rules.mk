# trainer/numerics: pure numeric helpers every other trainer folder may use and
# that use nothing of moekit's: bf16/fp16 conversions (half), the counter-based
# normal numbers of weight initialisation (init_normal.h, host and device) and
# splitmix64 (rng.h). Headers are inline; half.c holds the fp16 conversions.
NUMERICS_SRCS := trainer/numerics/half.c
NUMERICS_LIB := $(B)/lib/libmoe_numerics.a
$(NUMERICS_LIB): $(call obj,$(NUMERICS_SRCS))
ALL_LIBS += $(NUMERICS_LIB)

# The memory plan: a byte-counting backend driven through the real model,
# dispatcher and optimizer creation (moe-train --plan, the start-up summary,
# plan_fit for launchers).
PLAN_SRCS := trainer/plan/count_backend.c trainer/plan/plan_comm.c trainer/plan/plan.c \
	trainer/plan/plan_fit.c trainer/plan/plan_device.c \
	trainer/plan/memory_check.c
PLAN_LIB := $(B)/lib/libmoe_plan.a
$(PLAN_LIB): $(call obj,$(PLAN_SRCS))
ALL_LIBS += $(PLAN_LIB)

UNIT_TESTS += $(B)/tests/test_plan
# (trainer/rules.mk, read after this file, names the model and parallel libraries)
$(B)/tests/test_plan: $(call obj,tests/unit/test_plan.c) $(PLAN_LIB) $(BUILD_LIB) $(B)/lib/libmoe_parallel.a \
		$(B)/lib/libmoe_model.a $(B)/lib/libmoe_cpu.a $(LOWP_LIB) $(CONFIG_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(LDLIBS_BASE)

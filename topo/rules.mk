# topo/: hwloc node discovery (libmoe_topo.a) and the moe-topo CLI.
TOPO_SRCS := topo/discover.c topo/facts.c topo/nvml.c topo/gpu_table.c topo/busid.c \
	topo/index_list.c topo/step.c
TOPO_LIB := $(B)/lib/libmoe_topo.a
$(TOPO_LIB): $(call obj,$(TOPO_SRCS))
ALL_LIBS += $(TOPO_LIB)
# NVML is dlopen'ed at run time, never linked.
TOPO_LDLIBS := -lhwloc
TOPO_FIXTURES := $(abspath tests/fixtures/topo)

# moe-topo --check reaches the plugin's verdict through launch/ (below topo/).
MOE_TOPO_BIN := $(B)/bin/moe-topo
# --check --config plans the run's memory (trainer/plan; its model and parallel
# libraries are named by trainer/rules.mk, read before this file).
$(MOE_TOPO_BIN): $(call obj,topo/moe_topo.c topo/report.c) $(TOPO_LIB) $(LAUNCH_LIB) \
		$(PLAN_LIB) $(BUILD_LIB) $(PARALLEL_LIB) $(MODEL_LIB) $(LOWP_LIB) $(CONFIG_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOPO_LDLIBS) $(LIBCONFIG) $(LDLIBS_BASE)
BINS += $(MOE_TOPO_BIN)

$(call obj,tests/unit/test_topo.c): CFLAGS += -DTOPO_FIXTURES='"$(TOPO_FIXTURES)"'
$(B)/tests/test_topo: $(call obj,tests/unit/test_topo.c) $(TOPO_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOPO_LDLIBS) $(LDLIBS_BASE)

# The CLI's own test runs the binary (popen) on the fixtures.
$(call obj,tests/unit/test_moe_topo.c): CFLAGS += -DTOPO_FIXTURES='"$(TOPO_FIXTURES)"' \
	-DMOE_TOPO_BIN='"$(abspath $(MOE_TOPO_BIN))"' -DMOE_CONFIGS='"$(abspath configs)"'
$(B)/tests/test_moe_topo: $(call obj,tests/unit/test_moe_topo.c) $(COMMON_LIB) | $(MOE_TOPO_BIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

UNIT_TESTS += $(B)/tests/test_topo $(B)/tests/test_moe_topo

# plugin core: admin policy and the launch verdict, plain C with no Slurm,
# shared by the SPANK plugin and moe-topo --check.
PLUGINCORE_SRCS := plugin/policy.c plugin/verdict.c
PLUGINCORE_LIB := $(B)/lib/libmoe_plugincore.a
$(PLUGINCORE_LIB): $(call obj,$(PLUGINCORE_SRCS))
ALL_LIBS += $(PLUGINCORE_LIB)

$(B)/tests/test_policy: $(call obj,tests/unit/test_policy.c) $(PLUGINCORE_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

# The verdict is tested on the fixture topologies, so it links topo/ too.
$(call obj,tests/unit/test_verdict.c): CFLAGS += -DTOPO_FIXTURES='"$(TOPO_FIXTURES)"'
$(B)/tests/test_verdict: $(call obj,tests/unit/test_verdict.c) $(PLUGINCORE_LIB) $(TOPO_LIB) \
		$(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOPO_LDLIBS) $(LDLIBS_BASE)

UNIT_TESTS += $(B)/tests/test_policy $(B)/tests/test_verdict

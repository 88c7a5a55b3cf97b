# tests/plugin/: the plugin's unit tests in one place: its options, job size,
# launch contract and config resolution (plugin/), and the admin policy and
# verdict it decides with (launch/). None needs Slurm.

# Each links the plain plugin code and what it calls.
PLUGIN_TEST_LINK := $(PLUGIN_LIB) $(LAUNCH_LIB) $(CONFIG_LIB) $(COMMON_LIB)

$(B)/tests/test_args: $(call obj,tests/plugin/test_args.c) $(PLUGIN_LIB) $(LAUNCH_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

$(B)/tests/test_plugin_job_size: $(call obj,tests/plugin/test_plugin_job_size.c) $(PLUGIN_TEST_LINK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

$(B)/tests/test_plugin_launch: $(call obj,tests/plugin/test_plugin_launch.c) $(PLUGIN_TEST_LINK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

$(B)/tests/test_plugin_config: $(call obj,tests/plugin/test_plugin_config.c) $(PLUGIN_TEST_LINK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(LDLIBS_BASE)

$(B)/tests/test_policy: $(call obj,tests/plugin/test_policy.c) $(LAUNCH_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

# The verdict is tested on the fixture topologies, so it links topo/ too.
$(call obj,tests/plugin/test_verdict.c): CFLAGS += -DTOPO_FIXTURES='"$(TOPO_FIXTURES)"'
$(B)/tests/test_verdict: $(call obj,tests/plugin/test_verdict.c) $(TOPO_LIB) $(LAUNCH_LIB) \
		$(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(TOPO_LDLIBS) $(LDLIBS_BASE)

UNIT_TESTS += $(B)/tests/test_args $(B)/tests/test_plugin_job_size $(B)/tests/test_plugin_launch \
	$(B)/tests/test_plugin_config $(B)/tests/test_policy $(B)/tests/test_verdict

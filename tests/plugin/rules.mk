# tests/plugin/: the plugin's unit tests in one place: its options, job size,
# launch contract and config resolution (plugin/), and the admin policy and
# verdict it decides with (launch/). None needs Slurm.

# Each links the plain plugin code and what it calls: no trainer library,
# as the plugin itself (it asks the build's moe-train, which the tests that
# reach config_resolve.c run as the policy's trainer=).
PLUGIN_TEST_LINK := $(PLUGIN_LIB) $(LAUNCH_LIB) $(COMMON_LIB)
PLUGIN_TEST_TRAINER := $(abspath $(B)/bin/moe-train)

$(B)/tests/test_args: $(call obj,tests/plugin/test_args.c) $(PLUGIN_LIB) $(LAUNCH_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

$(B)/tests/test_plugin_job_size: $(call obj,tests/plugin/test_plugin_job_size.c) $(PLUGIN_TEST_LINK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

$(B)/tests/test_plugin_launch: $(call obj,tests/plugin/test_plugin_launch.c) $(PLUGIN_TEST_LINK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

$(call obj,tests/plugin/test_plugin_config.c tests/plugin/test_planner.c): \
	CFLAGS += -DMOE_TEST_TRAINER='"$(PLUGIN_TEST_TRAINER)"'
$(B)/tests/test_plugin_config: $(call obj,tests/plugin/test_plugin_config.c) $(PLUGIN_TEST_LINK) \
		| $(B)/bin/moe-train
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter-out $(B)/bin/moe-train,$^) -o $@ $(LDLIBS_BASE)

# The child process, its answers and their sharing (plugin/planner.c).
$(B)/tests/test_planner: $(call obj,tests/plugin/test_planner.c) $(PLUGIN_TEST_LINK) \
		| $(B)/bin/moe-train
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter-out $(B)/bin/moe-train,$^) -o $@ $(LDLIBS_BASE)

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
	$(B)/tests/test_plugin_config $(B)/tests/test_planner $(B)/tests/test_policy $(B)/tests/test_verdict

# What spank_moe.so links: its own code, launch/, topo/, common/ and no
# trainer library, libconfig or OpenMP (tests/plugin/test_plugin_link.sh).
ifneq ($(PLUGIN_HAVE_SPANK),)
$(B)/tests/test_plugin_link: tests/plugin/test_plugin_link.sh | $(PLUGIN_SO) $(CONFIG_LIB) \
		$(PLAN_LIB) $(PARALLEL_LIB) $(MODEL_LIB) $(LOWP_LIB)
	@mkdir -p $(dir $@)
	install -m 755 $< $@
UNIT_TESTS += $(B)/tests/test_plugin_link
endif

# The SPANK plugin spank_moe.so and its unit tests.
#
# The plugin is built against the spank.h of the Slurm it will run in (Slurm
# checks major.minor at load): /usr/include/slurm/spank.h from libslurm-dev,
# or SLURM_INCLUDE=/prefix/include for another Slurm. Without spank.h the
# plugin is skipped and everything else still builds.

SLURM_INCLUDE ?= /usr/include
PLUGIN_HAVE_SPANK := $(wildcard $(SLURM_INCLUDE)/slurm/spank.h)

# Plain C, unit-tested without Slurm.
PLUGIN_PLAIN_SRCS := plugin/args.c plugin/job_size.c plugin/launch.c plugin/bind.c \
	plugin/config_resolve.c plugin/planner.c
# The SPANK entry points and the code that talks to Slurm.
PLUGIN_SPANK_SRCS := plugin/spank_moe.c plugin/spank_moe_alloc.c plugin/spank_moe_local.c \
	plugin/spank_moe_remote.c plugin/spank_moe_submit.c
PLUGIN_LIB := $(B)/lib/libmoe_plugin.a
PLUGIN_SO := $(B)/lib/spank_moe.so
ALL_LIBS += $(PLUGIN_LIB)

$(PLUGIN_LIB): $(call obj,$(PLUGIN_PLAIN_SRCS))

ifneq ($(SLURM_INCLUDE),/usr/include)
$(call obj,$(PLUGIN_SPANK_SRCS)): CFLAGS += -I$(SLURM_INCLUDE)
endif

# The plugin links its own code, launch/, topo/ and common/, nothing of the
# trainer: what only the trainer knows (a config's facts, the memory plan)
# it asks the site's trainer= for, as a child process (plugin/planner.h), so
# slurmstepd loads no config, planner, model, parallel or low-precision code,
# no libconfig and no OpenMP. tests/plugin/test_plugin_link.sh fails the
# build's tests if any of it comes back. The version script keeps every
# symbol but the SPANK entry points private to the plugin.
PLUGIN_LINK := $(call obj,$(PLUGIN_SPANK_SRCS)) $(PLUGIN_LIB) $(TOPO_LIB) $(LAUNCH_LIB) \
	$(COMMON_LIB)
$(PLUGIN_SO): $(PLUGIN_LINK) plugin/spank_moe.lds
	@mkdir -p $(dir $@)
	$(CC) -shared $(SANFLAGS) -Wl,--version-script=plugin/spank_moe.lds \
		$(PLUGIN_LINK) -o $@ $(TOPO_LDLIBS) -ldl -lm

# Not in BINS: `make install` puts the plugin under lib/moekit, not bin/.
ifneq ($(PLUGIN_HAVE_SPANK),)
everything: $(PLUGIN_SO)
else
$(info moekit: $(SLURM_INCLUDE)/slurm/spank.h not found: skipping the SPANK plugin (install libslurm-dev or set SLURM_INCLUDE))
endif

# A stand-in trainer that records the launch contract, for tests/slurm/; it
# hands `query` (the plugin's questions) to the build's moe-train.
PLUGIN_RECORD_LAUNCH := $(B)/tests/slurm/record_launch
$(call obj,tests/slurm/record_launch.c): CFLAGS += -DRECORD_LAUNCH_TRAINER='"$(abspath $(B)/bin/moe-train)"' \
	-DRECORD_LAUNCH_QUERY_LOG='"$(abspath $(B)/tests/slurm/queries.log)"'
$(PLUGIN_RECORD_LAUNCH): $(call obj,tests/slurm/record_launch.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@
everything: $(PLUGIN_RECORD_LAUNCH)

# The run configuration: schema, loader, validator, writer; the model section
# from and to a Hugging Face config.json (hf_config.c, over trainer/ckpt/json).
CONFIG_SRCS := trainer/config/config_schema.c trainer/config/config_value.c \
	trainer/config/config_suggest.c trainer/config/config_source.c \
	trainer/config/config_load.c trainer/config/config_validate.c \
	trainer/config/config_write.c trainer/config/config_intern.c \
	trainer/config/config_scale.c trainer/config/hf_config.c
CONFIG_LIB := $(B)/lib/libmoe_config.a
ALL_LIBS += $(CONFIG_LIB)

# Debian's libconfig.a is not position-independent, so a shared object would
# link CONFIG_LIB with $(LIBCONFIG_SHARED) instead (the SPANK plugin links
# neither: it asks moe-train, plugin/planner.h).
LIBCONFIG_SHARED := -lconfig
$(CONFIG_LIB): $(call obj,$(CONFIG_SRCS))

UNIT_TESTS += $(B)/tests/test_config
$(B)/tests/test_config: $(call obj,tests/unit/test_config.c) $(CONFIG_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(LDLIBS_BASE)

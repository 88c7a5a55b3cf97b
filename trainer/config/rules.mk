# The run configuration: schema, loader, validator, writer.
CONFIG_SRCS := trainer/config/config_schema.c trainer/config/config_value.c \
	trainer/config/config_suggest.c trainer/config/config_source.c \
	trainer/config/config_load.c trainer/config/config_validate.c \
	trainer/config/config_write.c
CONFIG_LIB := $(B)/lib/libmoe_config.a
ALL_LIBS += $(CONFIG_LIB)

# libconfig 1.5 defines config_write(config_t *, FILE *), which collides with
# moekit's config_write when both are linked statically ("multiple
# definition"). So LIBCONFIG becomes a private static copy of libconfig with
# that one symbol renamed (see config_libconfig.h): every link line written
# `... $(CONFIG_LIB) ... $(LIBCONFIG)` keeps working and stays static.
# Debian's libconfig.a is not position-independent, so a shared object (the
# SPANK plugin) links CONFIG_LIB with $(LIBCONFIG_SHARED) instead.
LIBCONFIG_SYSTEM_A := $(shell $(CC) -print-file-name=libconfig.a)
CONFIG_LIBCONFIG_A := $(B)/lib/libmoe_libconfig.a
CONFIG_LIBCONFIG_OBJ := $(B)/obj/trainer/config/libconfig_private.o
$(CONFIG_LIBCONFIG_OBJ): $(LIBCONFIG_SYSTEM_A)
	@mkdir -p $(dir $@)
	$(CC) -r -nostdlib -Wl,--whole-archive $< -Wl,--no-whole-archive -o $@.tmp
	objcopy --redefine-sym config_write=libconfig_config_write $@.tmp $@
	rm -f $@.tmp
$(CONFIG_LIBCONFIG_A): $(CONFIG_LIBCONFIG_OBJ)
LIBCONFIG := $(CONFIG_LIBCONFIG_A)
LIBCONFIG_SHARED := -lconfig

# Order-only: whatever links CONFIG_LIB finds $(LIBCONFIG) built.
$(CONFIG_LIB): $(call obj,$(CONFIG_SRCS)) | $(CONFIG_LIBCONFIG_A)

UNIT_TESTS += $(B)/tests/test_config
$(B)/tests/test_config: $(call obj,tests/unit/test_config.c) $(CONFIG_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(LDLIBS_BASE)

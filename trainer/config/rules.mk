# The run configuration: schema, loader, validator, writer.
CONFIG_SRCS := trainer/config/config_schema.c trainer/config/config_value.c \
	trainer/config/config_suggest.c trainer/config/config_source.c \
	trainer/config/config_load.c trainer/config/config_validate.c \
	trainer/config/config_write.c
CONFIG_LIB := $(B)/lib/libmoe_config.a
ALL_LIBS += $(CONFIG_LIB)

# libconfig 1.5 defines config_write(config_t *, FILE *), which collides with
# moekit's config_write. The library carries its own copy of libconfig with
# that one symbol renamed (see config_libconfig.h); it provides every libconfig
# function, so a link line `... $(CONFIG_LIB) ... $(LIBCONFIG)` never pulls the
# system copy, and other modules calling libconfig directly share this one.
# (Debian's libconfig.a is not position-independent: it cannot go into a
# shared object such as a SPANK plugin.)
LIBCONFIG_A := $(shell $(CC) -print-file-name=libconfig.a)
CONFIG_LIBCONFIG_OBJ := $(B)/obj/trainer/config/libconfig_private.o
$(CONFIG_LIBCONFIG_OBJ): $(LIBCONFIG_A)
	@mkdir -p $(dir $@)
	$(CC) -r -nostdlib -Wl,--whole-archive $< -Wl,--no-whole-archive -o $@.tmp
	objcopy --redefine-sym config_write=libconfig_config_write $@.tmp $@
	rm -f $@.tmp

$(CONFIG_LIB): $(call obj,$(CONFIG_SRCS)) $(CONFIG_LIBCONFIG_OBJ)

UNIT_TESTS += $(B)/tests/test_config
$(B)/tests/test_config: $(call obj,tests/unit/test_config.c) $(CONFIG_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(LDLIBS_BASE)

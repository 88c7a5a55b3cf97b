# trainer/ckpt: safetensors, Hugging Face model directories,
# crash-safe checkpoint directories.
CKPT_SRCS := trainer/ckpt/fsio.c trainer/ckpt/json.c trainer/ckpt/safetensors.c \
	trainer/ckpt/sha256.c trainer/ckpt/hf_dir.c trainer/ckpt/ckpt_dir.c \
	trainer/ckpt/hashed_file.c trainer/ckpt/shard_write.c trainer/ckpt/shard_read.c trainer/ckpt/ckpt_lock.c
CKPT_LIB := $(B)/lib/libmoe_ckpt.a
$(CKPT_LIB): $(call obj,$(CKPT_SRCS))
ALL_LIBS += $(CKPT_LIB)

# The test reads its fixtures from the source tree (MOE_CKPT_TEST_DATA overrides).
$(call obj,tests/unit/test_ckpt.c): CFLAGS += -DCKPT_TEST_DATA='"$(abspath tests/data/ckpt)"'

UNIT_TESTS += $(B)/tests/test_ckpt
$(B)/tests/test_ckpt: $(call obj,tests/unit/test_ckpt.c) $(CONFIG_LIB) $(CKPT_LIB) $(NUMERICS_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

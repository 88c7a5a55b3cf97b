# tests/: the fuzz harnesses (tests/fuzz/), two ways.
#
# 1. Replay programs, built with the normal toolchain into $(B)/tests and run
#    by `make unit`: each feeds its committed corpus (tests/fuzz/corpus/NAME,
#    seeds plus every input that once crashed) to the harness once.
# 2. libFuzzer fuzzers, built with clang by `make fuzz` into build/fuzz/
#    (-fsanitize=fuzzer,address,undefined); tests/fuzz/run.sh SECONDS runs them.
FUZZ_TARGETS := config fasta safetensors json hf_config plugin_args policy store_index \
	planner_answer
FUZZ_CORPUS_ROOT := $(abspath tests/fuzz/corpus)

# What each harness links: the reader under test and what it calls.
FUZZ_SRCS_config := $(CONFIG_SRCS) $(CKPT_SRCS) $(NUMERICS_SRCS) # hf_config.c reads and writes JSON
FUZZ_SRCS_fasta := $(DATA_SRCS) trainer/ckpt/json.c trainer/ckpt/fsio.c # hf_tokenizer.c writes JSON
FUZZ_SRCS_store_index := $(DATA_SRCS) trainer/ckpt/json.c trainer/ckpt/fsio.c
FUZZ_SRCS_safetensors := $(CKPT_SRCS) $(NUMERICS_SRCS)
FUZZ_SRCS_json := $(CKPT_SRCS) $(NUMERICS_SRCS)
FUZZ_SRCS_hf_config := $(CONFIG_SRCS) $(CKPT_SRCS) $(NUMERICS_SRCS)
FUZZ_SRCS_plugin_args := plugin/args.c launch/verdict.c
FUZZ_SRCS_policy := launch/policy.c
FUZZ_SRCS_planner_answer := plugin/planner.c
FUZZ_LIBS_config := $(CONFIG_LIB)
FUZZ_LIBS_fasta := $(DATA_LIB)
FUZZ_LIBS_store_index := $(DATA_LIB)
FUZZ_LIBS_safetensors := $(CKPT_LIB) $(NUMERICS_LIB)
FUZZ_LIBS_json := $(CKPT_LIB) $(NUMERICS_LIB)
FUZZ_LIBS_hf_config := $(CONFIG_LIB) $(CKPT_LIB) $(NUMERICS_LIB)
FUZZ_LIBS_plugin_args := $(PLUGIN_LIB) $(LAUNCH_LIB)
FUZZ_LIBS_policy := $(LAUNCH_LIB)
FUZZ_LIBS_planner_answer := $(PLUGIN_LIB)
FUZZ_COMMON := tests/fuzz/fuzz_util.c $(COMMON_SRCS)

$(call obj,tests/fuzz/replay.c): CFLAGS += -DFUZZ_CORPUS_ROOT='"$(FUZZ_CORPUS_ROOT)"'

define fuzz_replay_rule
UNIT_TESTS += $(B)/tests/test_fuzz_$(1)
$(B)/tests/test_fuzz_$(1): $(call obj,tests/fuzz/fuzz_$(1).c tests/fuzz/replay.c tests/fuzz/fuzz_util.c) \
		$(FUZZ_LIBS_$(1)) $(COMMON_LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) $$^ -o $$@ $$(LIBCONFIG) $$(LDLIBS_BASE)
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_replay_rule,$(t))))

# ---- libFuzzer build (clang only; a separate tree, instrumented for coverage)
FUZZ_CC ?= clang
FUZZ_B := build/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS := -std=c11 -O1 -g -D_GNU_SOURCE -fno-omit-frame-pointer -Wno-unknown-pragmas \
	-fsanitize=fuzzer-no-link $(FUZZ_SAN) -DMOE_CONFIG_DIR_DEFAULT='"$(abspath configs)"' \
	-DMOE_DATA_DIR_DEFAULT='"$(abspath data)"' -DMOE_SOURCE_DIR='"$(abspath .)"'
fuzz_obj = $(patsubst %.c,$(FUZZ_B)/obj/%.o,$(1))
# the build's GPU code lists (common/rules.mk), which common/precision.c needs
$(FUZZ_B)/obj/common/precision.o: FUZZ_CFLAGS += $(MOE_CUDA_ARCH_DEFS)
$(FUZZ_B)/obj/common/precision.o: common/rules.mk

$(FUZZ_B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

define fuzz_bin_rule
$(FUZZ_B)/fuzz_$(1): $(call fuzz_obj,tests/fuzz/fuzz_$(1).c $(FUZZ_COMMON) $(FUZZ_SRCS_$(1)))
	$$(FUZZ_CC) -fsanitize=fuzzer $$(FUZZ_SAN) $$^ -o $$@ $$(LIBCONFIG) $$(CRYPTO) -lz -lm -lpthread -ldl
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_bin_rule,$(t))))

fuzz: $(foreach t,$(FUZZ_TARGETS),$(FUZZ_B)/fuzz_$(t))
.PHONY: fuzz
-include $(shell find $(FUZZ_B)/obj -name '*.d' 2>/dev/null)

# tests/reliability/: what a resuming run would find under a checkpoint root.
RELIABILITY_CKPT_CHECK := $(B)/tests/reliability/ckpt_check
$(RELIABILITY_CKPT_CHECK): $(call obj,tests/reliability/ckpt_check.c) $(CKPT_LIB) $(NUMERICS_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)
everything: $(RELIABILITY_CKPT_CHECK)

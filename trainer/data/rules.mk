# trainer/data: FASTA reading, tokenizer, windows, split, order, cursor.
DATA_SRCS := trainer/data/tokenizer.c trainer/data/fasta.c trainer/data/gz_source.c trainer/data/rng.c \
	trainer/data/layout.c trainer/data/order.c trainer/data/blend.c trainer/data/parts.c \
	trainer/data/dataset.c trainer/data/window.c trainer/data/batch.c trainer/data/inputs.c \
	trainer/data/store_read.c trainer/data/store_guard.c trainer/data/map_guard.c trainer/data/store_info.c trainer/data/store_sink.c \
	trainer/data/store_prepare.c trainer/data/store_progress.c trainer/data/store_dir.c trainer/data/store_tmp.c \
	trainer/data/hf_tokenizer.c trainer/data/seq_source.c trainer/data/seq_fasta.c trainer/data/seq_store.c
DATA_LIB := $(B)/lib/libmoe_data.a
$(DATA_LIB): $(call obj,$(DATA_SRCS))
ALL_LIBS += $(DATA_LIB)

# The test reads its fixtures from tests/data/fasta and the shipped genomes from data/.
$(call obj,tests/unit/test_data.c): CFLAGS += -DMOE_TEST_DATA_DIR='"$(abspath tests/data/fasta)"'
$(B)/tests/test_data: $(call obj,tests/unit/test_data.c) $(DATA_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)
UNIT_TESTS += $(B)/tests/test_data

$(call obj,tests/unit/test_store.c): CFLAGS += -DMOE_TEST_DATA_DIR='"$(abspath tests/data/fasta)"'
$(B)/tests/test_store: $(call obj,tests/unit/test_store.c) $(DATA_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)
UNIT_TESTS += $(B)/tests/test_store

$(call obj,tests/unit/test_seq_source.c): CFLAGS += -DMOE_TEST_DATA_DIR='"$(abspath tests/data/fasta)"'
$(B)/tests/test_seq_source: $(call obj,tests/unit/test_seq_source.c) $(DATA_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)
UNIT_TESTS += $(B)/tests/test_seq_source

# trainer/data: FASTA reading, tokenizer, windows, split, order, cursor.
DATA_SRCS := trainer/data/tokenizer.c trainer/data/fasta.c trainer/data/rng.c \
	trainer/data/layout.c trainer/data/dataset.c trainer/data/batch.c \
	trainer/data/hf_tokenizer.c
DATA_LIB := $(B)/lib/libmoe_data.a
$(DATA_LIB): $(call obj,$(DATA_SRCS))
ALL_LIBS += $(DATA_LIB)

# The test reads its fixtures from tests/data/fasta and the shipped genomes from data/.
$(call obj,tests/unit/test_data.c): CFLAGS += -DMOE_TEST_DATA_DIR='"$(abspath tests/data/fasta)"'
$(B)/tests/test_data: $(call obj,tests/unit/test_data.c) $(DATA_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)
UNIT_TESTS += $(B)/tests/test_data

# The commands: moe-train (training, eval, export, query, --plan) and moe-data,
# each a thin front of the folders below it: options in, exit status out.
CMD_SRCS := trainer/cmd/cli.c trainer/cmd/eval.c trainer/cmd/query.c \
	trainer/cmd/export_cmd.c trainer/cmd/plan_cli.c
# CMD_LIB (libmoe_cmd.a) is named in trainer/rules.mk, whose tests link it
$(CMD_LIB): $(call obj,$(CMD_SRCS))
ALL_LIBS += $(CMD_LIB)

BINS += $(B)/bin/moe-train
$(B)/bin/moe-train: $(call obj,trainer/cmd/main.c) $(TRAINER_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(LIBPROTOBUF_C) $(NCCL_LDLIBS) $(CUDA_LDLIBS) $(LDLIBS_BASE)

# moe-data: prepare FASTA collections into token stores, show what one holds.
BINS += $(B)/bin/moe-data
$(B)/bin/moe-data: $(call obj,trainer/cmd/moe_data.c) $(DATA_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

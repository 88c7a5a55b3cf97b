# The trainer: model, dispatcher, CPU reference backend, training loop, CLI.
MODEL_SRCS := trainer/backend/route_plan.c trainer/model/params.c trainer/model/model.c trainer/model/dispatch_local.c \
	trainer/model/model_slices.c \
	trainer/backend/cpu/cpu_backend.c trainer/backend/cpu/cpu_gemm.c \
	trainer/backend/cpu/cpu_dense.c trainer/backend/cpu/cpu_attention.c \
	trainer/backend/cpu/cpu_moe.c trainer/backend/cpu/cpu_optim.c
MODEL_LIB := $(B)/lib/libmoe_model.a
$(MODEL_LIB): $(call obj,$(MODEL_SRCS))

# The same model and backend in double precision, for the gradient check.
obj64 = $(patsubst %.c,$(B)/obj64/%.o,$(1))
$(B)/obj64/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMOE_REAL_DOUBLE -MMD -MP -c $< -o $@
MODEL64_LIB := $(B)/lib/libmoe_model64.a
# (checkpoint slices store fp32: not part of it)
$(MODEL64_LIB): $(call obj64,$(filter-out trainer/model/model_slices.c,$(MODEL_SRCS)))

UNIT_TESTS += $(B)/tests/test_gradcheck
$(B)/tests/test_gradcheck: $(call obj64,tests/unit/test_gradcheck.c) $(MODEL64_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)


UNIT_TESTS += $(B)/tests/test_split_master
$(B)/tests/test_split_master: $(call obj,tests/unit/test_split_master.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

UNIT_TESTS += $(B)/tests/test_init_normal
$(B)/tests/test_init_normal: $(call obj,tests/unit/test_init_normal.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

UNIT_TESTS += $(B)/tests/test_lazy_grads
$(B)/tests/test_lazy_grads: $(call obj,tests/unit/test_lazy_grads.c) $(MODEL_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

UNIT_TESTS += $(B)/tests/test_recompute
$(B)/tests/test_recompute: $(call obj,tests/unit/test_recompute.c) $(MODEL_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)

# Training loop, checkpoints, eval and the CLI.
TRAIN_SRCS := trainer/train/trainer.c trainer/train/checkpoint.c trainer/train/weights_io.c \
	trainer/train/ckpt_io.c trainer/train/hf_export.c trainer/train/export_cmd.c \
	trainer/train/schedule.c trainer/train/metrics.c trainer/backend/select.c trainer/eval.c
TRAIN_LIB := $(B)/lib/libmoe_train.a
$(TRAIN_LIB): $(call obj,$(TRAIN_SRCS))
# libmoe_parallel.a is built by trainer/parallel/rules.mk
PARALLEL_LIB := $(B)/lib/libmoe_parallel.a
TRAINER_LIBS = $(TRAIN_LIB) $(PARALLEL_NCCL_LIB) $(PARALLEL_LIB) $(CUDA_LIB) $(MODEL_LIB) $(DATA_LIB) $(CKPT_LIB) $(CONFIG_LIB) $(COMMON_LIB)

BINS += $(B)/bin/moe-train
$(B)/bin/moe-train: $(call obj,trainer/main.c) $(TRAINER_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(NCCL_LDLIBS) $(CUDA_LDLIBS) $(LDLIBS_BASE)

# Agreement with transformers on the committed fixtures.
UNIT_TESTS += $(B)/tests/test_hf_agreement
$(B)/tests/test_hf_agreement: $(call obj,tests/unit/test_hf_agreement.c) $(TRAINER_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(NCCL_LDLIBS) $(CUDA_LDLIBS) $(LDLIBS_BASE)


UNIT_TESTS += $(B)/tests/test_training
$(B)/tests/test_training: $(call obj,tests/unit/test_training.c) $(TRAINER_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(NCCL_LDLIBS) $(CUDA_LDLIBS) $(LDLIBS_BASE)

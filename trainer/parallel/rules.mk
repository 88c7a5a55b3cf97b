# Expert and data parallelism over the communicators of trainer/comm/: the EP
# dispatcher, sharded AdamW, rank bootstrap and layout.
PARALLEL_SRCS := trainer/parallel/ranks.c trainer/parallel/launch_env.c \
	trainer/parallel/rank_layout.c \
	$(DISPATCH_EP_SRCS) trainer/parallel/layout_io.c trainer/parallel/zero.c \
	trainer/parallel/dev_groups.c
PARALLEL_LIB := $(B)/lib/libmoe_parallel.a
# the communicators (trainer/comm/rules.mk) are linked as part of this library
$(PARALLEL_LIB): $(call obj,$(PARALLEL_SRCS) $(COMM_SRCS))

UNIT_TESTS += $(B)/tests/test_parallel
$(B)/tests/test_parallel: $(call obj,tests/unit/test_parallel.c) $(PARALLEL_LIB) $(MODEL_LIB) $(CPU_LIB) \
		$(DATA_LIB) $(CONFIG_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LIBCONFIG) $(LDLIBS_BASE)

ifneq ($(PARALLEL_NCCL_LIB),)
# World size 1 through NCCL, the EP dispatcher and sharded AdamW on the GPU
# (run on a GPU machine: tests/gpu/test_parallel_nccl.c).
PARALLEL_GPU_TESTS := $(B)/tests/gpu/test_parallel_nccl
$(B)/tests/gpu/test_parallel_nccl: $(call obj,tests/gpu/test_parallel_nccl.c) \
		$(PARALLEL_NCCL_LIB) $(PARALLEL_LIB) $(MODEL_LIB) $(CUDA_LIBS) $(CPU_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(NCCL_LDLIBS) $(CUDA_LDLIBS) $(LDLIBS_BASE)
everything: $(PARALLEL_GPU_TESTS)
endif

# Ranks as threads of one process over the in-process communicator: the
# distributed optimizer and the EP dispatcher against one rank (cpu in the
# unit suite; `test_local_ranks cuda` on a GPU machine).
UNIT_TESTS += $(B)/tests/test_local_ranks
$(B)/tests/test_local_ranks: $(call obj,tests/unit/test_local_ranks.c) $(PARALLEL_LIB) $(MODEL_LIB) $(CUDA_LIBS) \
		$(CPU_LIB) $(CKPT_LIB) $(NUMERICS_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS_BASE)
ifeq ($(CUDA),1)
# Expert buffers by capacity on the CUDA backend, one GPU without NCCL
# (tests/gpu/test_capacity_cuda.c; run on a GPU machine).
$(B)/tests/gpu/test_capacity_cuda: $(call obj,tests/gpu/test_capacity_cuda.c) $(PARALLEL_LIB) \
		$(MODEL_LIB) $(CUDA_LIBS) $(CPU_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(CUDA_LDLIBS) $(LDLIBS_BASE)
everything: $(B)/tests/gpu/test_capacity_cuda
endif

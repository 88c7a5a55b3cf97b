# Expert and data parallelism: communicators, the EP dispatcher, sharded
# AdamW, rank bootstrap. MPI is found through mpicc's flags or pkg-config
# (mpicc itself is not used); MPI=0 builds the single-rank communicator
# only, e.g. for a binary carried to a machine without MPI.
MPI ?= $(if $(MPI_CFLAGS_FOUND),1,0)
MPI_CFLAGS_FOUND := $(shell mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS_FOUND := $(shell mpicc --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null)
ifeq ($(MPI),1)
$(B)/obj/trainer/parallel/comm_mpi.o: CFLAGS += -DMOE_HAVE_MPI $(MPI_CFLAGS_FOUND)
# --as-needed: only binaries that contain the MPI communicator depend on libmpi
LDLIBS_BASE += -Wl,--as-needed $(MPI_LIBS_FOUND) -Wl,--no-as-needed
endif

# switching MPI=0/1 in one build directory rebuilds the communicator (and so
# relinks whatever contains it) rather than keeping the other kind
MPI_STAMP := $(B)/obj/mpi-$(MPI).stamp
$(MPI_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(B)/obj/mpi-*.stamp
	@touch $@
$(B)/obj/trainer/parallel/comm_mpi.o: $(MPI_STAMP)

PARALLEL_SRCS := trainer/parallel/comm.c trainer/parallel/comm_single.c \
	trainer/parallel/comm_mpi.c trainer/parallel/watchdog.c trainer/parallel/ranks.c \
	trainer/parallel/launch_env.c \
	trainer/parallel/rank_layout.c \
	trainer/parallel/dispatch_ep.c trainer/parallel/layout_io.c trainer/parallel/zero.c \
	trainer/parallel/comm_local.c trainer/parallel/dev_groups.c
PARALLEL_LIB := $(B)/lib/libmoe_parallel.a
$(PARALLEL_LIB): $(call obj,$(PARALLEL_SRCS)) $(if $(PARALLEL_NCCL_LIB),,$(call obj,trainer/parallel/comm_nccl.c))

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

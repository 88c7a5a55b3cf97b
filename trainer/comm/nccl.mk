# The NCCL communicator, when CUDA and nccl.h are there (a library of its own,
# linked by the programs that carry GPU ranks; without NCCL the stub of the
# same file, which says so, goes into the parallel library).
NCCL_HOME ?= $(CUDA_HOME)
ifeq ($(CUDA),1)
ifneq ($(wildcard $(NCCL_HOME)/include/nccl.h),)
PARALLEL_NCCL_LIB := $(B)/lib/libmoe_parallel_nccl.a
$(B)/obj/trainer/comm/comm_nccl.o: CFLAGS += -DMOE_HAVE_NCCL -I$(NCCL_HOME)/include
$(PARALLEL_NCCL_LIB): $(call obj,trainer/comm/comm_nccl.c)
NCCL_LDLIBS := -L$(NCCL_HOME)/lib64 -Wl,-rpath,$(NCCL_HOME)/lib64 -lnccl
endif
endif

# The communicators: one moe_comm interface (comm.h) and its transports,
# single-rank, MPI, NCCL and in-process ranks, with the collective watchdog.
# MPI is found through mpicc's flags or pkg-config
# (mpicc itself is not used); MPI=0 builds the single-rank communicator
# only, e.g. for a binary carried to a machine without MPI.
MPI ?= $(if $(MPI_CFLAGS_FOUND),1,0)
MPI_CFLAGS_FOUND := $(shell mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS_FOUND := $(shell mpicc --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null)
ifeq ($(MPI),1)
$(B)/obj/trainer/comm/comm_mpi.o: CFLAGS += -DMOE_HAVE_MPI $(MPI_CFLAGS_FOUND)
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
$(B)/obj/trainer/comm/comm_mpi.o: $(MPI_STAMP)

# Linked into libmoe_parallel.a (trainer/parallel/rules.mk). comm_nccl.c goes
# there too when NCCL is absent (its stub says so); with NCCL it is a library
# of its own (nccl.mk).
COMM_SRCS := trainer/comm/comm.c trainer/comm/comm_single.c trainer/comm/comm_mpi.c \
	trainer/comm/watchdog.c trainer/comm/comm_local.c \
	$(if $(PARALLEL_NCCL_LIB),,trainer/comm/comm_nccl.c)

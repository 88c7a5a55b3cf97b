# The kernel tracer (bench/kernel_trace.c): an LD_PRELOAD library over CUPTI,
# built when the toolkit ships CUPTI. CUPTI's library is copied beside it so
# the pair runs on a GPU machine whose toolkit lacks it.
ifeq ($(CUDA),1)
CUPTI_INC := $(firstword $(wildcard $(CUDA_HOME)/extras/CUPTI/include/cupti.h $(CUDA_HOME)/include/cupti.h))
CUPTI_LIB := $(firstword $(wildcard $(CUDA_HOME)/extras/CUPTI/lib64/libcupti.so $(CUDA_HOME)/lib/libcupti.so \
	$(CUDA_HOME)/lib64/libcupti.so))
ifneq ($(and $(CUPTI_INC),$(CUPTI_LIB)),)
KERNEL_TRACE := $(B)/tests/gpu/libkernel_trace.so
$(KERNEL_TRACE): bench/kernel_trace.c
	@mkdir -p $(dir $@)
	cp -L $(CUPTI_LIB) $(dir $@)/$(notdir $(shell readlink -f $(CUPTI_LIB)))
	$(CC) -std=c11 -O2 -Wall -Wextra -fPIC -shared -I$(dir $(CUPTI_INC)) -I$(CUDA_HOME)/include $< -o $@ \
		-L$(dir $@) -l:$(notdir $(shell readlink -f $(CUPTI_LIB))) -Wl,-rpath,'$$ORIGIN'
everything: $(KERNEL_TRACE)
endif
endif

# Checkpoint hashing and writing throughput (bench/ckpt_hash.c).
BENCH_CKPT_HASH := $(B)/tests/bench_ckpt_hash
$(BENCH_CKPT_HASH): $(call obj,bench/ckpt_hash.c) $(CKPT_LIB) $(NUMERICS_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)
everything: $(BENCH_CKPT_HASH)

# What opening a token store costs at any record count (bench/data/store_open.c),
# and the short-record corpus generator (bench/data/contigs.c).
BENCH_STORE_OPEN := $(B)/tests/bench_store_open
$(BENCH_STORE_OPEN): $(call obj,bench/data/store_open.c) $(DATA_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS_BASE)
BENCH_CONTIGS := $(B)/tests/contigs
$(BENCH_CONTIGS): $(call obj,bench/data/contigs.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ -lz -lm
everything: $(BENCH_STORE_OPEN) $(BENCH_CONTIGS)

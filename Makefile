# moekit build.
#   make            build everything (CUDA parts when nvcc is present; CUDA=0 to skip)
#   make test       build and run the whole test suite (unit, training, Slurm)
#   make unit       unit tests only
#   make SAN=1 ...  build into build-san/ with AddressSanitizer + UBSan
#   make install PREFIX=/opt/moekit
#
# Each module adds itself through a rules.mk fragment: it appends sources to a
# static library, binaries to BINS and unit-test binaries to UNIT_TESTS.

PREFIX ?= /usr/local
CC ?= cc
SAN ?= 0
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA ?= $(if $(NVCC),1,0)

ifeq ($(SAN),1)
B := build-san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT := -O1
else
B := build
SANFLAGS :=
OPT := -O2
endif

CFLAGS_BASE := -std=c11 $(OPT) -g -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -fPIC \
	-fopenmp $(SANFLAGS) -DMOE_CONFIG_DIR_DEFAULT='"$(abspath configs)"' \
	-DMOE_DATA_DIR_DEFAULT='"$(abspath data)"' -DMOE_SOURCE_DIR='"$(abspath .)"'
CFLAGS += $(CFLAGS_BASE)
LDFLAGS += -fopenmp $(SANFLAGS)
# libconfig is linked statically so binaries run on machines without it.
LIBCONFIG := -Wl,-Bstatic -lconfig -Wl,-Bdynamic
LDLIBS_BASE := -lz -lm -lpthread -ldl

BINS :=
UNIT_TESTS :=
ALL_LIBS :=

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

all: everything

include common/rules.mk
-include trainer/config/rules.mk
-include trainer/data/rules.mk
-include trainer/ckpt/rules.mk
-include trainer/rules.mk
-include topo/rules.mk
-include plugin/core.mk
-include plugin/rules.mk
-include tests/rules.mk

everything: $(BINS) $(UNIT_TESTS)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(B)/lib/%.a:
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

unit: $(UNIT_TESTS)
	@tests/run_unit.sh $(UNIT_TESTS)

test: everything
	@tests/run_all.sh $(B)

clean:
	rm -rf build build-san

.PHONY: all everything unit test clean install
-include $(shell find $(B)/obj $(B)/obj64 -name '*.d' 2>/dev/null)

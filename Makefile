# moekit build.
#   make            build everything (CUDA parts when nvcc is present; CUDA=0 to skip)
#   make test       build and run the whole test suite (unit, training, Slurm)
#   make unit       unit tests only
#   make SAN=1 ...  build into build-san/ with AddressSanitizer + UBSan
#   make install PREFIX=/opt/moekit [DESTDIR=/stage]   (make uninstall with the same)
#   make man        man pages from --help (help2man)
#
# Each module adds itself through a rules.mk fragment: it appends sources to a
# static library, binaries to BINS and unit-test binaries to UNIT_TESTS.

PREFIX ?= /usr/local
CC ?= cc
SAN ?= 0
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA ?= $(if $(NVCC),1,0)
# The toolkit root: the environment's CUDA_HOME, else the directory above the
# real nvcc (it may be a symlink or wrapper in /usr/local/bin), else the
# standard /usr/local/cuda; the first that holds cuda_runtime.h.
ifeq ($(strip $(CUDA_HOME)),)
override CUDA_HOME := $(firstword $(foreach d,$(patsubst %/bin/nvcc,%,$(realpath $(NVCC))) /usr/local/cuda,\
	$(if $(wildcard $(d)/include/cuda_runtime.h),$(d))))
endif

ifeq ($(SAN),1)
# the CUDA runtime and ASan's shadow memory do not mix: sanitizer builds are CPU-only
override CUDA := 0
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
# libcrypto (SHA-256 of checkpoints) likewise: the build machine's OpenSSL, not the job's.
CRYPTO := -Wl,-Bstatic -lcrypto -Wl,-Bdynamic
LDLIBS_BASE := $(CRYPTO) -lz -lm -lpthread -ldl

BINS :=
UNIT_TESTS :=
ALL_LIBS :=

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

all: everything

include common/rules.mk
include trainer/numerics/rules.mk
include trainer/config/rules.mk
include trainer/data/rules.mk
include trainer/ckpt/rules.mk
include trainer/lowp/rules.mk
include trainer/lowp/cuda.mk
include trainer/backend/cuda/rules.mk
include trainer/comm/nccl.mk
include trainer/comm/rules.mk
include trainer/dispatch/rules.mk
include trainer/build/rules.mk
include trainer/plan/rules.mk
include trainer/rules.mk
include trainer/parallel/rules.mk
include trainer/cmd/rules.mk
include launch/rules.mk
include topo/rules.mk
include plugin/rules.mk
include tests/plugin/rules.mk
include tests/rules.mk
include bench/rules.mk

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

# Everything CI runs: the full suite, then the CPU suite again under
# AddressSanitizer + UBSan (a shorter learning run; Slurm loads the plugin
# into daemons without the sanitizer runtime, so that suite runs once), the
# plugin and topology code under valgrind memcheck (plain build), and each
# libFuzzer harness for FUZZ_SECONDS (7 harnesses, about 3 minutes in all).
FUZZ_SECONDS ?= 20
check:
	$(MAKE) test
	tests/reliability/valgrind.sh build
	$(MAKE) SAN=1 everything
	MOE_TEST_QUICK=1 MOE_SKIP_SLURM=1 ASAN_OPTIONS=detect_leaks=1 tests/run_all.sh build-san
	tests/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build build-san

.PHONY: all everything unit test check clean install uninstall man
-include $(shell find $(B)/obj $(B)/obj64 -name '*.d' 2>/dev/null)

# Installs binaries, the plugin, configs, genomes, job scripts and man pages
# under PREFIX (staged under DESTDIR when given). Installed binaries find
# their configs and data relative to themselves (PREFIX/share/moekit, see
# common/install_dirs.h), so the tree can be staged, moved or copied; the
# plugin's trainer=, configs= and data= default to the same places.
# the job scripts, each whole (jobs/job_body.sh is already inside every .sbatch)
JOB_SCRIPTS := $(wildcard jobs/*.sbatch) jobs/chain.sh
MAN_PAGES := $(B)/man/moe-train.1 $(B)/man/moe-topo.1
HELP2MAN := help2man --no-info --no-discard-stderr
$(B)/man/moe-train.1: $(B)/bin/moe-train
	@mkdir -p $(dir $@)
	$(HELP2MAN) -n "train a Mixtral-style MoE model on genomes, or evaluate a checkpoint" -o $@ $<
$(B)/man/moe-topo.1: $(B)/bin/moe-topo
	@mkdir -p $(dir $@)
	$(HELP2MAN) -n "show a node's GPUs and the moekit SPANK plugin's verdict" -o $@ $<
man: $(MAN_PAGES)

INSTALLED_DIRS := bin lib/moekit share/moekit/configs share/moekit/data share/moekit/jobs \
	share/man/man1
install: everything $(MAN_PAGES)
	install -d $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED_DIRS))
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	if [ -f $(B)/lib/spank_moe.so ]; then install -m 755 $(B)/lib/spank_moe.so $(DESTDIR)$(PREFIX)/lib/moekit/; fi
	install -m 644 configs/*.cfg $(DESTDIR)$(PREFIX)/share/moekit/configs/
	install -m 644 data/*.gz data/README.md $(DESTDIR)$(PREFIX)/share/moekit/data/
	install -m 755 $(JOB_SCRIPTS) $(DESTDIR)$(PREFIX)/share/moekit/jobs/
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(PREFIX)/share/man/man1/
	@echo "plugstack.conf line: required $(PREFIX)/lib/moekit/spank_moe.so allow_cpu=no" \
		"(trainer=, configs= and data= default to this prefix)"

# Removes exactly what install wrote, then the directories it made if empty.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(BINS))) \
		$(DESTDIR)$(PREFIX)/lib/moekit/spank_moe.so \
		$(addprefix $(DESTDIR)$(PREFIX)/share/moekit/configs/,$(notdir $(wildcard configs/*.cfg))) \
		$(addprefix $(DESTDIR)$(PREFIX)/share/moekit/data/,$(notdir $(wildcard data/*.gz)) README.md) \
		$(addprefix $(DESTDIR)$(PREFIX)/share/moekit/jobs/,$(notdir $(JOB_SCRIPTS))) \
		$(addprefix $(DESTDIR)$(PREFIX)/share/man/man1/,$(notdir $(MAN_PAGES)))
	-rmdir $(DESTDIR)$(PREFIX)/lib/moekit $(DESTDIR)$(PREFIX)/share/moekit/configs \
		$(DESTDIR)$(PREFIX)/share/moekit/data $(DESTDIR)$(PREFIX)/share/moekit/jobs \
		$(DESTDIR)$(PREFIX)/share/moekit 2>/dev/null

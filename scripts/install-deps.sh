#!/bin/bash
# Debian/Ubuntu packages moekit needs (run as root).
#
#   scripts/install-deps.sh build   what `make` and `make install` need
#   scripts/install-deps.sh test    what the test suite adds (`make check`)
#   scripts/install-deps.sh         both
#
# Build: the compiler, libconfig, zlib, libssl-dev (libcrypto, whose SHA-256
# hashes checkpoints), hwloc (libhwloc-plugins for PCI
# devices), libslurm-dev for the spank.h the plugin is built against (a plugin
# must match the Slurm it runs in), Open MPI for CPU ranks, protobuf-c for the
# TensorBoard event records, gnuplot for loss.png and help2man for the man
# pages. Test: the Slurm daemons and munge for the local test cluster,
# valgrind, python3 for the readers of what moekit writes, and clang for the
# libFuzzer harnesses (tests/fuzz/run.sh).
# Open MPI must be installed before slurmd starts, or srun --mpi=pmix steps
# hang: it is in the build set, which `test` installs first.
set -euo pipefail
build=(build-essential libconfig-dev zlib1g-dev libssl-dev libhwloc-dev libhwloc-plugins hwloc
       libslurm-dev openmpi-bin libopenmpi-dev libprotobuf-c-dev protobuf-c-compiler
       gnuplot-nox help2man)
test=(python3 valgrind slurmctld slurmd slurm-client munge clang libclang-rt-14-dev)
case ${1:-all} in
    build) pkgs=("${build[@]}") ;;
    test | all) pkgs=("${build[@]}" "${test[@]}") ;;
    *) echo "usage: scripts/install-deps.sh [build|test]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "moekit: ${1:-build and test} dependencies present"

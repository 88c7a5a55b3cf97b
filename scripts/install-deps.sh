#!/bin/bash
# Debian/Ubuntu packages moekit needs to build and test (run as root).
# libslurm-dev brings the spank.h the plugin is built against (a plugin must
# match the Slurm it runs in); the daemons are for the local test cluster;
# clang builds the libFuzzer harnesses (tests/fuzz/run.sh); libssl-dev brings
# libcrypto, whose SHA-256 hashes checkpoints.
# Open MPI (CPU ranks) must be installed before slurmd starts, or srun
# --mpi=pmix steps hang.
set -euo pipefail
pkgs=(build-essential libconfig-dev zlib1g-dev libssl-dev libhwloc-dev libhwloc-plugins hwloc
      gnuplot-nox python3 valgrind libslurm-dev slurmctld slurmd slurm-client munge
      openmpi-bin libopenmpi-dev clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "moekit: build dependencies present"

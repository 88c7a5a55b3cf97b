#!/bin/bash
# Debian/Ubuntu packages moekit needs to build and test (run as root).
# Slurm's own packages are installed by tests/slurm/run.sh and by
# scripts/slurm-local.sh when a local cluster is started.
set -euo pipefail
pkgs=(build-essential libconfig-dev zlib1g-dev libhwloc-dev libhwloc-plugins hwloc
      gnuplot-nox python3 valgrind)
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

#!/bin/bash
# moekit quickstart: from a fresh Debian/Ubuntu machine (as root) to a trained L0_sanity model,
# submitted the way users submit on a cluster.
#
#   scripts/quickstart.sh
#
# Installs the build and Slurm packages, builds moekit, starts a private one-node Slurm cluster
# under runs/quickstart/slurm with the moekit plugin (CPU training allowed, since this machine may
# have no GPU), submits `sbatch --moe-config=L0_sanity jobs/sanity.sbatch` on one task, waits for
# it, shows what the plugin decided and how training went, and stops the cluster again.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
run=$repo/runs/quickstart
cluster=$run/slurm

if [ "$(id -u)" -ne 0 ]; then
    echo "quickstart: run as root (it installs packages and starts munged, slurmctld, slurmd)" >&2
    exit 1
fi
scripts/install-deps.sh build
scripts/slurm-local.sh install
make -j"$(nproc)" everything

rm -rf "$run"
mkdir -p "$run"
scripts/slurm-local.sh start "$cluster" --gpu-type h200 --gpus 2 \
    --plugin "$repo/build/lib/spank_moe.so" \
    --plugin-arg "trainer=$repo/build/bin/moe-train" \
    --plugin-arg "configs=$repo/configs" \
    --plugin-arg allow_cpu=yes --plugin-arg bind=no
trap 'scripts/slurm-local.sh stop "$cluster" >/dev/null 2>&1 || true' EXIT
export SLURM_CONF=$cluster/etc/slurm.conf

# One task and no GPU (--gres=none clears the script's request): this machine trains on its
# CPUs, and one rank runs all experts.
id=$(sbatch --parsable --ntasks-per-node=1 --gres=none --cpus-per-task="$(nproc)" \
    --moe-config=L0_sanity --moe-ep=1 \
    "--moe-set=checkpoint.ckpt_dir=$run/ckpt,logger.run_dir=$run/metrics" \
    -o "$run/sanity-%j.out" jobs/sanity.sbatch)
echo "quickstart: submitted job $id: sbatch --moe-config=L0_sanity jobs/sanity.sbatch"
state=
for _ in $(seq 1 900); do
    state=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $state in PENDING|RUNNING|CONFIGURING|COMPLETING|"") sleep 1 ;; *) break ;; esac
done
out=$run/sanity-$id.out
cat "$out"
echo
echo "quickstart: job $id $state"
if [ "$state" != COMPLETED ]; then
    exit 1
fi
echo "quickstart: metrics $run/metrics/metrics.jsonl, loss curve $run/metrics/loss.png"
echo "quickstart: checkpoints in $run/ckpt (final_model loads with MixtralForCausalLM.from_pretrained)"

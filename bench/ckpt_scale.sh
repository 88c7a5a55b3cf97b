#!/bin/bash
# Sharded checkpoints of a ~218M-parameter model on CPU ranks: the save at
# 1, 2 and 4 ranks (EP = ranks), then resumes at another layout, each line
# as moe-train reports it (bytes, seconds, rank 0's resident memory before
# and at the peak of the save; bytes read by a resume).
#   bench/ckpt_scale.sh [BUILD_DIR] [CKPT_ROOT]
# CKPT_ROOT defaults to a directory under /tmp (the machine's disk); a
# tmpfs (/dev/shm/...) leaves out the disk and measures the CPU side;
# SAVE_ONLY=1 measures the saves alone, keeping one checkpoint at a time.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
D=${2:-$(mktemp -d /tmp/moekit-ckpt-scale-XXXXXX)}
mkdir -p "$D"
MPI=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
# 4 layers of 8 experts 1024 -> 2048 -> 1024: 201M expert and 17M dense parameters
CFG=(--config L0_sanity --threads 1 model.hidden_size=1024 model.num_layers=4 model.num_heads=8
     model.num_kv_heads=8 model.head_dim=128 model.num_experts=8 model.top_k=2
     model.intermediate_size=2048 train.seq_length=32 train.micro_batch_size=1
     scheduler.warmup_steps=0 train.eval_every_n_steps=0 train.eval_batches=1
     checkpoint.save_final_model=false parallel.timeout_s=3600)
run() { # RANKS ARGS...
    local n=$1; shift
    "${MPI[@]}" -n "$n" "$B/bin/moe-train" "${CFG[@]}" parallel.ep="$n" "$@" 2>&1 |
        grep -E "^ckpt|resuming|params|error|moe-train:"
}
for n in 1 2 4; do
    echo "== save at $n rank(s)"
    rm -rf "$D/ck$n"
    run "$n" train.steps=1 checkpoint.ckpt_dir="$D/ck$n"
    du -sb "$D/ck$n/step_00000001" | awk '{ printf "   on disk: %.0f bytes\n", $1 }'
    [ "${SAVE_ONLY:-0}" = 1 ] && rm -rf "$D/ck$n"
done
[ "${SAVE_ONLY:-0}" = 1 ] && exit 0
echo "== resume 1 -> 4 ranks, 4 -> 1, 2 -> 4"
run 4 train.steps=2 checkpoint.ckpt_dir="$D/ck1" checkpoint.resume_from_checkpoint=true
run 1 train.steps=2 checkpoint.ckpt_dir="$D/ck4" checkpoint.resume_from_checkpoint=true
run 4 train.steps=2 checkpoint.ckpt_dir="$D/ck2" checkpoint.resume_from_checkpoint=true
echo "== export of the 4-rank checkpoint (bf16, 5GB shards)"
/usr/bin/time -f "   %e s, max RSS %M KB" "$B/bin/moe-train" export --checkpoint "$D/ck4/step_00000001" \
    --out "$D/hf4" --staging-mb 256
ls -l "$D/hf4" | awk 'NR > 1 { print "  ", $5, $9 }'

#!/bin/bash
# The two-GPU checks, run on a machine with two NVIDIA GPUs (not in CI). Ranks are started
# without MPI: they meet over NCCL at NCCL_COMM_ID, with MOE_WORLD_SIZE / MOE_RANK /
# MOE_LOCAL_RANK (each rank takes GPU MOE_LOCAL_RANK).
#   1. NCCL's communicator on each GPU (test_parallel_nccl);
#   2. L0_sanity for STEPS steps at EP=2 and at DP=2 on the two GPUs (micro-batch 4 a rank)
#      against one GPU (micro-batch 8: the same global batch), bf16 and fp8_block: every
#      step's loss within bf16 tolerance (2%), and the same against the CPU reference (fp32);
#      EP=2 with the expert exchange overlapped, with and without recompute;
#   3. the distributed optimizer over NCCL: DP=2 with bf16 moments against one GPU with bf16
#      moments; DP=2 saved at step STEPS/2 and resumed (EP=2) to the end: every step's loss as
#      the uninterrupted DP=2 run's;
#   4. rank 1 killed mid-run: rank 0 ends within parallel.timeout_s plus a margin, with an
#      error that names rank 1.
# Usage: tests/gpu/run_2gpu.sh [BUILD_DIR]; last line "gpu2: N passed, N failed".
set -u
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/$B/bin/moe-train
T=$(mktemp -d /tmp/moekit-gpu2-XXXXXX)
STEPS=${MOE_GPU2_STEPS:-30}
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok $1"; }
bad() { failed=$((failed + 1)); echo "not ok $1: $2"; }

n_gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
if [ "$n_gpus" -lt 2 ]; then
    echo "gpu2: this machine shows $n_gpus GPU(s); the checks need two"
    echo "gpu2: 0 passed, 1 failed"
    exit 1
fi

for g in 0 1; do
    if CUDA_VISIBLE_DEVICES=$g "$ROOT/$B/tests/gpu/test_parallel_nccl" > "$T/nccl_$g.log" 2>&1 &&
        tail -1 "$T/nccl_$g.log" | grep -q ' 0 failed$'; then
        ok "nccl_on_gpu_$g"
    else
        bad "nccl_on_gpu_$g" "$(tail -3 "$T/nccl_$g.log")"
    fi
done

L0=(--config L0_sanity train.steps=$STEPS train.eval_every_n_steps=0 logger.frequency=1)
port=$((29500 + RANDOM % 2000))
# one NAME BACKEND ARGS...: a one-rank run with its metrics under $T/NAME
one() {
    local name=$1 be=$2; shift 2
    "$BIN" "${L0[@]}" --backend "$be" logger.run_dir="$T/$name" "$@" > "$T/$name.log" 2>&1
}
# pair NAME ARGS...: two ranks on the two GPUs, over NCCL
pair() {
    local name=$1; shift
    port=$((port + 1))
    for r in 0 1; do
        NCCL_COMM_ID=127.0.0.1:$port MOE_WORLD_SIZE=2 MOE_RANK=$r MOE_LOCAL_RANK=$r \
            "$BIN" "${L0[@]}" --backend cuda logger.run_dir="$T/$name" "$@" > "$T/$name.$r.log" 2>&1 &
    done
    wait
}
# close A B TOL: every step's loss of run A within TOL (relative) of run B's, side by side
close() {
    python3 - "$T/$1/metrics.jsonl" "$T/$2/metrics.jsonl" "$3" "$1" "$2" <<'PY'
import json, sys
def losses(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        if "loss" in r:
            out[r["step"]] = r["loss"]
    return out
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if not a or sorted(a) != sorted(b):
    sys.exit("steps %s vs %s" % (sorted(a), sorted(b)))
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in a)
for s in sorted(a):
    if s in (1, 2, 5, 10, 20) or s % 10 == 0 or s == max(a):
        print("    step %3d  %-14s %.5f  %-14s %.5f" % (s, sys.argv[4], a[s], sys.argv[5], b[s]))
print("    worst relative difference %.2e over %d steps" % (worst, len(a)))
sys.exit(0 if worst <= tol else 1)
PY
}

one cpu_ref cpu train.micro_batch_size=8
for prec in bf16 fp8_block; do
    one "gpu1_$prec" cuda train.micro_batch_size=8 precision.compute=$prec
    for layout in "ep2 parallel.ep=2 parallel.dp=1" "dp2 parallel.ep=1 parallel.dp=2"; do
        set -- $layout
        name="${1}_$prec"; shift
        pair "$name" train.micro_batch_size=4 precision.compute=$prec "$@"
        if grep -q "over 2 ranks" "$T/$name.0.log" && close "$name" "gpu1_$prec" 0.02; then
            ok "${name}_matches_one_gpu"
        else
            bad "${name}_matches_one_gpu" "$(tail -3 "$T/$name.0.log")"
        fi
    done
done
if close ep2_bf16 cpu_ref 0.02; then ok ep2_bf16_matches_cpu; else bad ep2_bf16_matches_cpu "see above"; fi
# the expert exchange overlapped with the experts (two passes a layer, each pass's exchange on
# NCCL's stream beside the other's GEMMs), with and without recompute: as the run without
for rc in false true; do
    name=ep2_overlap_recompute_$rc
    pair "$name" train.micro_batch_size=4 precision.compute=bf16 parallel.ep=2 parallel.dp=1 \
        parallel.overlap_expert_exchange=true train.activation_recompute=$rc
    if grep -q "over 2 ranks" "$T/$name.0.log" && close "$name" gpu1_bf16 0.02; then
        ok "${name}_matches_one_gpu"
    else
        bad "${name}_matches_one_gpu" "$(tail -3 "$T/$name.0.log")"
    fi
done

# the distributed optimizer's state: bf16 moments, and a checkpoint taken at DP=2 resumed at EP=2
one gpu1_bf16mom cuda train.micro_batch_size=8 precision.compute=bf16 optimizer.moments_dtype=bf16
pair dp2_bf16mom train.micro_batch_size=4 precision.compute=bf16 optimizer.moments_dtype=bf16 \
    parallel.ep=1 parallel.dp=2
if close dp2_bf16mom gpu1_bf16mom 0.02; then ok dp2_bf16_moments_matches_one_gpu
else bad dp2_bf16_moments_matches_one_gpu "$(tail -3 "$T/dp2_bf16mom.0.log")"; fi
half=$((STEPS / 2))
pair dp2_first train.micro_batch_size=4 precision.compute=bf16 parallel.ep=1 parallel.dp=2 \
    train.steps=$STEPS checkpoint.ckpt_dir="$T/ck" checkpoint.save_every_n_steps=$half \
    --stop-after-steps $half
pair dp2_resumed train.micro_batch_size=4 precision.compute=bf16 parallel.ep=2 parallel.dp=1 \
    train.steps=$STEPS checkpoint.ckpt_dir="$T/ck" checkpoint.resume_from_checkpoint=true
python3 - "$T/dp2_bf16/metrics.jsonl" "$T/dp2_resumed/metrics.jsonl" "$half" <<'PY' \
    && ok dp2_checkpoint_resumes_at_ep2 || bad dp2_checkpoint_resumes_at_ep2 "$(tail -3 "$T/dp2_resumed.0.log")"
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b, half = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
late = [s for s in b if s > half]
if not late or min(b) <= half:
    sys.exit("resumed run logged steps %s" % sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in late)
print("    resumed at step %d: worst relative loss difference %.2e" % (half, worst))
sys.exit(0 if worst <= 0.02 else 1)
PY

# a rank killed mid-run: the other ends, naming it, within the timeout (20 s) plus a margin
port=$((port + 1))
t0=$(date +%s)
for r in 0 1; do
    NCCL_COMM_ID=127.0.0.1:$port MOE_WORLD_SIZE=2 MOE_RANK=$r MOE_LOCAL_RANK=$r \
        "$BIN" --config L0_sanity --backend cuda train.steps=100000 parallel.ep=2 parallel.dp=1 \
        train.micro_batch_size=4 parallel.timeout_s=20 logger.frequency=10 \
        logger.run_dir="$T/kill" > "$T/kill.$r.log" 2>&1 &
    pids[$r]=$!
done
for _ in $(seq 1 120); do grep -q "^step" "$T/kill.0.log" && break; sleep 1; done
sleep 3
kill -9 "${pids[1]}"
t1=$(date +%s)
wait "${pids[0]}"
rc=$?
t2=$(date +%s)
if [ "$rc" -ne 0 ] && [ $((t2 - t1)) -le 60 ] && grep -qE "rank 1\b" "$T/kill.0.log"; then
    ok "killed_rank_named_within_timeout ($((t2 - t1)) s)"
else
    bad killed_rank_named_within_timeout "rc $rc after $((t2 - t1)) s (started $((t1 - t0)) s): $(tail -2 "$T/kill.0.log")"
fi

[ -n "${MOE_GPU_LOG_DIR:-}" ] && cp "$T"/*.log "$MOE_GPU_LOG_DIR"/ 2>/dev/null
echo "gpu2: $passed passed, $failed failed"
rm -rf "$T"
[ "$failed" -eq 0 ]

#!/bin/bash
# Expert and data parallelism on CPU ranks through mpirun: EP=2, DP=2 and
# EP=2 x DP=2 train exactly like one rank on the same global batch (losses
# and weights within fp32 reduction-order tolerance), skewed routing (one
# rank gets every token, the other none), a run saved at one EP/DP resumes
# at another, and a rank that hangs (SIGSTOP) or dies (SIGKILL) mid-run ends
# every rank within 2 x parallel.timeout_s, the hang with the watchdog naming
# the collective, the group and the absent rank.
# Usage: tests/parallel/run.sh [BUILD_DIR]
set -u
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/$B/bin/moe-train
TOOL="python3 $ROOT/tests/parallel/st_tool.py"
T=$(mktemp -d /tmp/moekit-parallel-XXXXXX)
[ -n "${MOE_KEEP_TMP:-}" ] || trap 'rm -rf "$T"' EXIT # (the fault cases below widen it)
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok $1"; }
bad() { failed=$((failed + 1)); echo "not ok $1"; shift; printf '  %s\n' "$@"; }

if ! command -v mpirun >/dev/null 2>&1; then
    echo "parallel: mpirun not found (scripts/install-deps.sh installs Open MPI); suite skipped"
    echo "parallel: 0 passed, 0 failed"
    exit 0
fi
# as root Open MPI wants --allow-run-as-root; two cores host up to 4 ranks
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS
        -x UBSAN_OPTIONS)
# Open MPI keeps thousands of small allocations alive at exit (seen: 121 KB in 3,350 blocks, all
# from libmpi/libopen-pal), which LeakSanitizer would report and turn into exit 1; leaks of
# moekit's own code are caught by the single-process suites, so they are off here (last wins).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 UBSAN_OPTIONS=${UBSAN_OPTIONS:-}
TINY=(--config L0_sanity model.hidden_size=16 model.num_layers=2 model.num_heads=2
      model.num_kv_heads=1 model.head_dim=8 model.num_experts=4 model.top_k=2
      model.intermediate_size=16 train.seq_length=32 train.steps=4 scheduler.warmup_steps=1
      train.eval_batches=2 checkpoint.save_every_n_steps=2)
STEPS=4

# train NAME RANKS ARGS...: a run with its metrics and checkpoints under $T/NAME
train() {
    local name=$1 n=$2; shift 2
    if [ "$n" = 1 ]; then
        "$BIN" "${TINY[@]}" --threads 1 logger.run_dir="$T/$name" checkpoint.ckpt_dir="$T/$name/ck" \
            "$@" >"$T/$name.out" 2>&1
    else
        "${MPIRUN[@]}" ${MOE_MPI_MAX_COUNT:+-x MOE_MPI_MAX_COUNT} -n "$n" "$BIN" "${TINY[@]}" \
            logger.run_dir="$T/$name" \
            checkpoint.ckpt_dir="$T/$name/ck" "$@" >"$T/$name.out" 2>&1
    fi
}

# same_metrics A B FIRST_STEP: every logged number of steps >= FIRST_STEP agrees
same_metrics() {
    python3 - "$T/$1/metrics.jsonl" "$T/$2/metrics.jsonl" "$3" <<'PY'
import json, sys
def rows(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        out.setdefault(r["step"], {}).update(r)
    return {s: r for s, r in out.items() if s >= int(sys.argv[3])}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("steps %s vs %s" % (sorted(a), sorted(b)))
for s in sorted(a):
    for k in ("loss", "aux_loss", "grad_norm", "val_loss", "tokens"):
        if (k in a[s]) != (k in b[s]):
            sys.exit("step %d: %s logged by one run only" % (s, k))
        if k in a[s] and abs(a[s][k] - b[s][k]) > 2e-5 * max(1.0, abs(a[s][k])):
            sys.exit("step %d: %s %.6f vs %.6f" % (s, k, a[s][k], b[s][k]))
PY
}

# matches NAME REF: losses, moments and weights of NAME equal those of REF
matches() {
    local name=$1 ref=$2 why
    why=$(same_metrics "$ref" "$name" 1 2>&1) || { bad "$name" "$why" "$(tail -5 "$T/$name.out")"; return; }
    local last; last=$(printf 'step_%08d' $STEPS)
    why=$($TOOL diff "$T/$ref/ck/$last" "$T/$name/ck/$last" 2e-5 2>&1) ||
        { bad "$name" "weights and moments: $why"; return; }
    ok "$name"
}

# ---- the one-rank references: micro-batch x world windows per step
train ref4 1 train.micro_batch_size=4 || bad ref4 "$(tail -5 "$T/ref4.out")"
train ref4acc 1 train.micro_batch_size=4 train.grad_accum_steps=2 ||
    bad ref4acc "$(tail -5 "$T/ref4acc.out")"

# ---- the same math over ranks
train ep2 2 train.micro_batch_size=2 parallel.ep=2 parallel.dp=1 && grep -q "EP=2 x DP=1 over 2 ranks" "$T/ep2.out" &&
    matches ep2 ref4 || [ -f "$T/ep2/metrics.jsonl" ] || bad ep2 "$(tail -5 "$T/ep2.out")"
train dp2 2 train.micro_batch_size=2 parallel.ep=1 parallel.dp=2 && grep -q "EP=1 x DP=2 over 2 ranks" "$T/dp2.out" &&
    matches dp2 ref4 || [ -f "$T/dp2/metrics.jsonl" ] || bad dp2 "$(tail -5 "$T/dp2.out")"
train ep2dp2_accum 4 train.micro_batch_size=1 train.grad_accum_steps=2 parallel.ep=2 parallel.dp=2 &&
    grep -q "EP=2 x DP=2 over 4 ranks (EP groups: ranks 0-1, 2-3)" "$T/ep2dp2_accum.out" &&
    matches ep2dp2_accum ref4acc || [ -f "$T/ep2dp2_accum/metrics.jsonl" ] ||
    bad ep2dp2_accum "$(tail -5 "$T/ep2dp2_accum.out")"

# activation recompute changes memory, not math: the same losses and weights, one rank and EP=2
train ref4_recompute 1 train.micro_batch_size=4 train.activation_recompute=true &&
    matches ref4_recompute ref4 || [ -f "$T/ref4_recompute/metrics.jsonl" ] ||
    bad ref4_recompute "$(tail -5 "$T/ref4_recompute.out")"
train ep2_recompute 2 train.micro_batch_size=2 parallel.ep=2 parallel.dp=1 train.activation_recompute=true &&
    matches ep2_recompute ref4 || [ -f "$T/ep2_recompute/metrics.jsonl" ] ||
    bad ep2_recompute "$(tail -5 "$T/ep2_recompute.out")"

# MPI's int counts carried in pieces: every collective cut into messages of 7 elements
# (MOE_MPI_MAX_COUNT), the same math as one rank
MOE_MPI_MAX_COUNT=7 train ep2dp2_pieces 4 train.micro_batch_size=1 train.grad_accum_steps=2 \
    parallel.ep=2 parallel.dp=2 parallel.grad_bucket_mb=1 &&
    grep -q "MPI messages go in pieces of at most 7 elements" "$T/ep2dp2_pieces.out" &&
    matches ep2dp2_pieces ref4acc || [ -f "$T/ep2dp2_pieces/metrics.jsonl" ] ||
    bad ep2dp2_pieces "$(tail -5 "$T/ep2dp2_pieces.out")"

# the distributed optimizer's state: moments per rank fall as DP grows
mom() { sed -nE 's/.* ([0-9.]+) MiB (AdamW moments|optimizer shard).*/\1/p' "$T/$1.out"; }
if [ -n "$(mom ref4)" ] && [ -n "$(mom dp2)" ] &&
    python3 -c "import sys; sys.exit(not float('$(mom dp2)') < 0.6 * float('$(mom ref4)'))"; then
    ok moments_sharded_over_dp
else
    bad moments_sharded_over_dp "one rank $(mom ref4) MiB, DP=2 $(mom dp2) MiB per rank"
fi

# ---- skewed routing: every token picks experts 0 and 1 (rank 0's); rank 1 gets none
"$BIN" export --checkpoint "$T/ref4/ck/step_00000004" --out "$T/skewinit" --dtype fp32 >/dev/null
$TOOL skew "$T/skewinit/model.safetensors" 2
train skew_ref 1 train.micro_batch_size=4 checkpoint.init_from="$T/skewinit"
train skew_ep2 2 train.micro_batch_size=2 parallel.ep=2 checkpoint.init_from="$T/skewinit"
if grep -q '"aux_loss":4.000000' "$T/skew_ref/metrics.jsonl" 2>/dev/null; then
    matches skew_ep2 skew_ref
else
    bad skew_ep2 "the skewed start did not route every token to experts 0 and 1" \
        "$(head -2 "$T/skew_ref/metrics.jsonl" 2>&1)"
fi

# ---- expert buffers by capacity: room for a fifth of the skewed rows, so they run in passes
# (rank 0 gets every row), and a third of balanced rows with recompute: the one-pass bits
# a metrics file without what the clock decides (wall time, rates, memory)
learned() {
    python3 -c 'import json, sys
clock = ("time", "elapsed_s", "tokens_per_s", "tflops", "mfu", "mem_bytes")
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(json.dumps({k: v for k, v in d.items() if k not in clock}, sort_keys=True))' "$1"
}
same_bits() { # NAME REF: every logged number and checkpoint byte equal (same layout:
    # the same rank files, the same index)
    local a=$T/$1/ck/step_00000004 b=$T/$2/ck/step_00000004 f same=1
    [ -s "$T/$1/metrics.jsonl" ] &&
        [ "$(learned "$T/$1/metrics.jsonl")" = "$(learned "$T/$2/metrics.jsonl")" ] || same=0
    cmp -s "$a/checkpoint.index.json" "$b/checkpoint.index.json" || same=0
    for f in "$b"/rank-*.safetensors; do
        cmp -s "$a/$(basename "$f")" "$f" || same=0
    done
    if [ $same = 1 ]; then
        ok "$1"
    else
        bad "$1" "differs from $2" "$(tail -3 "$T/$1.out")"
    fi
}
train skew_ep2_passes 2 train.micro_batch_size=2 parallel.ep=2 checkpoint.init_from="$T/skewinit" \
    parallel.expert_capacity_factor=0.2
same_bits skew_ep2_passes skew_ep2
train ep2_recompute_passes 2 train.micro_batch_size=2 parallel.ep=2 parallel.dp=1 \
    train.activation_recompute=true parallel.expert_capacity_factor=0.3
same_bits ep2_recompute_passes ep2_recompute
# the exchange overlapped: two passes or more a layer, the same bits over MPI
train skew_ep2_overlap 2 train.micro_batch_size=2 parallel.ep=2 checkpoint.init_from="$T/skewinit" \
    parallel.overlap_expert_exchange=true
same_bits skew_ep2_overlap skew_ep2
train ep2_recompute_overlap 2 train.micro_batch_size=2 parallel.ep=2 parallel.dp=1 \
    train.activation_recompute=true parallel.overlap_expert_exchange=true
same_bits ep2_recompute_overlap ep2_recompute

# ---- resume at another layout: the next steps equal the straight run
# resume NAME RANKS STOP_ARGS -- RANKS2 RESUME_ARGS: stop after 2 steps at one
# layout, resume at another; the next steps equal the straight run
resume() {
    local name=$1 n=$2; shift 2
    local a=() b=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
    shift; local n2=$1; shift; b=("$@")
    train "$name" "$n" --stop-after-steps 2 "${a[@]}"
    local rc=$?
    if [ $rc -ne 75 ]; then bad "$name" "exit $rc, expected 75 (stopped, saved)" "$(tail -5 "$T/$name.out")"; return; fi
    resume_from "$name" "$T/$name/ck" "$n2" "${b[@]}"
}
# resume_from NAME CKPT_DIR RANKS ARGS: resume CKPT_DIR's step 2 there
resume_from() {
    local name=$1 ck=$2 n=$3; shift 3
    if [ "$n" = 1 ]; then
        "$BIN" "${TINY[@]}" --threads 1 logger.run_dir="$T/$name.1" checkpoint.resume_from_checkpoint=true \
            checkpoint.ckpt_dir="$ck" "$@" >"$T/$name.1.out" 2>&1
    else
        "${MPIRUN[@]}" -n "$n" "$BIN" "${TINY[@]}" logger.run_dir="$T/$name.1" \
            checkpoint.resume_from_checkpoint=true checkpoint.ckpt_dir="$ck" "$@" >"$T/$name.1.out" 2>&1
    fi || { bad "$name" "the resume failed" "$(tail -5 "$T/$name.1.out")"; return; }
    local why
    why=$(same_metrics ref4 "$name.1" 3 2>&1) || { bad "$name" "$why"; return; }
    grep -q "resuming from .*step_00000002" "$T/$name.1.out" || { bad "$name" "did not resume"; return; }
    why=$($TOOL diff "$T/ref4/ck/step_00000004" "$ck/step_00000004" 2e-5 2>&1) ||
        { bad "$name" "weights and moments: $why"; return; }
    ok "$name"
}
resume resume_ep2_to_ep1 2 train.micro_batch_size=2 parallel.ep=2 parallel.dp=1 -- 1 train.micro_batch_size=4
resume resume_dp2_to_dp1 2 train.micro_batch_size=2 parallel.ep=1 parallel.dp=2 -- 1 train.micro_batch_size=4
resume resume_ep1_to_ep2 1 train.micro_batch_size=4 -- 2 train.micro_batch_size=2 parallel.ep=2 parallel.dp=1
resume resume_ep2_to_ep2dp2 2 train.micro_batch_size=2 parallel.ep=2 parallel.dp=1 -- 4 \
    train.micro_batch_size=1 parallel.ep=2 parallel.dp=2
# a single-file checkpoint of earlier moekit versions (model.safetensors +
# optimizer.safetensors, MANIFEST version 1), written by the ref4 run's
# config at step 2, resumes at EP=1 and at EP=2
for n in 1 2; do
    mkdir -p "$T/v1_$n/ck" && cp -r "$ROOT/tests/data/ckpt_v1/step_00000002" "$T/v1_$n/ck/"
    if [ $n = 1 ]; then
        resume_from "resume_single_file_v1_ep1" "$T/v1_$n/ck" 1 train.micro_batch_size=4
    else
        resume_from "resume_single_file_v1_ep2" "$T/v1_$n/ck" 2 train.micro_batch_size=2 parallel.ep=2 parallel.dp=1
    fi
done

# ---- MPI must agree with what the launcher promised
refused() { # NAME PATTERN CMD...: a non-zero exit, PATTERN in its output
    local name=$1 pat=$2; shift 2
    "$@" >"$T/$name.out" 2>&1; local rc=$?
    if [ $rc -ne 0 ] && grep -q -- "$pat" "$T/$name.out"; then
        ok "$name"
    else
        bad "$name" "exit $rc" "$(tail -5 "$T/$name.out")"
    fi
}
refused mpi_size_checked "MOE_WORLD_SIZE = 3 ranks but MPI sees 2" \
    env MOE_WORLD_SIZE=3 "${MPIRUN[@]}" -x MOE_WORLD_SIZE -n 2 "$BIN" "${TINY[@]}" parallel.ep=2

# a task the plugin placed as one of 2 ranks but started without an MPI launcher (srun
# --mpi=none): GPU ranks would meet over NCCL at MOE_MASTER_*; CPU ranks need MPI; never one rank
refused single_rank_world_refused "world of 2 ranks but not where they meet: MOE_MASTER_ADDR is unset" \
    env MOE_WORLD_SIZE=2 MOE_RANK=0 "$BIN" "${TINY[@]}"
refused cpu_ranks_need_mpi "the cpu backend's ranks exchange over MPI" \
    env MOE_WORLD_SIZE=2 MOE_RANK=0 MOE_MASTER_ADDR=127.0.0.1 MOE_MASTER_PORT=29999 "$BIN" \
    "${TINY[@]}" --backend cpu
refused torchrun_half_set_refused "torchrun gives a world of 2 ranks but not where they meet" \
    env WORLD_SIZE=2 RANK=1 "$BIN" "${TINY[@]}"

# ---- a rank that dies or hangs mid-run ends every rank within 2 x parallel.timeout_s
# Two ranks train a long run (no checkpoints, whose saves get a longer allowance) with a 3 s
# timeout; at a random instant of the run one rank gets SIGKILL (a death: mpirun sees it) or
# SIGSTOP (a hang: only moekit's watchdog can tell). Every process of the job must be gone
# within 2 x 3 s, with a non-zero exit and, for the hang, the watchdog's line on stderr naming
# the collective, the group and the rank that did not arrive. MOE_PARALLEL_SEED=N replays the
# instants.
FAULT_TIMEOUT=3
FAULT_BOUND=$((2 * FAULT_TIMEOUT))
FAULT_SEED=${MOE_PARALLEL_SEED:-$$}
RANDOM=$FAULT_SEED
fault_pids=() # every process a fault case started: stopped ones resumed, then killed, at exit
end_fault_pids() {
    local p
    for p in "${fault_pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
    fault_pids=()
}
trap 'end_fault_pids; [ -n "${MOE_KEEP_TMP:-}" ] || rm -rf "$T"' EXIT
alive() { # PID: running or stopped, not a zombie nor gone
    local state
    state=$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' /proc/"$1"/stat 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
rank_pid() { # PARENT RANK: the pid of that MPI rank under mpirun
    local p
    for p in $(pgrep -P "$1"); do
        if tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$p"; return
        fi
    done
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
fault() { # NAME SIGNAL STDERR_PATTERN
    local name=$1 sig=$2 pat=$3 tag=$T/$1
    "${MPIRUN[@]}" -n 2 "$BIN" "${TINY[@]}" train.steps=100000 train.eval_every_n_steps=0 \
        train.micro_batch_size=2 parallel.ep=2 parallel.timeout_s=$FAULT_TIMEOUT logger.frequency=1 \
        checkpoint.save_every_n_steps=0 checkpoint.save_final_model=false logger.run_dir="$tag" \
        >"$T/$name.out" 2>"$T/$name.err" &
    local mp=$! r0="" r1="" i
    fault_pids+=("$mp")
    for i in $(seq 200); do # training started on both ranks
        if grep -q "^step" "$T/$name.out" 2>/dev/null; then
            r0=$(rank_pid $mp 0) r1=$(rank_pid $mp 1)
            [ -n "$r0" ] && [ -n "$r1" ] && break
        fi
        alive $mp || break
        sleep 0.05
    done
    fault_pids+=($r0 $r1)
    if [ -z "$r0" ] || [ -z "$r1" ]; then
        end_fault_pids; wait $mp 2>/dev/null
        bad "$name" "training did not start" "$(tail -n 5 "$T/$name.out" "$T/$name.err")"; return
    fi
    # a random instant of the run, in the middle of some step
    local ms=$((RANDOM % 1000))
    sleep "$(printf '0.%03d' $ms)"
    local t0 t1 left=""
    t0=$(now_ms)
    kill -"$sig" "$r1"
    while :; do
        alive $mp || alive $r0 || alive $r1 || break
        [ $(($(now_ms) - t0)) -gt $((FAULT_BOUND * 1000)) ] && break
        sleep 0.05
    done
    t1=$(now_ms)
    local p
    for p in $mp $r0 $r1; do alive $p && left="$left $p"; done
    # anything else of this run (its run directory is on every rank's command line)
    for p in $(pgrep -f -- "logger.run_dir=$tag"); do
        alive "$p" && [[ " $left " != *" $p "* ]] && left="$left $p"
    done
    local took
    took=$(printf '%d.%01d' $(((t1 - t0) / 1000)) $((((t1 - t0) % 1000) / 100)))
    if [ -n "$left" ]; then
        fault_pids+=($left); end_fault_pids; wait $mp 2>/dev/null
        bad "$name" "still running $took s after SIG$sig to rank 1 (pids$left; bound ${FAULT_BOUND} s, 2 x parallel.timeout_s; seed $FAULT_SEED, ${ms} ms into the run)" \
            "$(tail -n 4 "$T/$name.err")"
        return
    fi
    fault_pids=()
    wait $mp; local rc=$?
    if [ $rc -eq 0 ]; then bad "$name" "exit 0 after SIG$sig to rank 1"; return; fi
    if ! grep -qE -- "$pat" "$T/$name.err"; then
        bad "$name" "stderr lacks /$pat/:" "$(tail -n 8 "$T/$name.err")"; return
    fi
    ok "$name (every rank gone $took s after SIG$sig, bound ${FAULT_BOUND} s; exit $rc)"
}
# the hang: rank 0's watchdog names the collective, its group and the absent rank
fault rank_hangs STOP "moe-train: rank 0: (allgather|allgatherv|allreduce|alltoallv|barrier|broadcast|reduce_scatter|split) on the (world|ep|dp) group \(collective #[0-9]+\) has waited [0-9.]+ s for rank 1, more than parallel.timeout_s = $FAULT_TIMEOUT"
# the death: mpirun, or failing that the watchdog, names rank 1
fault rank_dies KILL "rank 1 .*(exited on signal 9|Killed)|has waited [0-9.]+ s for rank 1,"

echo "parallel: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

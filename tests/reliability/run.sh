#!/bin/bash
# Reliability of moe-train under the failures HPC jobs meet, on the CPU
# backend with a tiny model:
#   - SIGKILL at random instants of a run that checkpoints every step: every
#     directory named step_* verifies, the newest checkpoint never goes back,
#     and the run finishes bit-identical to a straight run (weights and
#     metrics.jsonl, each step once);
#   - SIGTERM / SIGUSR1 (Slurm's preemption and --signal): exit 75 with a
#     checkpoint at the step that was running, and the resumed run equals the
#     straight run;
#   - broken checkpoints beyond tests/cli/run.sh's bit flip: a damaged newest
#     checkpoint falls back to the previous one, naming the file; truncated
#     MANIFEST, missing or extra files, a killed writer's temp directory;
#   - a full disk or an unusable checkpoint directory: a clear error, the
#     previous checkpoint intact and resumable.
# Usage: tests/reliability/run.sh [BUILD_DIR]. MOE_RELIABILITY_SEED=N
# replays the kill instants of a failed run; MOE_RELIABILITY_KILLS=N (30, or
# 12 with MOE_TEST_QUICK=1).
# Last line: "reliability: N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
BIN=$B/bin/moe-train CHECK=$B/tests/reliability/ckpt_check
T=$(mktemp -d /tmp/moekit-reliability-XXXXXX)
MNT=
cleanup() { [ -n "$MNT" ] && umount "$MNT" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok $1"; }
bad() { failed=$((failed + 1)); echo "not ok $1"; shift; printf '  %s\n' "$@"; }

for f in "$BIN" "$CHECK"; do
    if [ ! -x "$f" ]; then bad build "$f missing (run make)"; echo "reliability: $passed passed, $failed failed"; exit 1; fi
done

STEPS=300
# a tiny model: a step takes milliseconds, a checkpoint about as long (fsync)
RUN=("$BIN" --config L0_sanity --threads 1 --quiet model.hidden_size=16 model.num_layers=1
     model.num_heads=2 model.num_kv_heads=1 model.head_dim=8 model.num_experts=2 model.top_k=1
     model.intermediate_size=16 train.seq_length=32 train.micro_batch_size=2 train.steps=$STEPS
     train.eval_every_n_steps=100 train.eval_batches=1 scheduler.warmup_steps=10
     logger.frequency=1000 checkpoint.save_final_model=false)
FINAL=$(printf 'step_%08d' $STEPS)
RANK0=rank-00000-of-00001.safetensors  # a one-rank run's whole state

# same_as_ref NAME DIR: DIR/run/metrics.jsonl has each step once with the
# reference's loss, lr and grad_norm, and DIR/ck's last weights are the reference's bytes
same_as_ref() {
    local name=$1 dir=$2 why
    why=$(python3 - "$T/ref/run/metrics.jsonl" "$dir/run/metrics.jsonl" <<'PY'
import json, sys
def steps(p):
    out = {}
    for n, line in enumerate(open(p), 1):
        d = json.loads(line)
        if 'loss' not in d:
            continue  # evaluation lines
        if d['step'] in out:
            sys.exit('%s:%d: step %d logged twice' % (p, n, d['step']))
        out[d['step']] = (d['loss'], d['lr'], d['grad_norm'])
    return out
try:
    ref, got = steps(sys.argv[1]), steps(sys.argv[2])
except (ValueError, KeyError) as err:
    sys.exit('unreadable metrics line: %s' % err)
missing = sorted(set(ref) - set(got))
if missing:
    sys.exit('steps missing from %s: %s' % (sys.argv[2], missing[:10]))
for s in sorted(ref):
    if got[s] != ref[s]:
        sys.exit('step %d: loss/lr/grad_norm %s, straight run %s' % (s, got[s], ref[s]))
PY
) || { bad "$name" "$why"; return; }
    if ! cmp -s "$T/ref/ck/$FINAL/$RANK0" "$dir/ck/$FINAL/$RANK0"; then
        bad "$name" "final weights or moments differ from the straight run"; return
    fi
    ok "$name"
}

# wait_steps FILE N PID: until FILE has N lines (or PID is gone)
wait_steps() {
    local i
    for ((i = 0; i < 3000; i++)); do
        [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.01
    done
    return 1
}

# ---- the straight run every other run must equal
if "${RUN[@]}" checkpoint.ckpt_dir="$T/ref/ck" logger.run_dir="$T/ref/run" >"$T/ref.out" 2>&1 &&
   [ -f "$T/ref/ck/$FINAL/$RANK0" ]; then
    ok straight_run
else
    bad straight_run "$(tail -5 "$T/ref.out")"
    echo "reliability: $passed passed, $failed failed"; exit 1
fi

# ---- SIGKILL at random instants, checkpointing every step
SEED=${MOE_RELIABILITY_SEED:-$$}
KILLS=${MOE_RELIABILITY_KILLS:-$([ "${MOE_TEST_QUICK:-0}" = 1 ] && echo 12 || echo 30)}
RANDOM=$SEED
K=$T/kill
landed=0 latest=-1 problem=
for ((i = 1; i <= KILLS; i++)); do
    "${RUN[@]}" checkpoint.ckpt_dir="$K/ck" logger.run_dir="$K/run" checkpoint.save_every_n_steps=1 \
        checkpoint.max_checkpoints=2 checkpoint.resume_from_checkpoint=true >"$K.out" 2>&1 &
    pid=$!
    # a third of the kills early (start-up, first checkpoints), the rest anywhere in a second
    if ((RANDOM % 3 == 0)); then ms=$((RANDOM % 150)); else ms=$((RANDOM % 1000)); fi
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    kill -KILL $pid 2>/dev/null
    wait $pid 2>/dev/null; rc=$?
    [ $rc -eq 137 ] && landed=$((landed + 1))
    if [ $rc -ne 137 ] && [ $rc -ne 0 ]; then problem="kill $i (after ${ms} ms): exit $rc: $(tail -3 "$K.out")"; break; fi
    out=$("$CHECK" "$K/ck" 2>"$K.check"); crc=$?
    if [ $crc -ne 0 ]; then problem="kill $i (after ${ms} ms): $(cat "$K.check")"; break; fi
    now=$(echo "$out" | awk '/^latest/ { print ($2 == "none" ? -1 : $2) }')
    if [ "$now" -lt "$latest" ]; then
        problem="kill $i (after ${ms} ms): newest checkpoint went back from step $latest to $now"; break
    fi
    latest=$now
    # a run that got to the end: start over, so the next kills land in a running trainer
    # again however fast this machine trains
    if [ $rc -eq 0 ] && [ $i -lt $KILLS ]; then rm -rf "$K/ck" "$K/run"; latest=-1; fi
done
if [ -n "$problem" ]; then
    bad sigkill_checkpoints_stay_valid "$problem" "replay with MOE_RELIABILITY_SEED=$SEED"
elif [ $landed -lt $((KILLS / 2)) ]; then
    bad sigkill_checkpoints_stay_valid "only $landed of $KILLS kills hit a running trainer"
else
    ok "sigkill_checkpoints_stay_valid ($landed kills, newest checkpoint step $latest, seed $SEED)"
fi
if "${RUN[@]}" checkpoint.ckpt_dir="$K/ck" logger.run_dir="$K/run" checkpoint.save_every_n_steps=1 \
       checkpoint.max_checkpoints=2 checkpoint.resume_from_checkpoint=true >"$K.out" 2>&1; then
    same_as_ref sigkill_then_resume_equals_straight_run "$K"
else
    bad sigkill_then_resume_equals_straight_run "resume failed: $(tail -3 "$K.out")"
fi
if ls -a "$K/ck" | grep -q '^\.'; then
    leftover=$(ls -a "$K/ck" | grep -vE '^\.\.?$' | grep '^\.' || true)
    if [ -n "$leftover" ]; then
        bad killed_writers_cleaned_up "left behind after a clean run: $leftover"
    else
        ok killed_writers_cleaned_up
    fi
fi

# ---- two ranks (EP=2), each writing its own file: SIGKILL the whole job
# (mpirun and both ranks at once, as a scheduler does) at random instants,
# checkpointing every step; every
# step_* verifies, the newest never goes back, and the resumed run ends
# bit-identical to a straight two-rank run
if command -v mpirun >/dev/null 2>&1; then
    # Open MPI keeps its small allocations alive at exit, which LeakSanitizer would turn into
    # exit 1: leaks are off for the ranks (moekit's own are caught by the one-process suites)
    MPI=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
         mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS -n 2)
    STEPS2=1000 # longer than the 1-6 s kill window on an idle machine (~1.7 s for 150 steps)
    RUN2=("$BIN" --config L0_sanity --threads 1 --quiet model.hidden_size=16 model.num_layers=1
          model.num_heads=2 model.num_kv_heads=1 model.head_dim=8 model.num_experts=2 model.top_k=1
          model.intermediate_size=16 train.seq_length=32 train.micro_batch_size=2 train.steps=$STEPS2
          train.eval_every_n_steps=100 train.eval_batches=1 scheduler.warmup_steps=10
          logger.frequency=1000 checkpoint.save_final_model=false parallel.ep=2 parallel.timeout_s=30)
    FINAL2=$(printf 'step_%08d' $STEPS2)
    "${MPI[@]}" "${RUN2[@]}" checkpoint.ckpt_dir="$T/ref2/ck" >"$T/ref2.out" 2>&1
    K2=$T/kill2 problem= landed=0 latest=-1
    for ((i = 1; i <= $([ "${MOE_TEST_QUICK:-0}" = 1 ] && echo 3 || echo 6); i++)); do
        "${MPI[@]}" "${RUN2[@]}" checkpoint.ckpt_dir="$K2/ck" checkpoint.save_every_n_steps=1 \
            checkpoint.max_checkpoints=2 checkpoint.resume_from_checkpoint=true >"$K2.out" 2>&1 &
        mpid=$!
        ms=$((1000 + RANDOM % 5000)) # mpirun itself takes a second or two to start the ranks
        sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
        kill -KILL $mpid $(pgrep -P $mpid) 2>/dev/null
        wait $mpid 2>/dev/null; rc=$?
        [ $rc -ne 0 ] && landed=$((landed + 1))
        out=$("$CHECK" "$K2/ck" 2>"$K2.check"); crc=$?
        if [ $crc -ne 0 ]; then problem="kill $i (after ${ms} ms): $(cat "$K2.check")"; break; fi
        now=$(echo "$out" | awk '/^latest/ { print ($2 == "none" ? -1 : $2) }')
        if [ "$now" -lt "$latest" ]; then problem="kill $i: newest checkpoint went back from $latest to $now"; break; fi
        latest=$now
        # a run that got to the end: start over, so the next kill lands in a running job
        if [ $rc -eq 0 ]; then rm -rf "$K2/ck"; latest=-1; fi
    done
    if [ -n "$problem" ]; then
        bad two_rank_sigkill_checkpoints_stay_valid "$problem"
    elif [ $landed -eq 0 ]; then
        bad two_rank_sigkill_checkpoints_stay_valid "no kill hit a running job"
    else
        ok "two_rank_sigkill_checkpoints_stay_valid ($landed kills, newest step $latest)"
    fi
    if "${MPI[@]}" "${RUN2[@]}" checkpoint.ckpt_dir="$K2/ck" checkpoint.save_every_n_steps=1 \
           checkpoint.max_checkpoints=2 checkpoint.resume_from_checkpoint=true >"$K2.out" 2>&1 &&
       cmp -s "$T/ref2/ck/$FINAL2/rank-00000-of-00002.safetensors" "$K2/ck/$FINAL2/rank-00000-of-00002.safetensors" &&
       cmp -s "$T/ref2/ck/$FINAL2/rank-00001-of-00002.safetensors" "$K2/ck/$FINAL2/rank-00001-of-00002.safetensors"; then
        ok two_rank_sigkill_then_resume_equals_straight_run
    else
        bad two_rank_sigkill_then_resume_equals_straight_run "$(tail -n 3 "$K2.out" "$T/ref2.out")"
    fi
else
    echo "skip two_rank_sigkill (no mpirun)"
fi

# ---- preemption: SIGTERM, SIGUSR1, and a signal during checkpoint writes
preempt() { # NAME SIGNAL SAVE_EVERY [SECOND_SIGNAL]
    local name=$1 sig=$2 every=$3 sig2=${4:-} d=$T/$1 pid rc stopped latest last
    "${RUN[@]}" checkpoint.ckpt_dir="$d/ck" logger.run_dir="$d/run" \
        checkpoint.save_every_n_steps="$every" >"$d.out" 2>"$d.err" &
    pid=$!
    if ! wait_steps "$d/run/metrics.jsonl" 20 $pid; then
        bad "$name" "trainer did not reach step 20: $(tail -3 "$d.err")"; kill -KILL $pid 2>/dev/null; wait $pid; return
    fi
    kill -"$sig" $pid
    [ -n "$sig2" ] && kill -"$sig2" $pid 2>/dev/null
    wait $pid; rc=$?
    if [ $rc -ne 75 ]; then bad "$name" "exit $rc after SIG$sig, expected 75: $(tail -3 "$d.err")"; return; fi
    stopped=$(sed -nE 's/.*stopping at step ([0-9]+) of.*stop signal.*/\1/p' "$d.err")
    latest=$("$CHECK" "$d/ck" 2>/dev/null | awk '/^latest/ { print $2 }')
    last=$(python3 -c 'import json,sys; print(max(json.loads(l)["step"] for l in open(sys.argv[1])))' "$d/run/metrics.jsonl")
    if [ -z "$stopped" ] || [ "$latest" != "$stopped" ] || [ "$last" != "$stopped" ]; then
        bad "$name" "stopped at '${stopped}', newest checkpoint '$latest', last logged step $last (all three must agree)"
        return
    fi
    if ! "${RUN[@]}" checkpoint.ckpt_dir="$d/ck" logger.run_dir="$d/run" checkpoint.save_every_n_steps="$every" \
           checkpoint.resume_from_checkpoint=true >"$d.out" 2>"$d.err" ||
       ! grep -q "resuming from .*(step $stopped)" "$d.out"; then
        bad "$name" "resume did not start at step $stopped: $(tail -3 "$d.out" "$d.err")"; return
    fi
    same_as_ref "$name (stopped at step $stopped)" "$d"
}
preempt preempt_sigterm TERM 0
preempt preempt_sigusr1 USR1 0
preempt preempt_signal_during_checkpoints USR1 1 TERM

# ---- damaged checkpoints (tests/cli/run.sh covers a flipped weight byte)
D=$T/dmg
if "${RUN[@]}" checkpoint.ckpt_dir="$D/ck" logger.run_dir="$D/run" checkpoint.save_every_n_steps=100 \
       checkpoint.max_checkpoints=0 --stop-after-steps 200 >"$D.out" 2>&1; [ $? -eq 75 ]; then
    ok stop_after_steps_exits_75
else
    bad stop_after_steps_exits_75 "$(tail -3 "$D.out")"
fi
# resume_case NAME PATTERN SETUP: SETUP breaks a copy of $D/ck; resuming must fail naming PATTERN
resume_fails() {
    local name=$1 pat=$2 c=$T/$1
    rm -rf "$c"; mkdir -p "$c"; cp -r "$D/ck" "$c/ck"; rm -rf "$c/ck/step_00000100"
    (cd "$c/ck/step_00000200" && eval "$3")
    "${RUN[@]}" checkpoint.ckpt_dir="$c/ck" checkpoint.resume_from_checkpoint=true >"$c.out" 2>"$c.err"; local rc=$?
    if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then bad "$name" "exit $rc, expected a refusal"; return; fi
    if ! grep -qE -- "$pat" "$c.err"; then bad "$name" "stderr lacks /$pat/: $(cat "$c.err")"; return; fi
    ok "$name"
}
resume_fails refuse_truncated_manifest "MANIFEST" 'head -c 100 MANIFEST > M && mv M MANIFEST'
resume_fails refuse_missing_train_state "train_state.json" 'rm train_state.json'
resume_fails refuse_extra_file "stray.txt" 'echo hi > stray.txt'
resume_fails refuse_truncated_state "$RANK0" "truncate -s -8 $RANK0"
resume_fails refuse_missing_index "checkpoint.index.json" 'rm checkpoint.index.json'
# set_step N: train_state.json's step, the MANIFEST line kept true so only the value is wrong
set_step() {
    sed -i -E "s/\"step\": *[0-9]+/\"step\": $1/" train_state.json
    local h s; h=$(sha256sum train_state.json | cut -d' ' -f1); s=$(stat -c %s train_state.json)
    awk -v h="$h" -v s="$s" '$2 == "train_state.json" && length($1) == 64 {
        print h "  train_state.json"; fix = 1; next }
        fix && /^# size / { print "# size " s; fix = 0; next } { print }' MANIFEST >M && mv M MANIFEST
}
resume_fails refuse_step_out_of_range "step 4611686018427387904 is out of range" \
    'set_step 4611686018427387904'
# resuming at the last step: says there is nothing to train, not "final loss 0.0000"
N=$T/at_end
rm -rf "$N"; mkdir -p "$N"; cp -r "$D/ck" "$N/ck"
"$BIN" --config L0_sanity --threads 1 "${RUN[@]:6}" train.steps=200 checkpoint.ckpt_dir="$N/ck" \
    checkpoint.resume_from_checkpoint=true >"$N.out" 2>"$N.err"; rc=$?
if [ $rc -eq 0 ] && grep -q "nothing to train: the run resumed at step 200 and train.steps is 200" "$N.out" &&
   ! grep -q "final loss" "$N.out"; then
    ok resume_at_last_step_says_nothing_to_train
else
    bad resume_at_last_step_says_nothing_to_train "exit $rc: $(cat "$N.out" "$N.err")"
fi

# the newest checkpoint damaged, an older one intact: warn naming the file, resume from the older
F=$T/fallback
mkdir -p "$F"; cp -r "$D/ck" "$F/ck"; cp -r "$D/run" "$F/run"
truncate -s -8 "$F/ck/step_00000200/$RANK0"
if "${RUN[@]}" checkpoint.ckpt_dir="$F/ck" logger.run_dir="$F/run" checkpoint.save_every_n_steps=100 \
       checkpoint.max_checkpoints=0 checkpoint.resume_from_checkpoint=true >"$F.out" 2>"$F.err" &&
   grep -q "warning:.*step_00000200.*$RANK0" "$F.err" && grep -q "resuming from .*(step 100)" "$F.out"; then
    same_as_ref damaged_newest_falls_back_to_previous "$F"
else
    bad damaged_newest_falls_back_to_previous "$(tail -3 "$F.out" "$F.err")"
fi

# a killed writer's temp directory or a half-pruned one, complete and newer,
# is never taken for a checkpoint (a parked .old- copy whose step_N is
# missing is: it was committed, and ckpt_dir.c restores it)
S=$T/stale
mkdir -p "$S"; cp -r "$D/ck" "$S/ck"; rm -rf "$S/ck/step_00000100"
cp -r "$S/ck/step_00000200" "$S/ck/.tmp-step_00000250-999999"
cp -r "$S/ck/step_00000200" "$S/ck/.del-step_00000260-999999"
out=$("$CHECK" "$S/ck" 2>&1)
if echo "$out" | grep -q "^latest 200 .*/step_00000200$"; then
    ok temp_dirs_are_not_checkpoints
else
    bad temp_dirs_are_not_checkpoints "$out"
fi

# ---- a full disk: the failed checkpoint is an error, the previous one stays loadable
kb=$(du -sk "$T/ref/ck/$FINAL" | cut -f1)
MNT=$T/full
mkdir -p "$MNT"
if mount -t tmpfs -o size=$((kb * 3 / 2))k tmpfs "$MNT" 2>/dev/null; then
    "${RUN[@]}" checkpoint.ckpt_dir="$MNT/ck" logger.run_dir="$T/fullrun/run" checkpoint.save_every_n_steps=10 \
        >"$T/full.out" 2>"$T/full.err"; rc=$?
    out=$("$CHECK" "$MNT/ck" 2>&1)
    if [ $rc -eq 1 ] && grep -q "saving the checkpoint of step 20 (the previous one is kept).*No space left" "$T/full.err" &&
       echo "$out" | grep -q "^latest 10 " && echo "$out" | grep -q "^inflight 0"; then
        ok disk_full_keeps_previous_checkpoint
    else
        bad disk_full_keeps_previous_checkpoint "exit $rc: $(cat "$T/full.err")" "$out"
    fi
    # the state that survived resumes elsewhere and ends where the straight run does
    cp -r "$MNT/ck" "$T/fullrun/ck"
    if "${RUN[@]}" checkpoint.ckpt_dir="$T/fullrun/ck" logger.run_dir="$T/fullrun/run" \
           checkpoint.resume_from_checkpoint=true >"$T/full.out" 2>"$T/full.err"; then
        same_as_ref disk_full_then_resume_elsewhere "$T/fullrun"
    else
        bad disk_full_then_resume_elsewhere "$(tail -3 "$T/full.err")"
    fi
    umount "$MNT"; MNT=
else
    echo "skip disk_full_keeps_previous_checkpoint (cannot mount a small tmpfs here)"
fi

# ---- final_model never older than the newest checkpoint. The state a failed
# final save leaves (final_model of step 20, the newest checkpoint step 40):
# the rerun, with nothing left to train, writes final_model from step 40.
M=$T/final
rm -rf "$M"; mkdir -p "$M"
"${RUN[@]}" train.steps=20 checkpoint.save_final_model=true checkpoint.ckpt_dir="$M/ck" >"$M/1.out" 2>&1
"${RUN[@]}" train.steps=40 checkpoint.save_final_model=false checkpoint.ckpt_dir="$M/ck" \
    checkpoint.resume_from_checkpoint=true >"$M/2.out" 2>&1
"${RUN[@]}" train.steps=40 checkpoint.save_final_model=true checkpoint.ckpt_dir="$M/ck" \
    checkpoint.resume_from_checkpoint=true >"$M/3.out" 2>&1; rc=$?
"$BIN" export --checkpoint "$M/ck/step_00000040" --out "$M/export40" >/dev/null 2>&1
if [ $rc -eq 0 ] && grep -q "final_model holds step 20, not the newest checkpoint (step 40): writing it again" "$M/3.out" &&
   cmp -s "$M/export40/model.safetensors" "$M/ck/final_model/model.safetensors" &&
   grep -q '"step": 40' "$M/ck/final_model/moekit_export.json"; then
    ok stale_final_model_rewritten_on_rerun
else
    bad stale_final_model_rewritten_on_rerun "exit $rc: $(cat "$M/3.out")"
fi
# a current final_model is left as it is
"${RUN[@]}" train.steps=40 checkpoint.save_final_model=true checkpoint.ckpt_dir="$M/ck" \
    checkpoint.resume_from_checkpoint=true >"$M/4.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && ! grep -q "writing it again" "$M/4.out"; then
    ok current_final_model_kept
else
    bad current_final_model_kept "exit $rc: $(cat "$M/4.out")"
fi
# the final save itself failing on a full disk: an error that says final_model is stale
MNT=$T/fullfinal
mkdir -p "$MNT"
if mount -t tmpfs -o size=4m tmpfs "$MNT" 2>/dev/null; then
    cp -r "$M/ck" "$MNT/ck"
    rm -rf "$MNT/ck/step_00000040" "$MNT/ck/final_model"
    "$BIN" export --checkpoint "$MNT/ck/step_00000020" --out "$MNT/ck/final_model" >/dev/null 2>&1
    ck=$(du -sk "$MNT/ck/step_00000020" | cut -f1) fm=$(du -sk "$MNT/ck/final_model" | cut -f1)
    avail=$(df --output=avail -k "$MNT" | tail -1)
    # room for step 40's checkpoint and half a final model
    fallocate -l $(((avail - ck - fm / 2) * 1024)) "$MNT/filler"
    "${RUN[@]}" train.steps=40 checkpoint.save_final_model=true checkpoint.ckpt_dir="$MNT/ck" \
        checkpoint.resume_from_checkpoint=true checkpoint.max_checkpoints=0 >"$M/full.out" 2>"$M/full.err"; rc=$?
    if [ $rc -eq 1 ] && [ -f "$MNT/ck/step_00000040/MANIFEST" ] &&
       grep -q "saving the final model.*No space left.*final_model still holds step 20, not the newest checkpoint (step 40)" "$M/full.err"; then
        ok final_save_on_full_disk_says_final_model_is_stale
    else
        bad final_save_on_full_disk_says_final_model_is_stale "exit $rc: $(cat "$M/full.err")"
    fi
    rm -f "$MNT/filler"
    "${RUN[@]}" train.steps=40 checkpoint.save_final_model=true checkpoint.ckpt_dir="$MNT/ck" \
        checkpoint.resume_from_checkpoint=true >"$M/full2.out" 2>&1; rc=$?
    if [ $rc -eq 0 ] && cmp -s "$M/export40/model.safetensors" "$MNT/ck/final_model/model.safetensors"; then
        ok full_disk_final_save_rerun_writes_it
    else
        bad full_disk_final_save_rerun_writes_it "exit $rc: $(cat "$M/full2.out")"
    fi
    umount "$MNT"; MNT=
else
    echo "skip final_save_on_full_disk_says_final_model_is_stale (cannot mount a small tmpfs here)"
fi

# a checkpoint directory that cannot be created: the error names the key and the path
: > "$T/afile"
"${RUN[@]}" checkpoint.ckpt_dir="$T/afile/ck" >"$T/nodir.out" 2>"$T/nodir.err"; rc=$?
if [ $rc -eq 1 ] && grep -q "checkpoint.ckpt_dir.*$T/afile" "$T/nodir.err"; then
    ok unusable_ckpt_dir_is_a_clear_error
else
    bad unusable_ckpt_dir_is_a_clear_error "exit $rc: $(cat "$T/nodir.err")"
fi

echo "reliability: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

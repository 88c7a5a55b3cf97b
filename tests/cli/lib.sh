# Sourced by tests/cli/*.sh (after T is set): the tiny model every case trains, the pass/fail
# counters and the expectations on a failing command.
passed=0 failed=0
# a tiny model so every case runs in well under a second
TINY=(model.hidden_size=16 model.num_layers=1 model.num_heads=2 model.num_kv_heads=1
      model.head_dim=8 model.num_experts=2 model.top_k=1 model.intermediate_size=16
      train.seq_length=32 train.micro_batch_size=2 train.steps=3 scheduler.warmup_steps=1
      train.eval_batches=1 --quiet)

ok() { passed=$((passed + 1)); echo "ok $1"; }
bad() { failed=$((failed + 1)); echo "not ok $1"; shift; printf '  %s\n' "$@"; }

# expect_fail NAME PATTERN CMD...: non-zero exit (not a signal) and PATTERN in stderr
expect_fail() {
    local name=$1 pat=$2; shift 2
    "$@" >"$T/out" 2>"$T/err"; local rc=$?
    if [ $rc -eq 0 ]; then bad "$name" "exit 0, expected failure"; return; fi
    if [ $rc -ge 128 ]; then bad "$name" "died with signal $((rc - 128))" "$(cat "$T/err")"; return; fi
    if ! grep -qE -- "$pat" "$T/err"; then bad "$name" "stderr lacks /$pat/:" "$(cat "$T/err")"; return; fi
    ok "$name"
}

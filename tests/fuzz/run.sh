#!/bin/bash
# Build the libFuzzer harnesses with clang (make fuzz, into build/fuzz/) and
# run each for a bounded time, one after another, from its committed corpus
# (tests/fuzz/corpus/NAME, read only; new inputs go to build/fuzz/corpus/).
# A crash, leak, sanitizer report or timeout is a failure: its input is
# saved as build/fuzz/artifacts/NAME-crash-* (commit it into the corpus as
# regress-NAME-WHAT once fixed). Prints executions per fuzzer and
# "fuzz: N passed, N failed" last.
# Usage: tests/fuzz/run.sh [SECONDS_EACH] [NAME...]   (default 20 s each, all)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SECS=${1:-20}; shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(config fasta safetensors json hf_config plugin_args policy store_index planner_answer)
FB=$ROOT/build/fuzz
passed=0 failed=0

if ! command -v "${FUZZ_CC:-clang}" >/dev/null; then
    echo "fuzz: ${FUZZ_CC:-clang} not found (scripts/install-deps.sh installs clang)"
    echo "fuzz: 0 passed, 1 failed"; exit 1
fi
if ! make -C "$ROOT" -s -j"$(nproc)" fuzz >"$FB.build.log" 2>&1; then
    tail -30 "$FB.build.log"
    echo "fuzz: build failed (make fuzz)"
    echo "fuzz: 0 passed, 1 failed"; exit 1
fi

for t in "${TARGETS[@]}"; do
    bin=$FB/fuzz_$t seeds=$ROOT/tests/fuzz/corpus/$t work=$FB/corpus/$t log=$FB/fuzz_$t.log
    mkdir -p "$work" "$FB/artifacts"
    # -timeout: one input may take at most 10 s; -rss_limit_mb bounds memory;
    # detect_leaks: a leak on an error path is a finding too (fuzz_util.c
    # names the one known leak inside libconfig)
    ASAN_OPTIONS=detect_leaks=1 \
    "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$FB/artifacts/$t-" "$work" "$seeds" >"$log" 2>&1
    rc=$?
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "ok fuzz_$t: ${runs:-?} executions in ${SECS} s, ${cov:-cov: ?}, corpus $(ls "$work" | wc -l) inputs"
    else
        failed=$((failed + 1))
        echo "not ok fuzz_$t: exit $rc after ${runs:-?} executions; input in $(ls -t "$FB"/artifacts/"$t"-* 2>/dev/null | head -1)"
        grep -E 'ERROR|SUMMARY|==[0-9]+==|#[0-9]+ 0x' "$log" | head -20 | sed 's/^/  /'
    fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/bash
# Start-up time and memory of moe-train on token stores of different sizes:
# one L0_sanity step per store, timed with /usr/bin/time -v.
# Usage: bench/data/train_on_store.sh STORE...   (prints one line per store)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
for s in "$@"; do
    log=$(mktemp)
    /usr/bin/time -v "$ROOT/build/bin/moe-train" --config L0_sanity data.store="$s" train.steps=1 \
        scheduler.warmup_steps=1 train.eval_batches=1 logger.frequency=1 >"$log" 2>&1
    bases=$("$ROOT/build/bin/moe-data" info "$s" | awk '/^bases/ {print $2}')
    printf '%s: %s bases | %s | wall %s s | max RSS %s KB\n' "$s" "$bases" \
        "$(grep -o 'start-up.*' "$log")" \
        "$(grep 'Elapsed (wall' "$log" | awk '{print $NF}')" \
        "$(grep 'Maximum resident' "$log" | awk '{print $NF}')"
    grep -E '^moe-train: [^n]' "$log"
    rm -f "$log"
done

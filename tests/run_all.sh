#!/bin/bash
# The whole test suite over one build directory: unit tests (C), the
# command-line tests, the parallel (MPI ranks) tests, and (unless
# MOE_SKIP_SLURM=1) the real-Slurm tests and the installed-tree test.
# Prints each suite's "name: N passed, N failed" and a total line last.
# Usage: tests/run_all.sh [BUILD_DIR]
set -u
B=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
passed=0 failed=0
LOGS=$(mktemp -d /tmp/moekit-suites-XXXXXX)
trap 'rm -rf "$LOGS"' EXIT
tally() { # suite output on stdin: take its summary line
    local line
    line=$(grep -E '^[A-Za-z0-9_.-]+: [0-9]+ passed, [0-9]+ failed$' | tail -1)
    if [ -z "$line" ]; then
        echo "$1: no summary line (the suite crashed)"; failed=$((failed + 1)); return
    fi
    passed=$((passed + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
    failed=$((failed + $(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed/\1/')))
}
suite() { # NAME CMD...
    local name=$1 rc; shift
    echo "== $name"
    "$@" 2>&1 | tee "$LOGS/$name.log"
    rc=${PIPESTATUS[0]}
    tally "$name" < "$LOGS/$name.log"
    if [ "$rc" -ne 0 ] && ! grep -qE ', [1-9][0-9]* failed$' "$LOGS/$name.log"; then
        failed=$((failed + 1)); echo "$name: exit $rc"
    fi
}
mapfile -t units < <(find "$B/tests" -maxdepth 1 -type f -name 'test_*' -perm -u+x | sort)
suite unit "$HERE/run_unit.sh" "${units[@]}"
suite cli "$HERE/cli/run.sh" "$B"
suite data "$HERE/cli/data.sh" "$B"
suite reliability "$HERE/reliability/run.sh" "$B"
suite parallel "$HERE/parallel/run.sh" "$B"
if [ "${MOE_SKIP_SLURM:-0}" != 1 ] && [ -x "$HERE/slurm/run.sh" ]; then
    suite slurm "$HERE/slurm/run.sh" "$B"
    # the installed tree on its own, its plugin under Slurm too (a plain build only)
    [ "$(basename "$B")" = build ] && suite install "$HERE/install/run.sh" "$B"
fi
echo "moekit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

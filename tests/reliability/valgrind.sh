#!/bin/bash
# valgrind memcheck over the plugin and topology code: moe-topo on every
# fixture topology (table, --json, --check under a few policies) and the
# plugin's unit-test binaries. Any memcheck error or definite leak fails
# (--error-exitcode=1 --errors-for-leak-kinds=definite). Run on a plain
# build (valgrind and ASan do not mix). Last line: "valgrind: N passed, N failed".
# Usage: tests/reliability/valgrind.sh [BUILD_DIR]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
T=$(mktemp -d /tmp/moekit-valgrind-XXXXXX)
trap 'rm -rf "$T"' EXIT
passed=0 failed=0
if ! command -v valgrind >/dev/null; then
    echo "valgrind: not installed (scripts/install-deps.sh installs it)"
    echo "valgrind: 0 passed, 1 failed"; exit 1
fi
if readelf -d "$B/bin/moe-topo" 2>/dev/null | grep -q 'NEEDED.*libasan'; then
    echo "valgrind: $B is a sanitizer build; give a plain build"
    echo "valgrind: 0 passed, 1 failed"; exit 1
fi
n=0
vg() { # NAME EXPECTED_EXIT CMD...: memcheck CMD; its own exit status must be EXPECTED_EXIT
      # ("same": whatever CMD exits with outside valgrind, e.g. --check's 0 run / 3 refuse)
    local name=$1 want=$2 rc; shift 2
    n=$((n + 1))
    if [ "$want" = same ]; then "$@" >/dev/null 2>&1; want=$?; fi
    valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --log-file="$T/$n.vg" "$@" >"$T/$n.out" 2>&1; rc=$?
    # 99, not 1: a program's own exit 1 must not pass for a memcheck error
    if [ $rc -eq 99 ] || [ -s "$T/$n.vg" ]; then
        failed=$((failed + 1)); echo "not ok $name: memcheck reports"; head -30 "$T/$n.vg" | sed 's/^/  /'
    elif [ $rc -ne "$want" ]; then
        failed=$((failed + 1)); echo "not ok $name: exit $rc, expected $want"; tail -5 "$T/$n.out" | sed 's/^/  /'
    else
        passed=$((passed + 1)); echo "ok $name"
    fi
}
for x in "$ROOT"/tests/fixtures/topo/*.xml; do
    f=$(basename "$x" .xml)
    vg "moe-topo $f" 0 "$B/bin/moe-topo" --xml "$x" --no-nvml
    vg "moe-topo $f --json" 0 "$B/bin/moe-topo" --xml "$x" --no-nvml --json
    vg "moe-topo $f --check" same "$B/bin/moe-topo" --check --xml "$x" --no-nvml \
        --policy "allow_cpu=yes" --ep 2 --experts 8 --json
    vg "moe-topo $f --check reject" same "$B/bin/moe-topo" --check --xml "$x" --no-nvml \
        --policy "on_non_blackwell=reject" --precision mxfp8
done
vg "moe-topo bad --xml (failure)" 1 "$B/bin/moe-topo" --xml "$T/missing.xml" --no-nvml
vg "moe-topo bad --policy (usage)" 2 "$B/bin/moe-topo" --check --policy "frobnicate=1" --xml "$ROOT/tests/fixtures/topo/b200x8.xml"
for t in "$B"/tests/test_args "$B"/tests/test_plugin_* "$B"/tests/test_planner "$B"/tests/test_policy "$B"/tests/test_verdict "$B"/tests/test_topo; do
    [ -x "$t" ] || { failed=$((failed + 1)); echo "not ok $(basename "$t"): not built"; continue; }
    # test_plugin_link is a script over the plugin's file, not plugin code
    [ "$(head -c 4 "$t" | tail -c 3)" = ELF ] || continue
    vg "$(basename "$t")" 0 "$t"
done
echo "valgrind: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

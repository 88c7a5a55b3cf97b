#!/bin/bash
# moekit: spank_moe.so links its own code, launch/, topo/ and common/ only.
#
#   test_plugin_link [SPANK_MOE_SO]     (default: the build's lib/spank_moe.so)
#
# slurmstepd loads the plugin as root; what the plugin needs of the trainer
# (a config's facts, the memory plan) it asks the site's moe-train for, as a
# child process (plugin/planner.h). This fails if the trainer's code comes
# back into the plugin: a symbol defined by the config, planner, parallel,
# model or low-precision libraries in the plugin's symbol table (local ones
# too: the version script hides them from nm -D, not from the file), a
# dynamic dependency on libgomp, libconfig, the C++ or CUDA runtimes, or an
# undefined symbol that is not hwloc's, Slurm's or the C library's (a shared
# object links with unresolved names; slurmstepd would fail to resolve them).
# Installed by make as BUILD/tests/test_plugin_link, run by `make unit`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/.." && pwd)
so=${1:-$build/lib/spank_moe.so}
passed=0 failed=0
check() { # DESCRIPTION RESULT(0 = ok) [DETAIL]
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "ok $1"
    else failed=$((failed + 1)); echo "not ok $1${3:+: $3}"; fi
}
summary() { echo "plugin_link: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

if [ ! -f "$so" ]; then check "$so exists" 1; summary; fi
for tool in nm readelf; do
    command -v $tool >/dev/null || { check "$tool is installed (binutils)" 1; summary; }
done

# A sanitizer build's plugin links the sanitizer runtimes, and Slurm cannot load it at all
# (tests/slurm/run.sh refuses it): the plain build is the one checked.
if readelf -d "$so" | grep -q 'NEEDED.*lib[a-z]*san'; then
    check "sanitizer build: not a plugin Slurm loads, link not checked" 0; summary
fi

# 1. dynamic dependencies, direct and (through ldd) transitive
bad_libs='libgomp|libconfig|libstdc\+\+|libcudart|libcublas|libnccl|libmpi|libcrypto|libz\.'
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
hits=$(echo "$needed" | grep -E "$bad_libs" | tr '\n' ' ')
check "no trainer runtime among NEEDED ($(echo $needed))" "$([ -z "$hits" ]; echo $?)" "$hits"
if command -v ldd >/dev/null; then
    hits=$(ldd "$so" 2>/dev/null | grep -E "$bad_libs" | awk '{print $1}' | tr '\n' ' ')
    check "ldd shows no libgomp, libconfig or CUDA" "$([ -z "$hits" ]; echo $?)" "$hits"
fi

# 2. undefined symbols: hwloc, Slurm (slurmstepd or the client provides them), libc
undef=$(nm -D --undefined-only "$so" | awk '$1 == "U" {print $2}' | grep -v '@' |
        grep -Ev '^(hwloc_|slurm_|spank_)' | tr '\n' ' ')
check "undefined symbols are hwloc's, Slurm's or libc's" "$([ -z "$undef" ]; echo $?)" "$undef"
omp=$(nm -D "$so" | grep -E ' (GOMP_|omp_)' | awk '{print $NF}' | tr '\n' ' ')
check "no OpenMP symbol" "$([ -z "$omp" ]; echo $?)" "$omp"

# 3. no trainer code inside: every global symbol the trainer's libraries define
syms=$(nm "$so" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u)
check "$so has a symbol table" "$([ -n "$syms" ]; echo $?)"
forbidden=$( {
    printf '%s\n' config_load config_resolve_path config_default_dir plan_fit_config \
        plan_fit_room plan_make plan_fit
    for lib in config plan parallel model lowp; do
        a=$build/lib/libmoe_$lib.a
        [ -f "$a" ] && nm -g --defined-only "$a" 2>/dev/null | awk 'NF == 3 {print $3}'
    done
} | sort -u)
libs_seen=$(ls "$build"/lib/libmoe_{config,plan,parallel,model,lowp}.a 2>/dev/null | wc -l)
check "the trainer's libraries were read ($libs_seen of 5)" "$([ "$libs_seen" -eq 5 ]; echo $?)"
inside=$(comm -12 <(echo "$syms") <(echo "$forbidden") | head -12 | tr '\n' ' ')
check "no config, plan, parallel, model or lowp symbol inside" "$([ -z "$inside" ]; echo $?)" \
    "$inside"
summary

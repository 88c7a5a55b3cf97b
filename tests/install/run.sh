#!/bin/bash
# moekit installed on its own: `make install DESTDIR=... PREFIX=...` into a temporary stage, the
# installed tree moved elsewhere, and the source tree hidden (a private mount namespace lays an
# empty tmpfs over it), then what a user and an admin do with the installed files only:
# moe-train trains L0_sanity, MOE_CONFIG_DIR / MOE_DATA_DIR still override, moe-topo's default
# policy names the installed moe-train and directories, and a Slurm job trains through the
# installed plugin with no trainer=, configs= or data= argument (its defaults are the prefix's).
# Last, `make uninstall` removes every file install wrote. Needs root (unshare -m, Slurm).
#
#   tests/install/run.sh [BUILD_DIR]    (default build; a plain build: Slurm loads the plugin)
# The last line is "install: N passed, N failed".
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-build}
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok $1"; }
bad() { failed=$((failed + 1)); echo "not ok $1"; shift; printf '  %s\n' "$@"; }
summary() { echo "install: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; }

if [ "$(basename "$build")" != build ]; then
    echo "install: $build is not the plain build (make install installs build/): nothing to test"
    bad plain_build_only; summary; exit 1
fi
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
    bad needs_root "unshare -m (hiding the source tree) needs root"; summary; exit 1
fi
work=$(mktemp -d /tmp/moekit-install.XXXXXX)
chmod 755 "$work" # munged needs o+x on every directory above its socket
trap 'rm -rf "$work"' EXIT
stage=$work/stage prefix_at=/opt/moekit moved=$work/moved

if make -s -C "$repo" install DESTDIR="$stage" PREFIX="$prefix_at" >"$work/install.log" 2>&1; then
    ok make_install_destdir
else
    bad make_install_destdir "$(tail -5 "$work/install.log")"; summary; exit 1
fi
missing=()
for f in bin/moe-train bin/moe-topo lib/moekit/spank_moe.so share/moekit/configs/L0_sanity.cfg \
    share/moekit/configs/defaults.cfg share/moekit/data/lambda_virus.fa.gz \
    share/moekit/jobs/sanity.sbatch share/man/man1/moe-train.1 share/man/man1/moe-topo.1; do
    [ -s "$stage$prefix_at/$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -eq 0 ] && grep -q 'stop.*after.*steps' "$stage$prefix_at/share/man/man1/moe-train.1"; then
    ok installed_files_and_man_pages
else
    bad installed_files_and_man_pages "missing: ${missing[*]}"
fi
# The staged tree is relocated: nothing may depend on where it was installed to.
mv "$stage$prefix_at" "$moved"
cp "$repo/scripts/slurm-local.sh" "$repo/tests/fixtures/topo/cpu-only.xml" "$work/"
mkdir -p "$work/mycfg" "$work/nodata"
sed 's/steps = 300;/steps = 77;/' "$moved/share/moekit/configs/L0_sanity.cfg" > "$work/mycfg/L0_sanity.cfg"
cp "$moved/share/moekit/configs/defaults.cfg" "$work/mycfg/"

# Everything below runs with the source tree out of reach.
cat > "$work/inner.sh" <<'INNER'
set -uo pipefail
repo=$1 work=$2 P=$3
mount -t tmpfs -o size=1m moekit-hidden "$repo" || { echo "FAIL cannot hide $repo"; exit 1; }
[ -z "$(ls -A "$repo")" ] || { echo "FAIL $repo still visible"; exit 1; }
cd "$work"
result() { if [ "$2" = 0 ]; then echo "PASS $1"; else echo "FAIL $1"; fi; }
quick=(train.steps=20 scheduler.warmup_steps=2 train.eval_every_n_steps=10 train.eval_batches=2
       parallel.ep=1)

"$P/bin/moe-train" --config L0_sanity "${quick[@]}" checkpoint.ckpt_dir="$work/ck" \
    logger.run_dir="$work/run" > train.out 2>&1
rc=$?; [ $rc = 0 ] && grep -q "done: 20 steps" train.out && [ -s ck/final_model/model.safetensors ]
result "trains L0_sanity from the installed configs and data (exit $rc)" $?
[ $rc = 0 ] || tail -5 train.out

MOE_CONFIG_DIR=$work/mycfg "$P/bin/moe-train" --config L0_sanity --print-config > cfg.out 2>&1
grep -Eq 'steps = 77;' cfg.out; result "MOE_CONFIG_DIR overrides the installed configs" $?
MOE_DATA_DIR=$work/nodata "$P/bin/moe-train" --config L0_sanity "${quick[@]}" > nodata.out 2>&1
[ $? = 1 ] && grep -q "$work/nodata" nodata.out; result "MOE_DATA_DIR overrides the installed data" $?

"$P/bin/moe-topo" --check --json --policy "topology_xml=$work/cpu-only.xml allow_cpu=yes" \
    --ep 1 --ntasks 1 > topo.out 2>&1
grep -q "trainer=$P/bin/moe-train configs=$P/share/moekit/configs data=$P/share/moekit/data" topo.out
result "moe-topo's default policy names the installed trainer and directories" $?

# A Slurm job through the installed plugin, as an admin would set it up: no path arguments.
export SLURM_CONF=$work/cluster/etc/slurm.conf
if ./slurm-local.sh start "$work/cluster" --gpu-type h200 --gpus 2 --port-base $((7600 + $$ % 300 * 5)) \
    --plugin "$P/lib/moekit/spank_moe.so" --plugin-arg "topology_xml=$work/cpu-only.xml" \
    --plugin-arg allow_cpu=yes --plugin-arg bind=no > cluster.log 2>&1; then
    id=$(sbatch --parsable --ntasks-per-node=1 --gres=none -c2 --moe-config=L0_sanity --moe-ep=1 \
        "--moe-set=train.steps=20,scheduler.warmup_steps=2,train.eval_every_n_steps=10,checkpoint.ckpt_dir=$work/sck" \
        -o "$work/job.out" "$P/share/moekit/jobs/sanity.sbatch")
    state=
    for ((i = 0; i < 900; i++)); do
        state=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case $state in PENDING|RUNNING|CONFIGURING|COMPLETING|"") sleep 0.2 ;; *) break ;; esac
    done
    [ "$state" = COMPLETED ] && grep -q "done: 20 steps" job.out && grep -q "backend   cpu" job.out &&
        [ -s sck/final_model/model.safetensors ]
    result "a Slurm job trains through the installed plugin with its default paths ($state)" $?
    [ "$state" = COMPLETED ] || tail -15 job.out
    ./slurm-local.sh stop "$work/cluster" > /dev/null 2>&1
else
    echo "FAIL the Slurm cluster did not start"; tail -15 cluster.log
fi
INNER
unshare -m bash "$work/inner.sh" "$repo" "$work" "$moved" > "$work/inner.log" 2>&1
while IFS= read -r line; do
    case $line in
        PASS\ *) ok "${line#PASS }" ;;
        FAIL\ *) bad "${line#FAIL }" "$(grep -v '^PASS\|^FAIL' "$work/inner.log" | tail -20)" ;;
    esac
done < "$work/inner.log"
[ "$(grep -c '^PASS\|^FAIL' "$work/inner.log")" -ge 5 ] || bad "the hidden-tree checks all ran" "$(tail -20 "$work/inner.log")"

# uninstall removes every file install wrote (staged again, the moved copy untouched)
make -s -C "$repo" install DESTDIR="$stage" PREFIX="$prefix_at" >/dev/null 2>&1
make -s -C "$repo" uninstall DESTDIR="$stage" PREFIX="$prefix_at" >"$work/uninstall.log" 2>&1
left=$(find "$stage" -type f | head -5)
if [ -z "$left" ] && [ ! -d "$stage$prefix_at/share/moekit" ]; then
    ok make_uninstall
else
    bad make_uninstall "left: $left" "$(tail -3 "$work/uninstall.log")"
fi
summary

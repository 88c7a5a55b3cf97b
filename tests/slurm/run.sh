#!/bin/bash
# moekit: end-to-end tests of the SPANK plugin on a real Slurm cluster on this machine.
#
#   tests/slurm/run.sh [BUILD_DIR]      (default build; run `make` first, as root)
#
# Starts a single-node cluster (scripts/slurm-local.sh) in a temporary directory, with fake GPUs
# posing as B200s or H200s and the plugin's policy pointing at a saved topology of that node
# (tests/fixtures/topo/), then submits jobs the way users do and checks what they see: sbatch's
# exit status and messages, the job's output, its final state, the node's state, and what the
# trainer received. Most cases use tests/slurm/record_launch as the trainer, which writes down
# its argv and environment; the CPU case trains the real moe-train. Every daemon started is
# stopped by pid at the end, pass or fail. KEEP=1 keeps the directory for a look afterwards;
# CASES="name ..." runs only those cases.
# The last line is "slurm: N passed, N failed".
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$repo/$build ;; esac
plugin=$build/lib/spank_moe.so
recorder=$build/tests/slurm/record_launch
queries=$build/tests/slurm/queries.log  # the recorder's log of the plugin's questions
trainer=$build/bin/moe-train
fixtures=$repo/tests/fixtures/topo
cluster_sh=$repo/scripts/slurm-local.sh

passed=0 failed=0
say() { echo "slurm: $*"; }
summary() { echo "slurm: $passed passed, $failed failed"; }

if [ "$(id -u)" -ne 0 ]; then
    say "needs root (munged, slurmd and mknod); skipping nothing, failing instead"
    failed=1; summary; exit 1
fi
"$cluster_sh" install || { failed=1; summary; exit 1; }
for f in "$plugin" "$recorder"; do
    if [ ! -x "$f" ] && [ ! -f "$f" ]; then
        say "$f is missing: run make first (the plugin needs libslurm-dev when make runs)"
        failed=1; summary; exit 1
    fi
done

if readelf -d "$plugin" 2>/dev/null | grep -q 'NEEDED.*libasan'; then
    # slurmstepd and the client commands have no sanitizer runtime to load it into.
    say "$plugin is a sanitizer build, which Slurm cannot load; run this suite on a plain build"
    failed=1; summary; exit 1
fi

work=$(mktemp -d /tmp/moekit-slurm.XXXXXX)
chmod 755 "$work"
cluster=$work/cluster
export SLURM_CONF=$cluster/etc/slurm.conf
# Ports out of the way of a quickstart cluster (6817) and of the trainer's rendezvous range.
port_base=$((7100 + ($$ % 400) * 5))

cleanup() {
    "$cluster_sh" stop "$cluster" >/dev/null 2>&1 || true
    if [ "${KEEP:-0}" = 1 ]; then echo "slurm: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_cluster() { # GPU_TYPE [NODES]
    "$cluster_sh" stop "$cluster" >/dev/null 2>&1 || true
    "$cluster_sh" start "$cluster" --gpu-type "$1" --nodes "${2:-1}" --port-base "$port_base" \
        --plugin "$plugin" \
        --plugin-arg "trainer=$recorder" >"$work/start.log" 2>&1 || {
        cat "$work/start.log"; tail -20 "$cluster"/log/*.log 2>/dev/null
        return 1
    }
    node=$(head -1 "$cluster/etc/nodes")
}

policy() { # plugin arguments for the next jobs (plugstack.conf is read by every new step)
    "$cluster_sh" plugstack "$cluster" --plugin "$plugin" "$@" >/dev/null
}

# ---------------------------------------------------------------- job helpers

# Final state of a job, waiting up to $2 seconds (default 60) for it to end.
wait_job() {
    local id=$1 limit=${2:-60} state deadline=$((SECONDS + ${2:-60}))
    while :; do
        state=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case $state in
            COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)
                echo "$state"; return 0 ;;
        esac
        if [ $SECONDS -ge $deadline ]; then echo "TIMEOUT_WAITING($state)"; return 1; fi
        sleep 0.2
    done
}
job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
jobs_known() { scontrol show jobs 2>/dev/null | grep -c '^JobId='; }
node_state() { sinfo -h -n "$node" -o %t; }

# The test bookkeeping: each case prints its failures and is counted once.
case_failures=()
expect() { # DESCRIPTION COMMAND...: record a failure unless COMMAND succeeds
    local what=$1; shift
    "$@" || case_failures+=("$what")
}
contains() { grep -qF -- "$2" "$1"; }
absent() { ! grep -qF -- "$2" "$1"; }
equals() { [ "$1" = "$2" ]; }

run_case() { # NAME FUNCTION
    local name=$1 fn=$2 t0=$SECONDS
    if [ -n "${CASES:-}" ] && [[ " $CASES " != *" $name "* ]]; then return 0; fi
    case_failures=()
    mkdir -p "$work/$name"
    ( cd "$work/$name" && "$fn" ) > "$work/$name.log" 2>&1
    local rc=$?
    # Failures recorded inside the subshell come back through this file.
    if [ -s "$work/$name/FAILURES" ] || [ $rc -ne 0 ]; then
        failed=$((failed + 1))
        echo "FAIL $name ($((SECONDS - t0)) s)"
        sed 's/^/    /' "$work/$name/FAILURES" 2>/dev/null
        [ $rc -ne 0 ] && echo "    (case exited $rc)"
        echo "    --- case log:"; tail -25 "$work/$name.log" | sed 's/^/    | /'
    else
        passed=$((passed + 1))
        echo "ok   $name ($((SECONDS - t0)) s)"
    fi
}
# Called at the end of each case function (inside its subshell).
done_case() {
    local f
    for f in "${case_failures[@]}"; do echo "$f" >> FAILURES; done
    return 0
}

# sbatch that must be refused: exit non-zero, nothing queued, message in stderr.
expect_refused() { # MESSAGE_FRAGMENT SBATCH_ARGS...
    local want=$1; shift
    local before rc
    before=$(jobs_known)
    sbatch "$@" > out.txt 2> err.txt; rc=$?
    expect "sbatch $* exits non-zero (got $rc)" test "$rc" -ne 0
    expect "sbatch $* says '$want'; said: $(tr '\n' ' ' < err.txt)" contains err.txt "$want"
    expect "sbatch $* queued nothing" equals "$(jobs_known)" "$before"
}

b200=$fixtures/b200x8.xml
h200=$fixtures/h200x8.xml
cpu_only=$fixtures/cpu-only.xml
sanity=$repo/jobs/sanity.sbatch

# ---------------------------------------------------------------- cases: B200 node

case_blackwell_mxfp8() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    local id
    id=$(sbatch --parsable --moe-config=L0_sanity -o job.out --export=ALL,RECORD_LAUNCH_DIR=$PWD \
        "$sanity")
    expect "job finished COMPLETED" equals "$(wait_job "$id")" COMPLETED
    expect "verdict says MXFP8" contains job.out "so the job trains in MXFP8"
    expect "two tasks launched" test -f launch.0 -a -f launch.1
    local port
    for r in 0 1; do
        expect "task $r argv[0]" contains launch.$r "argv[0]=moe-train"
        expect "task $r --config resolved in configs=" contains launch.$r "argv[2]=$repo/configs/L0_sanity.cfg"
        expect "task $r precision" contains launch.$r "precision.compute=mxfp8"
        expect "task $r layout from the config" contains launch.$r "argv[4]=parallel.ep=2"
        expect "task $r dp" contains launch.$r "argv[5]=parallel.dp=1"
        expect "task $r MOE_RANK" contains launch.$r "env MOE_RANK=$r"
        expect "task $r MOE_WORLD_SIZE" contains launch.$r "env MOE_WORLD_SIZE=2"
        expect "task $r MOE_LOCAL_RANK" contains launch.$r "env MOE_LOCAL_RANK=$r"
        expect "task $r MOE_LOCAL_WORLD_SIZE" contains launch.$r "env MOE_LOCAL_WORLD_SIZE=2"
        expect "task $r MOE_MASTER_ADDR" contains launch.$r "env MOE_MASTER_ADDR=$node"
        expect "task $r MOE_PRECISION" contains launch.$r "env MOE_PRECISION=mxfp8"
        expect "task $r MOE_DP" contains launch.$r "env MOE_DP=1"
        expect "task $r MOE_CONFIG" contains launch.$r "env MOE_CONFIG=$repo/configs/L0_sanity.cfg"
        expect "task $r no MOE_CHECK_ONLY" absent launch.$r "MOE_CHECK_ONLY"
        port=$(sed -n 's/^env MOE_MASTER_PORT=//p' launch.$r)
        expect "task $r MOE_MASTER_PORT=$port in 20000-31999" test "${port:-0}" -ge 20000 -a "${port:-0}" -lt 32000
    done
    expect "both tasks agree on the port" equals "$(grep MASTER_PORT launch.0)" "$(grep MASTER_PORT launch.1)"
    expect "the verdict is printed once (task 0)" equals "$(grep -c 'trains in MXFP8' job.out)" 1
    done_case
}

case_srun_direct_and_binding() {
    # srun outside any batch script; bind=yes narrows each task to its own GPU.
    policy "trainer=$recorder" "topology_xml=$b200" bind=yes
    RECORD_LAUNCH_DIR=$PWD srun --gres=gpu:2 -n2 --moe-config=L0_sanity --moe-ep=2 moe-train \
        > out.txt 2> err.txt
    expect "srun exits 0" test $? -eq 0
    expect "two tasks launched" test -f launch.0 -a -f launch.1
    local g0 g1
    g0=$(sed -n 's/^env CUDA_VISIBLE_DEVICES=//p' launch.0)
    g1=$(sed -n 's/^env CUDA_VISIBLE_DEVICES=//p' launch.1)
    expect "each task sees one GPU ($g0 / $g1)" test -n "$g0" -a -n "$g1" -a "$g0" != "$g1"
    expect "one GPU each, not a list" test "${g0#*,}" = "$g0" -a "${g1#*,}" = "$g1"
    expect "binding reported per task" equals "$(grep -c 'moekit: task [01]: GPU' err.txt)" 2
    expect "CUDA_DEVICE_ORDER set" contains launch.0 "env CUDA_DEVICE_ORDER=PCI_BUS_ID"
    done_case
}

case_user_cannot_pick_program_or_env() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    MOE_PRECISION=fp8_block MOE_EP=64 RECORD_LAUNCH_DIR=$PWD \
        srun --gres=gpu:2 -n2 --moe-config=L0_sanity /bin/sh -c 'echo PWNED; touch pwned' \
        > out.txt 2> err.txt
    expect "the user's program did not run" absent out.txt "PWNED"
    expect "no file from the user's program" test ! -e pwned
    expect "the trainer ran instead" test -f launch.0
    expect "the user's MOE_PRECISION was replaced" contains launch.0 "env MOE_PRECISION=mxfp8"
    expect "the user's MOE_EP was removed" absent launch.0 "env MOE_EP="
    expect "one MOE_PRECISION only" equals "$(grep -c '^env MOE_PRECISION=' launch.0)" 1
    done_case
}

case_untouched_without_options() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    srun -n1 --gres=gpu:1 /bin/echo plain-step > out.txt 2> err.txt
    expect "a plain srun runs its own program" contains out.txt "plain-step"
    expect "and the plugin says nothing" absent err.txt "moekit"
    local id
    id=$(sbatch --parsable -o job.out --wrap 'echo plain-batch; srun -n1 /bin/echo plain-inner')
    expect "a plain batch job completes" equals "$(wait_job "$id")" COMPLETED
    expect "its script ran" contains job.out "plain-batch"
    expect "its srun ran its own program" contains job.out "plain-inner"
    done_case
}

case_moe_check() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    local id
    id=$(sbatch --parsable --moe-config=L0_sanity --moe-check -o job.out \
        --export=ALL,RECORD_LAUNCH_DIR=$PWD "$sanity")
    expect "the check job completes" equals "$(wait_job "$id")" COMPLETED
    expect "it prints the verdict" contains job.out "so the job trains in MXFP8"
    expect "it says it does not train" contains job.out "not training"
    expect "the trainer was never started" test ! -e launch.0 -a ! -e launch.1
    expect "the job control env carries the request" contains job.out "config L0_sanity"
    done_case
}

case_export_none() {
    # The batch step sees no submit environment; its srun must still get the options.
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    local id
    id=$(sbatch --parsable --export=NONE --moe-config=L0_sanity --moe-set=train.seed=7 \
        -o job.out "$sanity")
    expect "the job completes" equals "$(wait_job "$id")" COMPLETED
    expect "the trainer got the request" contains job.out "argv[6]=train.seed=7"
    expect "the script saw the request" contains job.out "overrides train.seed=7"
    done_case
}

case_dp_ep_mismatch_at_submit() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    # 2 GPUs and 2 tasks (the script's #SBATCH lines), but DP x EP = 4.
    expect_refused "--moe-dp=2 x --moe-ep=2" --moe-config=L0_sanity --moe-ep=2 --moe-dp=2 "$sanity"
    expect_refused "refused before queueing" --moe-config=L0_sanity --moe-ep=2 --moe-dp=2 "$sanity"
    # The command line beats the script: 4 GPUs, but DP x EP = 1 x 2.
    expect_refused "the job requests 4 GPUs" --gres=gpu:4 --ntasks-per-node=4 \
        --moe-config=L0_sanity --moe-ep=2 --moe-dp=1 "$sanity"
    expect_refused "EP=3" --gres=gpu:4 --ntasks-per-node=4 --moe-config=L0_sanity --moe-ep=3 \
        "$sanity"
    # EP must divide the config's experts (L0_sanity has 4).
    expect_refused "does not divide the 4 experts" --gres=gpu:8 --ntasks-per-node=8 \
        --moe-config=L0_sanity --moe-ep=8 "$sanity"
    # srun is refused too, before any task starts.
    srun --gres=gpu:2 -n2 --moe-config=L0_sanity --moe-ep=2 --moe-dp=2 true > out.txt 2> err.txt
    expect "srun refused" test $? -ne 0
    expect "srun says why" contains err.txt "--moe-dp=2 x --moe-ep=2"
    done_case
}

case_bad_option_values() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    expect_refused "--moe-ep=zero: not a whole number" --moe-config=L0_sanity --moe-ep=zero "$sanity"
    expect_refused "--moe-ep=0: must be at least 1" --moe-config=L0_sanity --moe-ep=0 "$sanity"
    expect_refused "--moe-dp=-2: not a whole number" --moe-config=L0_sanity --moe-dp=-2 "$sanity"
    expect_refused "--moe-ep=99999999999: too large" --moe-config=L0_sanity --moe-ep=99999999999 "$sanity"
    expect_refused "--moe-ep=2x: not a whole number" --moe-config=L0_sanity --moe-ep=2x "$sanity"
    expect_refused "--moe-precision=fp4: unknown precision" --moe-config=L0_sanity --moe-precision=fp4 "$sanity"
    expect_refused "allow_user_configs=no" --moe-config=../etc/passwd "$sanity"
    expect_refused "';' is not allowed" "--moe-config=a;reboot" "$sanity"
    expect_refused "--moe-config=no_such: no such config" --moe-config=no_such "$sanity"
    expect_refused "available: L0_sanity" --moe-config=no_such "$sanity"
    expect_refused "use --moe-precision" --moe-config=L0_sanity --moe-set=precision.compute=mxfp8 "$sanity"
    expect_refused "not key=value" --moe-config=L0_sanity --moe-set=train.steps "$sanity"
    expect_refused "no_such_key" --moe-config=L0_sanity --moe-set=train.no_such_key=1 "$sanity"
    expect_refused "need --moe-config" --moe-ep=2 --wrap 'srun true' 
    local long
    long=$(printf 'x%.0s' $(seq 1 300))
    expect_refused "characters long" "--moe-config=$long" "$sanity"
    done_case
}

case_user_config_paths() {
    cat > mine.cfg <<EOF
base = "$repo/configs/L0_sanity.cfg";
train = { steps = 5; };
scheduler = { warmup_steps = 1; };
EOF
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    expect_refused "allow_user_configs=no" --moe-config=$PWD/mine.cfg "$sanity"
    policy "trainer=$recorder" "topology_xml=$b200" bind=no allow_user_configs=yes
    local id
    id=$(sbatch --parsable --moe-config=$PWD/mine.cfg -o job.out \
        --export=ALL,RECORD_LAUNCH_DIR=$PWD "$sanity")
    expect "a user's config runs when the admin allows it" equals "$(wait_job "$id")" COMPLETED
    expect "the trainer got the user's path" contains launch.0 "argv[2]=$PWD/mine.cfg"
    done_case
}

case_bad_policy_fails_loudly() {
    policy "trainer=$recorder" "topology_xml=$b200" no_such_key=1
    sbatch --moe-config=L0_sanity "$sanity" > out.txt 2> err.txt
    expect "sbatch fails" test $? -ne 0
    expect "the message names plugstack.conf" contains err.txt "plugstack.conf"
    expect "the message names the argument" contains err.txt "no_such_key"
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    done_case
}

# An unprivileged user (nobody) submitting from the case directory: identity matters for what the
# plugin may read and for whose jobs a mistake may touch.
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups -- env SLURM_CONF="$SLURM_CONF" "$@"; }

case_bad_policy_live_edit() {
    # Jobs queued under a good plugstack line run after an admin breaks it while slurmd runs.
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    chmod 777 .
    local plain moe why="plugstack.conf arguments for spank_moe.so are wrong"
    plain=$(as_user sbatch --parsable -H -o plain.out --wrap 'echo plain-ran; srun /bin/echo plain-step')
    moe=$(as_user sbatch --parsable -H --moe-config=L0_sanity -o moe.out \
        --export=ALL,RECORD_LAUNCH_DIR=$PWD "$sanity")
    expect "both jobs queued ($plain, $moe)" test -n "$plain" -a -n "$moe"
    policy "trainer=$recorder" "topology_xml=$b200" bind=maybe
    scontrol release "$plain" "$moe"
    expect "the plain job completes" equals "$(wait_job "$plain")" COMPLETED
    expect "the plain job's script ran" contains plain.out "plain-ran"
    expect "the plain job's step ran" contains plain.out "plain-step"
    expect "the plain job heard nothing from moekit" absent plain.out "moekit"
    expect "the moekit job fails" equals "$(wait_job "$moe")" FAILED
    expect "its stderr says why" contains moe.out "$why"
    expect "and names the argument" contains moe.out "bind=maybe"
    expect "the trainer never started" test ! -e launch.0
    sleep 1
    expect "the node is still up ($(node_state))" equals "$(node_state)" idle
    # New submissions: moekit ones refused before queueing with the same reason, others run.
    local before rc
    before=$(jobs_known)
    as_user sbatch --moe-config=L0_sanity "$sanity" > out.txt 2> err.txt; rc=$?
    expect "sbatch refuses a moekit job (rc $rc)" test "$rc" -ne 0
    expect "sbatch says why: $(cat err.txt)" contains err.txt "$why"
    expect "sbatch names the argument" contains err.txt "bind=maybe"
    expect "nothing queued" equals "$(jobs_known)" "$before"
    as_user srun -n1 --gres=gpu:1 --moe-config=L0_sanity true > out.txt 2> err.txt; rc=$?
    expect "srun refuses a moekit step (rc $rc)" test "$rc" -ne 0
    expect "srun says why" contains err.txt "$why"
    as_user srun -n1 /bin/echo still-plain > out.txt 2> err.txt
    expect "a plain srun still runs" contains out.txt "still-plain"
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    done_case
}

case_step_without_gpus() {
    # A step that holds no GPU has none, even on a GPU node or inside a job that holds some.
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    RECORD_LAUNCH_DIR=$PWD srun -n2 --gres=none --moe-config=L0_sanity --moe-ep=2 moe-train \
        > out.txt 2> err.txt
    expect "srun --gres=none fails under allow_cpu=no" test $? -ne 0
    expect "the CPU policy said why: $(tr '\n' ' ' < err.txt)" contains err.txt "allow_cpu=no"
    expect "no Blackwell verdict" absent err.txt "B200"
    expect "no trainer started" test ! -e launch.0
    local id
    id=$(sbatch --parsable -n2 --gres=gpu:2 --moe-config=L0_sanity --moe-ep=2 -o job.out \
        --export=ALL,RECORD_LAUNCH_DIR=$PWD --wrap 'srun --gres=none moe-train')
    expect "a --gres=none step in a GPU job fails" equals "$(wait_job "$id")" FAILED
    expect "the CPU policy said why" contains job.out "allow_cpu=no"
    expect "no trainer started" test ! -e launch.0
    policy "trainer=$recorder" "topology_xml=$b200" bind=no allow_cpu=yes
    id=$(sbatch --parsable -n2 --gres=gpu:2 --moe-config=L0_sanity --moe-ep=2 -o job2.out \
        --export=ALL,RECORD_LAUNCH_DIR=$PWD --wrap 'srun --gres=none moe-train')
    expect "with allow_cpu=yes it runs" equals "$(wait_job "$id")" COMPLETED
    expect "on the CPU backend" contains launch.0 "argv[4]=cpu"
    expect "and sees no GPU" grep -qx "env CUDA_VISIBLE_DEVICES=" launch.1
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    done_case
}

case_odd_submit_dir_and_full_set() {
    # The scripts add checkpoint.ckpt_dir=$SLURM_SUBMIT_DIR/... and resume_from_checkpoint=true to
    # a user list of the full 64 items, submitted from a directory with ',', '"', '\' and '['.
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    local here=$PWD odd="$PWD/a,b\"c\\d x[1" items="" i id
    mkdir -p "$odd"
    for ((i = 0; i < 64; i++)); do items="${items:+$items,}train.seed=$i"; done
    id=$(cd "$odd" && sbatch --parsable --moe-config=L0_sanity "--moe-set=$items" \
        -o "$here/job.out" --export=ALL,RECORD_LAUNCH_DIR=$here "$sanity")
    expect "the job completes" equals "$(wait_job "$id")" COMPLETED
    expect "the trainer got the path intact" \
        grep -qxF "argv[70]=checkpoint.ckpt_dir=$odd/checkpoints/moe-sanity-$id" launch.0
    expect "and still resumes" grep -qxF "argv[71]=checkpoint.resume_from_checkpoint=true" launch.0
    expect "the user's 64 items came first" grep -qxF "argv[69]=train.seed=63" launch.0
    # An unbalanced '[' is refused at submit instead of swallowing the next item.
    expect_refused "'[' without ']'" --moe-config=L0_sanity \
        "--moe-set=checkpoint.ckpt_dir=/s/x[1,checkpoint.resume_from_checkpoint=true" "$sanity"
    expect_refused "more than 64 items" --moe-config=L0_sanity "--moe-set=$items,train.seed=64" \
        "$sanity"
    done_case
}

chain_wait() { # SANITY_ID SCALE_ID: both final states, "A B"
    local a b
    a=$(wait_job "$1" 60); b=$(wait_job "$2" 60)
    echo "$a $b"
}

case_chain_runs_scale_after_sanity() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    RECORD_LAUNCH_DIR=$PWD "$repo/jobs/chain.sh" --ckpt-dir "$PWD/ck" --run-dir "$PWD/runs" \
        --scale-opt=--moe-check > chain.txt 2>&1
    expect "chain.sh exits 0" test $? -eq 0
    local s c
    s=$(sed -n 's/^sanity job //p' chain.txt); c=$(sed -n 's/^scale job //p' chain.txt)
    expect "chain.sh printed both ids ($s, $c)" test -n "$s" -a -n "$c"
    expect "the scale job depends on the sanity job" contains <(scontrol show job "$c") "afterok:$s"
    expect "sanity then scale complete" equals "$(chain_wait "$s" "$c")" "COMPLETED COMPLETED"
    expect "sanity got the chain's directories" contains launch.0 "checkpoint.ckpt_dir=$PWD/ck/sanity"
    expect "the scale job reached its verdict" contains "slurm-$c.out" "Running EP=8 x DP=1 on 8 GPUs"
    done_case
}

case_chain_cancels_scale_after_failed_sanity() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    # The stand-in trainer fails when it cannot write its record.
    RECORD_LAUNCH_DIR=/nonexistent/moekit "$repo/jobs/chain.sh" --ckpt-dir "$PWD/ck" \
        --run-dir "$PWD/runs" --scale-opt=--moe-check > chain.txt 2>&1
    local s c
    s=$(sed -n 's/^sanity job //p' chain.txt); c=$(sed -n 's/^scale job //p' chain.txt)
    expect "chain.sh printed both ids ($s, $c)" test -n "$s" -a -n "$c"
    expect "sanity fails and scale is cancelled" equals "$(chain_wait "$s" "$c")" "FAILED CANCELLED"
    expect "the scale job never ran" test ! -e "slurm-$c.out"
    done_case
}

case_chain_help() {
    "$repo/jobs/chain.sh" --help > help.txt
    expect "--help exits 0" test $? -eq 0
    expect "--help lists --partition" contains help.txt "--partition"
    "$repo/jobs/chain.sh" --bogus > out.txt 2> err.txt
    expect "an unknown option fails" test $? -ne 0
    expect "and is named" contains err.txt "unknown option '--bogus'"
    done_case
}

case_salloc() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    RECORD_LAUNCH_DIR=$PWD timeout 60 salloc -n2 --gres=gpu:2 --moe-config=L0_sanity \
        srun moe-train > out.txt 2> err.txt
    expect "salloc exits 0" test $? -eq 0
    expect "its srun launched the trainer on both tasks" test -f launch.0 -a -f launch.1
    expect "with the verdict" contains err.txt "trains in MXFP8"
    timeout 60 salloc -n2 --gres=gpu:2 --moe-config=L0_sanity --moe-ep=4 true > out.txt 2> err.txt
    expect "salloc refuses a bad layout" test $? -ne 0
    expect "and says why" contains err.txt "--moe-ep=4 needs at least 4 GPUs"
    done_case
}

# A rank that exits non-zero ends the step's other tasks (srun --kill-on-bad-exit=1): the plugin
# turns it on for the srun steps of moekit jobs (SLURM_KILL_BAD_EXIT=1 from sbatch and salloc,
# unless the submitter set it), and the jobs/ scripts pass the option themselves. The stand-in
# trainer fails on rank 1 at once; rank 0 would sleep FAIL_SLEEP seconds (default 60) and leave
# a mark, so a step still waiting for rank 0 shows as a mark or a job past its bound.
elapsed_s() { # JOB: seconds from start to end (9999 while it has not ended)
    local a b
    a=$(date -d "$(job_field "$1" StartTime)" +%s 2>/dev/null) &&
        b=$(date -d "$(job_field "$1" EndTime)" +%s 2>/dev/null) && echo $((b - a)) || echo 9999
}
case_bad_exit_ends_step() {
    # The plugin asks its trainer= for the config's facts (`query ...`) before it starts it; this
    # stand-in hands those questions to the recorder, which hands them to the build's moe-train.
    printf '#!/bin/sh\n[ "$1" = query ] && exec %s "$@"\n' "$recorder" > fail_one.sh
    cat >> fail_one.sh <<'EOF'
mkdir -p "$MARK_DIR"
echo "SLURM_KILL_BAD_EXIT=${SLURM_KILL_BAD_EXIT-unset}" > "$MARK_DIR/env.$MOE_RANK"
[ "$MOE_RANK" = 1 ] && exit 3
# the mark only when the sleep ran out: a step that signals the shell and its sleep in
# either order must not read as a rank left to finish
sleep "${FAIL_SLEEP:-60}" && touch "$MARK_DIR/finished.$MOE_RANK"
EOF
    chmod 755 fail_one.sh
    policy "trainer=$PWD/fail_one.sh" "topology_xml=$b200" bind=no
    local wrap script optout plain t
    # a user's own batch script with a plain srun: the plugin's setting
    wrap=$(sbatch --parsable -n2 --gres=gpu:2 --moe-config=L0_sanity --moe-ep=2 -o wrap.out \
        --export=ALL,MARK_DIR=$PWD/wrap --wrap 'srun moe-train')
    # the shipped script, its submitter opting out: the script's own --kill-on-bad-exit=1
    script=$(SLURM_KILL_BAD_EXIT=0 sbatch --parsable --moe-config=L0_sanity -o script.out \
        --export=ALL,MARK_DIR=$PWD/script "$sanity")
    # the submitter's own SLURM_KILL_BAD_EXIT=0 is kept: the step waits for rank 0 (3 s)
    optout=$(SLURM_KILL_BAD_EXIT=0 sbatch --parsable -n2 --gres=gpu:2 --moe-config=L0_sanity \
        --moe-ep=2 -o optout.out --export=ALL,MARK_DIR=$PWD/optout,FAIL_SLEEP=3 --wrap 'srun moe-train')
    # a job without --moe-* options is left as it was
    plain=$(sbatch --parsable -n1 -o plain.out --wrap 'echo "KBE=${SLURM_KILL_BAD_EXIT-unset}"')
    expect "the user's script job fails" equals "$(wait_job "$wrap" 40)" FAILED
    expect "the shipped script's job fails" equals "$(wait_job "$script" 40)" FAILED
    expect "the opted-out job fails" equals "$(wait_job "$optout" 40)" FAILED
    expect "the plain job completes" equals "$(wait_job "$plain" 40)" COMPLETED
    for t in wrap script; do
        expect "$t: rank 1's exit was seen" contains $t.out "task 1: Exited with exit code 3"
        expect "$t: rank 0 was ended, not left to finish" test ! -e $t/finished.0
        expect "$t: the step ended within 20 s of the start ($(elapsed_s "${!t}") s)" \
            test "$(elapsed_s "${!t}")" -lt 20
    done
    expect "the plugin set SLURM_KILL_BAD_EXIT=1 for the user's srun" \
        grep -qx "SLURM_KILL_BAD_EXIT=1" wrap/env.0
    expect "the submitter's SLURM_KILL_BAD_EXIT=0 was kept" grep -qx "SLURM_KILL_BAD_EXIT=0" script/env.0
    expect "opted out, the step waited for rank 0" test -e optout/finished.0
    expect "the plain job saw no SLURM_KILL_BAD_EXIT" contains plain.out "KBE=unset"
    # salloc: the command it runs (and its sruns) inherit the setting
    local t0=$SECONDS rc
    MARK_DIR=$PWD/salloc timeout 60 salloc -n2 --gres=gpu:2 --moe-config=L0_sanity --moe-ep=2 \
        srun moe-train > salloc.txt 2>&1
    rc=$?
    expect "salloc's step fails (exit $rc: $(tail -n 1 salloc.txt))" test $rc -ne 0
    expect "salloc's step ended within 20 s ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -lt 20
    expect "salloc's srun ended rank 0" test ! -e salloc/finished.0
    expect "salloc's srun had SLURM_KILL_BAD_EXIT=1" grep -qx "SLURM_KILL_BAD_EXIT=1" salloc/env.0
    done_case
}

# The trainer answers the plugin's questions (plugin/planner.h): the memory plan it makes refuses
# the step on every task; a trainer that cannot answer refuses the step, never the node.
case_memory_refused_by_the_trainers_plan() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no refuse_memory_short=yes
    local id asked=$(cat "$queries" 2>/dev/null | wc -l)
    id=$(sbatch --parsable -n4 --gres=gpu:4 --moe-config=L1_8x7B_ep --moe-ep=4 --moe-precision=bf16 \
        -o job.out --export=ALL,RECORD_LAUNCH_DIR=$PWD --wrap 'srun moe-train')
    expect "job finished FAILED" equals "$(wait_job "$id")" FAILED
    expect "the plan's numbers" contains job.out "moekit: memory refused: L1_8x7B_ep at EP=4 x DP=1 needs"
    expect "what would fit" contains job.out "Would fit or help"
    expect "every task refuses (one answer shared by the node's tasks)" \
        equals "$(grep -c 'refused: see the memory plan above' job.out)" 4
    expect "the trainer never started" test ! -e launch.0
    # sbatch's check, srun's (its two checks share one answer), then on the node one
    # --config-facts and one --plan-fit for the 4 tasks: 4, where one a task would be 11
    asked=$(( $(wc -l < "$queries") - asked ))
    expect "the trainer was asked 4 times ($asked)" equals "$asked" 4
    sleep 1
    expect "the node is still idle ($(node_state))" equals "$(node_state)" idle
    done_case
}

case_trainer_missing_refuses_the_step() {
    # the submit host has no such trainer either, so the check is the node's
    policy "trainer=/nonexistent/moekit/bin/moe-train" "topology_xml=$b200" bind=no
    local id
    id=$(sbatch --parsable --moe-config=L0_sanity -o job.out "$sanity")
    expect "queued: the submit host leaves it to the node" test -n "$id"
    expect "job finished FAILED" equals "$(wait_job "$id")" FAILED
    expect "the refusal names the program and why" contains job.out \
        "cannot run /nonexistent/moekit/bin/moe-train: No such file or directory"
    sleep 1
    expect "the node is still idle ($(node_state))" equals "$(node_state)" idle
    done_case
}

case_trainer_that_hangs_is_killed() {
    printf '#!/bin/sh\necho thinking >&2\nsleep 60\n' > hang.sh
    chmod 755 hang.sh
    policy "trainer=$PWD/hang.sh" "topology_xml=$b200" bind=no planner_timeout=2
    local t0=$SECONDS
    expect_refused "hang.sh did not answer within 2 s (killed; planner_timeout=" \
        --moe-config=L0_sanity "$sanity"
    expect "sbatch gave up within 10 s ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -lt 10
    expect "with what it said" contains err.txt "it said: thinking"
    expect "no sleep left behind" test -z "$(pgrep -f "$PWD/hang.sh")"
    done_case
}

# ---------------------------------------------------------------- cases: two B200 nodes

case_scale_two_nodes() {
    policy "trainer=$recorder" "topology_xml=$b200" bind=no
    local id
    id=$(sbatch --parsable --nodes=2 -o job.out --export=ALL,RECORD_LAUNCH_DIR=$PWD \
        "$repo/jobs/scale.sbatch")
    expect "job finished COMPLETED" equals "$(wait_job "$id")" COMPLETED
    expect "EP inside a node, DP across nodes" contains job.out "Running EP=8 x DP=2 on 16 GPUs"
    expect "16 tasks launched" equals "$(ls launch.* 2>/dev/null | wc -l)" 16
    expect "rank 15 is local rank 7" contains launch.15 "env MOE_LOCAL_RANK=7"
    expect "every rank meets at the first node" \
        equals "$(cat launch.* | grep -c "^env MOE_MASTER_ADDR=$node\$")" 16
    expect "the trainer got the layout" contains launch.9 "argv[5]=parallel.dp=2"
    done_case
}

# ---------------------------------------------------------------- cases: H200 node

case_hopper_bf16_fallback() {
    policy "trainer=$recorder" "topology_xml=$h200" bind=no
    local id
    id=$(sbatch --parsable --gres=gpu:h200:2 --moe-config=L0_sanity -o job.out \
        --export=ALL,RECORD_LAUNCH_DIR=$PWD "$sanity")
    expect "job finished COMPLETED" equals "$(wait_job "$id")" COMPLETED
    expect "the paragraph names the H200s" contains job.out "2x NVIDIA H200 (sm_90, Hopper)"
    expect "the paragraph says BF16" contains job.out "BF16"
    expect "the trainer got bf16" contains launch.0 "precision.compute=bf16"
    expect "MOE_PRECISION=bf16" contains launch.1 "env MOE_PRECISION=bf16"
    done_case
}

case_hopper_rejected_node_stays_up() {
    policy "trainer=$recorder" "topology_xml=$h200" bind=no on_non_blackwell=reject
    local id
    id=$(sbatch --parsable --moe-config=L0_sanity -o job.out --export=ALL,RECORD_LAUNCH_DIR=$PWD \
        "$sanity")
    expect "job finished FAILED" equals "$(wait_job "$id")" FAILED
    expect "the reason is in the job's output" contains job.out "on_non_blackwell=reject"
    expect "the refusal line" contains job.out "refused: see the verdict above"
    expect "the trainer never started" test ! -e launch.0
    sleep 1
    expect "the node is still idle ($(node_state))" equals "$(node_state)" idle
    done_case
}

# ---------------------------------------------------------------- cases: CPU only

case_cpu_refused_without_allow_cpu() {
    policy "trainer=$recorder" "topology_xml=$cpu_only" bind=no
    local id
    id=$(sbatch --parsable -n1 --moe-config=L0_sanity --moe-ep=1 -o job.out --wrap 'srun moe-train')
    expect "job finished FAILED" equals "$(wait_job "$id")" FAILED
    expect "the reason is in the job's output" contains job.out "allow_cpu=no"
    done_case
}

case_cpu_trains_for_real() {
    if [ ! -x "$trainer" ]; then
        case_failures+=("$trainer is not built: the real training case did not run")
        done_case; return
    fi
    policy "trainer=$trainer" "topology_xml=$cpu_only" allow_cpu=yes bind=no
    local id
    id=$(sbatch --parsable -n1 -c2 --moe-config=L0_sanity --moe-ep=1 \
        "--moe-set=train.steps=20,scheduler.warmup_steps=2,train.eval_every_n_steps=0,checkpoint.ckpt_dir=$PWD/ckpt,logger.run_dir=$PWD/run" \
        -o job.out --wrap 'srun moe-train')
    expect "the training job completes" equals "$(wait_job "$id" 180)" COMPLETED
    expect "the verdict chose the CPU" contains job.out "FP32 CPU backend"
    expect "the trainer ran on the cpu backend" contains job.out "backend   cpu"
    expect "it trained 20 steps" contains job.out "moe-train: done: 20 steps"
    expect "a checkpoint was written" test -d ckpt/step_00000020
    expect "the final model was saved" test -s ckpt/final_model/model.safetensors
    done_case
}

# ---------------------------------------------------------------- cases: preemption and requeue

# A tiny model on the CPU whose steps take milliseconds: long enough to signal mid-run.
preempt_set() { # CKPT_DIR RUN_DIR
    echo "--moe-set=model.hidden_size=16,model.num_layers=1,model.num_heads=2,model.num_kv_heads=1,model.head_dim=8,model.num_experts=2,model.top_k=1,model.intermediate_size=16,train.seq_length=32,train.micro_batch_size=2,train.steps=400,train.eval_every_n_steps=0,train.eval_batches=1,scheduler.warmup_steps=10,logger.frequency=1000,checkpoint.save_every_n_steps=0,checkpoint.ckpt_dir=$1,logger.run_dir=$2"
}
# The sanity script as a one-task CPU job (the command line replaces the script's layout).
sbatch_cpu_sanity() { sbatch --parsable -n1 --ntasks-per-node=1 -c2 --gres=none --moe-ep=1 "$@" "$sanity"; }
wait_metrics() { # FILE LINES: the run logged that many steps (60 s at most)
    local i
    for ((i = 0; i < 600; i++)); do
        [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
# Each step once, with the straight run's loss, lr and grad_norm.
same_metrics() { # REFERENCE GOT
    python3 - "$1" "$2" <<'PY'
import json, sys
def steps(p):
    out = {}
    for line in open(p):
        d = json.loads(line)
        if 'loss' in d:
            if d['step'] in out:
                sys.exit('%s: step %d logged twice' % (p, d['step']))
            out[d['step']] = (d['loss'], d['lr'], d['grad_norm'])
    return out
ref, got = steps(sys.argv[1]), steps(sys.argv[2])
if ref != got:
    missing = sorted(set(ref) - set(got))
    extra = sorted(set(got) - set(ref))
    bad = [s for s in sorted(set(ref) & set(got)) if ref[s] != got[s]]
    sys.exit('not the straight run: %d step(s) missing %s, %d extra %s, %d differ %s' %
             (len(missing), missing[:5], len(extra), extra[:5], len(bad),
              ['%d: %s vs %s' % (s, ref[s], got[s]) for s in bad[:3]]))
PY
}

case_preempt_usr1_requeue_resume() {
    policy "trainer=$trainer" "topology_xml=$cpu_only" allow_cpu=yes bind=no
    local ref id stopped
    # the straight run every preempted run must equal
    ref=$(sbatch_cpu_sanity -o ref.out "$(preempt_set "$PWD/ref/ckpt" "$PWD/ref/run")")
    expect "the straight job completes" equals "$(wait_job "$ref" 180)" COMPLETED
    id=$(sbatch_cpu_sanity -o job.out --open-mode=append "$(preempt_set "$PWD/ckpt" "$PWD/run")")
    if wait_metrics run/metrics.jsonl 30; then
        scancel --signal=USR1 "$id"
    else
        case_failures+=("the job never logged 30 steps: $(tail -3 job.out)")
    fi
    # Slurm holds a requeued job for two minutes (BeginTime), and not for nothing: slurmd refuses
    # a credential issued in the second its requeue revoked the old one (cred->ctime <=
    # revoked, whole seconds), so a job started in that second fails ("Job credential revoked")
    # and never resumes. Once requeued and its node is free, let it start in a later second.
    local i seen
    for ((i = 0; i < 300; i++)); do
        [ "$(job_field "$id" Restarts)" = 1 ] && [ "$(job_field "$id" JobState)" = PENDING ] && break
        sleep 0.2
    done
    seen=$(date +%s)
    for ((i = 0; i < 300; i++)); do [ "$(node_state)" = idle ] && break; sleep 0.2; done
    while [ "$(date +%s)" -le "$seen" ]; do sleep 0.1; done
    scontrol update JobId="$id" StartTime=now
    expect "the requeued job completes" equals "$(wait_job "$id" 240)" COMPLETED
    expect "the job was requeued once (Restarts=$(job_field "$id" Restarts))" equals "$(job_field "$id" Restarts)" 1
    stopped=$(sed -nE 's/.*stopping at step ([0-9]+) of.*stop signal.*/\1/p' job.out | head -1)
    expect "moe-train stopped on the signal" test -n "$stopped"
    expect "the script requeued the job" contains job.out "requeueing job $id"
    expect "the second run resumed at step $stopped" grep -q "resuming from .*step_0*$stopped (step $stopped)" job.out
    expect "it finished all 400 steps" contains job.out "moe-train: done: 400 steps"
    expect "each step once, same loss/lr/grad_norm as the straight run: $(same_metrics ref/run/metrics.jsonl run/metrics.jsonl 2>&1)" \
        same_metrics ref/run/metrics.jsonl run/metrics.jsonl
    expect "final weights and moments bit-identical to the straight run" \
        sh -c 'for f in ref/ckpt/step_00000400/rank-*.safetensors; do cmp -s "$f" "ckpt/step_00000400/${f##*/}" || exit 1; done'
    done_case
}

case_preempt_without_requeue_keeps_checkpoint() {
    policy "trainer=$trainer" "topology_xml=$cpu_only" allow_cpu=yes bind=no
    local id stopped
    id=$(sbatch_cpu_sanity --no-requeue -o job.out "$(preempt_set "$PWD/ckpt" "$PWD/run")")
    if wait_metrics run/metrics.jsonl 30; then
        scancel --signal=USR1 "$id"
    else
        case_failures+=("the job never logged 30 steps: $(tail -3 job.out)")
    fi
    expect "the job ends FAILED (exit 75)" equals "$(wait_job "$id" 120)" FAILED
    expect "exit code 75 ($(job_field "$id" ExitCode))" equals "$(job_field "$id" ExitCode)" 75:0
    expect "not requeued" equals "$(job_field "$id" Restarts)" 0
    expect "the script says why it did not requeue" contains job.out "does not allow requeue"
    stopped=$(sed -nE 's/.*stopping at step ([0-9]+) of.*stop signal.*/\1/p' job.out | head -1)
    expect "a checkpoint at the step it stopped ($stopped)" test -f "ckpt/$(printf 'step_%08d' "${stopped:-0}")/MANIFEST"
    done_case
}

# L0_sanity with EP=2: two CPU ranks through the plugin and srun --mpi=pmix, experts split
# over the ranks, one checkpoint in the Hugging Face layout with all experts.
case_cpu_ep2_trains_through_plugin() {
    if [ ! -x "$trainer" ]; then
        case_failures+=("$trainer is not built: the EP=2 training case did not run")
        done_case; return
    fi
    policy "trainer=$trainer" "topology_xml=$cpu_only" allow_cpu=yes bind=no
    local id
    id=$(sbatch --parsable -n2 -c1 --gres=none --moe-config=L0_sanity --moe-ep=2 \
        "--moe-set=train.steps=10,scheduler.warmup_steps=2,train.eval_every_n_steps=0,train.eval_batches=2,checkpoint.ckpt_dir=$PWD/ckpt,logger.run_dir=$PWD/run" \
        -o job.out --wrap 'srun --mpi=pmix moe-train')
    expect "the EP=2 job completes" equals "$(wait_job "$id" 240)" COMPLETED
    expect "the trainer saw both ranks as one EP group" contains job.out "EP=2 x DP=1 over 2 ranks"
    expect "it trained 10 steps" contains job.out "moe-train: done: 10 steps"
    expect "rank 0 alone reported" equals "$(grep -c 'moe-train: done' job.out)" 1
    expect "a checkpoint was written" test -f ckpt/step_00000010/MANIFEST
    expect "rank 1 wrote its experts into its own file" \
        grep -qa "model.layers.1.block_sparse_moe.experts.3.w2.weight" ckpt/step_00000010/rank-00001-of-00002.safetensors
    done_case
}

# The shipped script on a MpiDefault=none cluster: EP=2 over two CPU tasks, the script starting the
# ranks with --mpi=pmix itself.
case_cpu_ep2_through_sanity_script() {
    if [ ! -x "$trainer" ]; then
        case_failures+=("$trainer is not built: the EP=2 script case did not run")
        done_case; return
    fi
    policy "trainer=$trainer" "topology_xml=$cpu_only" allow_cpu=yes bind=no
    expect "the test cluster has MpiDefault=none" \
        grep -q "MpiDefault *= *none" <(scontrol show config)
    local id
    id=$(sbatch --parsable -n2 --ntasks-per-node=2 -c1 --gres=none --moe-ep=2 \
        "--moe-set=train.steps=6,scheduler.warmup_steps=2,train.eval_every_n_steps=0,train.eval_batches=2,logger.run_dir=$PWD/run" \
        -o job.out "$sanity")
    expect "the EP=2 job completes" equals "$(wait_job "$id" 240)" COMPLETED
    expect "the trainer saw both ranks as one EP group" contains job.out "EP=2 x DP=1 over 2 ranks"
    expect "it trained 6 steps" contains job.out "moe-train: done: 6 steps"
    expect "no MPI abort" absent job.out "MPI_ABORT"
    expect "the script's checkpoint directory" test -f "checkpoints/moe-sanity-$id/step_00000006/MANIFEST"
    done_case
}

# ---------------------------------------------------------------- run

start=$SECONDS
if start_cluster b200; then
    say "cluster up (B200 node $node) in $cluster"
    run_case blackwell_mxfp8 case_blackwell_mxfp8
    run_case srun_direct_and_binding case_srun_direct_and_binding
    run_case user_cannot_pick_program_or_env case_user_cannot_pick_program_or_env
    run_case untouched_without_options case_untouched_without_options
    run_case moe_check case_moe_check
    run_case export_none case_export_none
    run_case dp_ep_mismatch_at_submit case_dp_ep_mismatch_at_submit
    run_case bad_option_values case_bad_option_values
    run_case user_config_paths case_user_config_paths
    run_case bad_policy_fails_loudly case_bad_policy_fails_loudly
    run_case bad_policy_live_edit case_bad_policy_live_edit
    run_case step_without_gpus case_step_without_gpus
    run_case odd_submit_dir_and_full_set case_odd_submit_dir_and_full_set
    run_case chain_runs_scale_after_sanity case_chain_runs_scale_after_sanity
    run_case chain_cancels_scale_after_failed_sanity case_chain_cancels_scale_after_failed_sanity
    run_case chain_help case_chain_help
    run_case salloc case_salloc
    run_case bad_exit_ends_step case_bad_exit_ends_step
    run_case memory_refused_by_the_trainers_plan case_memory_refused_by_the_trainers_plan
    run_case trainer_missing_refuses_the_step case_trainer_missing_refuses_the_step
    run_case trainer_that_hangs_is_killed case_trainer_that_hangs_is_killed
    run_case cpu_refused_without_allow_cpu case_cpu_refused_without_allow_cpu
    run_case cpu_trains_for_real case_cpu_trains_for_real
    run_case preempt_usr1_requeue_resume case_preempt_usr1_requeue_resume
    run_case preempt_without_requeue_keeps_checkpoint case_preempt_without_requeue_keeps_checkpoint
    run_case cpu_ep2_trains_through_plugin case_cpu_ep2_trains_through_plugin
    run_case cpu_ep2_through_sanity_script case_cpu_ep2_through_sanity_script
else
    say "could not start the B200 cluster"; failed=$((failed + 1))
fi
if start_cluster h200; then
    say "cluster up (H200 node $node)"
    run_case hopper_bf16_fallback case_hopper_bf16_fallback
    run_case hopper_rejected_node_stays_up case_hopper_rejected_node_stays_up
else
    say "could not start the H200 cluster"; failed=$((failed + 1))
fi
if start_cluster b200 2; then
    say "cluster up (two B200 nodes)"
    run_case scale_two_nodes case_scale_two_nodes
else
    say "could not start the two-node cluster"; failed=$((failed + 1))
fi
say "took $((SECONDS - start)) s"
summary
[ "$failed" -eq 0 ]

#!/bin/bash
# moekit: a real single-host Slurm cluster for development, tests and the quickstart.
#
#   scripts/slurm-local.sh start DIR [options]   create DIR, write the configs, start the daemons
#   scripts/slurm-local.sh stop DIR              cancel jobs, stop exactly the daemons started in DIR
#   scripts/slurm-local.sh status DIR            daemons alive?, node state
#   scripts/slurm-local.sh plugstack DIR [--plugin PATH] [ARG...]
#                                                rewrite plugstack.conf (new plugin arguments)
#   scripts/slurm-local.sh env DIR               print the export line for SLURM_CONF
#   scripts/slurm-local.sh install               install the Debian Slurm and munge packages if missing
#
# Everything lives under DIR: munge key, socket and seed, slurm.conf, gres.conf, plugstack.conf,
# state, spool, logs and pid files. The node poses as a GPU server (default 32 CPUs, 8 GPUs) with
# SlurmdParameters=config_overrides; its GPUs are character devices made with mknod under DIR/dev
# (Slurm rejects plain files), so jobs get CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS as on a real node.
# Daemons are started with explicit pid files and stopped by those pids only, never by name.
# Needs root (munged, slurmd and mknod) and the Debian packages slurmctld slurmd slurm-client munge.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: slurm-local.sh start DIR [options]
       slurm-local.sh stop|status|env DIR
       slurm-local.sh install
       slurm-local.sh plugstack DIR [--plugin PATH | --no-plugin] [PLUGIN_ARG...]

start options:
  --gpu-type TYPE     GPU type in gres.conf and the node's Gres (default b200; e.g. h200)
  --gpus N            fake GPUs per node (default 8)
  --cpus N            CPUs per node, as 2 sockets (default 32)
  --mem-mb N          RealMemory per node in MB (default 256000)
  --nodes N           nodes, one slurmd each (default 1, named after this host; more are
                      named HOST-1..HOST-N, which do not resolve: for scheduling tests)
  --port-base P       slurmctld listens on P, the slurmd's on P+1.. (default 6817)
  --plugin PATH       SPANK plugin for plugstack.conf (default build/lib/spank_moe.so)
  --no-plugin         write an empty plugstack.conf
  --plugin-arg ARG    one plugin argument for the plugstack line (repeat as needed)

Then: export SLURM_CONF=DIR/etc/slurm.conf and use sbatch, srun, squeue as usual.
EOF
}

die() { echo "slurm-local.sh: $*" >&2; exit 1; }

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---------------------------------------------------------------- config files

write_plugstack() { # DIR PLUGIN ARG...
    local dir=$1 plugin=$2; shift 2
    if [ -z "$plugin" ]; then
        : > "$dir/etc/plugstack.conf"
        return
    fi
    [ -f "$plugin" ] || die "plugin $plugin not found (build it with make, or pass --plugin / --no-plugin)"
    # "required": a plugin that fails to load fails the job instead of running it unchecked.
    printf 'required %s %s\n' "$plugin" "$*" > "$dir/etc/plugstack.conf"
}

write_configs() {
    local dir=$1 host
    host=$(hostname -s)
    local sockets=2 cores=$((cpus / 2))
    [ $((cpus % 2)) -eq 0 ] || { sockets=1; cores=$cpus; }
    local last_gpu=$((gpus - 1))

    local nodes_conf="" gres_conf="" names=()
    for ((i = 1; i <= nodes; i++)); do
        local name=$host
        [ "$nodes" -gt 1 ] && name="$host-$i"
        names+=("$name")
        local gres_line="" ; [ "$gpus" -gt 0 ] && gres_line="Gres=gpu:$gpu_type:$gpus"
        nodes_conf+="NodeName=$name NodeAddr=127.0.0.1 Port=$((port_base + i)) CPUs=$cpus Boards=1"
        nodes_conf+=" SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=1 RealMemory=$mem_mb"
        nodes_conf+=" $gres_line State=UNKNOWN"$'\n'
        [ "$gpus" -gt 0 ] &&
            gres_conf+="NodeName=$name Name=gpu Type=$gpu_type File=$dir/dev/nvidia[0-$last_gpu]"$'\n'
    done
    printf '%s\n' "${names[@]}" > "$dir/etc/nodes"

    cat > "$dir/etc/slurm.conf" <<EOF
# Written by moekit scripts/slurm-local.sh: a single-host development cluster.
ClusterName=moekit
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port_base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdDebug=info
SlurmctldDebug=info
PlugStackConfig=$dir/etc/plugstack.conf
# A 2-core machine poses as a GPU server.
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
# Without a default memory size every job takes the whole node and jobs run one at a time.
DefMemPerCPU=1000
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
# Keep finished jobs visible to scontrol for a while (there is no accounting database).
MinJobAge=600
$nodes_conf
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    printf '%s' "$gres_conf" > "$dir/etc/gres.conf"
}

make_fake_gpus() {
    local dir=$1
    mkdir -p "$dir/dev"
    for ((g = 0; g < gpus; g++)); do
        [ -c "$dir/dev/nvidia$g" ] || mknod "$dir/dev/nvidia$g" c 195 "$g"
    done
}

# ---------------------------------------------------------------- daemons

pid_alive() { # PIDFILE EXPECTED_COMM
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    [ -d "/proc/$pid" ] || return 1
    # A reused pid belongs to someone else: check the program name too.
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

wait_for() { # SECONDS COMMAND...
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.2
    done
}

start_munge() {
    local dir=$1
    if [ ! -s "$dir/munge/munge.key" ]; then
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0400 "$dir/munge/munge.key"
    munged --socket="$dir/munge/munge.socket.2" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" --force ||
        die "munged failed to start; see $dir/log/munged.log"
    wait_for 10 test -S "$dir/munge/munge.socket.2" || die "munged socket did not appear"
}

start_slurm() {
    local dir=$1
    slurmctld -f "$dir/etc/slurm.conf" -i ||
        die "slurmctld failed to start; see $dir/log/slurmctld.log"
    wait_for 15 pid_alive "$dir/run/slurmctld.pid" slurmctld ||
        die "slurmctld did not stay up; see $dir/log/slurmctld.log"
    local name
    while read -r name; do
        mkdir -p "$dir/spool/$name"
        slurmd -f "$dir/etc/slurm.conf" -N "$name" ||
            die "slurmd $name failed to start; see $dir/log/slurmd-$name.log"
    done < "$dir/etc/nodes"
}

nodes_idle() {
    local dir=$1 name state
    while read -r name; do
        state=$(SLURM_CONF=$dir/etc/slurm.conf sinfo -h -n "$name" -o %t 2>/dev/null) || return 1
        [ "$state" = idle ] || return 1
    done < "$dir/etc/nodes"
}

stop_pidfile() { # PIDFILE COMM
    local pidfile=$1 comm=$2 pid
    pid_alive "$pidfile" "$comm" || { rm -f "$pidfile"; return 0; }
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_for 10 eval "! kill -0 $pid 2>/dev/null"; then
        echo "slurm-local.sh: $comm (pid $pid) ignored SIGTERM, sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

# ---------------------------------------------------------------- commands

# The Debian packages: daemons, clients, and spank.h for building the plugin.
slurm_packages=(slurmctld slurmd slurm-client munge libslurm-dev)

cmd_install() {
    local missing=() p
    for p in "${slurm_packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die "install: run as root to install ${missing[*]}"
    command -v apt-get >/dev/null || die "install: no apt-get; install ${missing[*]} by hand"
    echo "slurm-local: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || die "install: apt-get update failed"
    # Debian starts the daemons from their packages on systemd machines only;
    # this script runs its own under DIR either way.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
        die "install: apt-get install ${missing[*]} failed"
}

cmd_start() {
    local dir=$1; shift
    gpu_type=b200 gpus=8 cpus=32 mem_mb=256000 nodes=1 port_base=6817
    local plugin="$repo_root/build/lib/spank_moe.so" plugin_args=()
    while [ $# -gt 0 ]; do
        case $1 in
            --gpu-type) gpu_type=${2:?--gpu-type needs a value}; shift 2 ;;
            --gpus) gpus=${2:?--gpus needs a value}; shift 2 ;;
            --cpus) cpus=${2:?--cpus needs a value}; shift 2 ;;
            --mem-mb) mem_mb=${2:?--mem-mb needs a value}; shift 2 ;;
            --nodes) nodes=${2:?--nodes needs a value}; shift 2 ;;
            --port-base) port_base=${2:?--port-base needs a value}; shift 2 ;;
            --plugin) plugin=${2:?--plugin needs a value}; shift 2 ;;
            --no-plugin) plugin=""; shift ;;
            --plugin-arg) plugin_args+=("${2?--plugin-arg needs a value}"); shift 2 ;;
            -h|--help) usage; exit 0 ;;
            *) die "start: unknown option '$1' (see --help)" ;;
        esac
    done
    local n
    for n in "$gpus" "$cpus" "$mem_mb" "$nodes" "$port_base"; do
        [[ $n =~ ^[0-9]+$ ]] || die "start: '$n' is not a number"
    done
    [ "$nodes" -ge 1 ] && [ "$cpus" -ge 1 ] || die "start: --nodes and --cpus must be at least 1"
    [[ $gpu_type =~ ^[A-Za-z0-9_]+$ ]] || die "start: --gpu-type '$gpu_type' must be a plain word"
    [ "$(id -u)" -eq 0 ] || die "start: run as root (munged, slurmd and mknod need it)"
    cmd_install
    for prog in munged slurmctld slurmd sinfo; do
        command -v "$prog" >/dev/null || die "start: $prog not found (apt-get install ${slurm_packages[*]})"
    done
    if [ -e "$dir/run/slurmctld.pid" ] && pid_alive "$dir/run/slurmctld.pid" slurmctld; then
        die "start: a cluster already runs in $dir (stop it first)"
    fi

    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    mkdir -p "$dir"/{etc,munge,run,log,state,spool}
    # munged refuses group/other-writable directories, and clients need o+x down to the socket.
    chmod 0755 "$dir" "$dir/munge" "$dir/run" "$dir/log"
    write_configs "$dir"
    write_plugstack "$dir" "$plugin" "${plugin_args[@]}"
    make_fake_gpus "$dir"

    start_munge "$dir"
    start_slurm "$dir"
    # generous: slurmd registers in 1-3 s, but on a loaded machine (CI beside other
    # builds) it has taken more than 30
    wait_for 120 nodes_idle "$dir" || {
        SLURM_CONF=$dir/etc/slurm.conf sinfo -N -l >&2 || true
        die "nodes did not become idle; see $dir/log/"
    }
    echo "slurm-local: cluster up in $dir ($nodes node(s), $cpus CPUs, $gpus x $gpu_type each)"
    echo "export SLURM_CONF=$dir/etc/slurm.conf"
}

cmd_stop() {
    local dir=$1
    [ -d "$dir" ] || die "stop: $dir does not exist"
    export SLURM_CONF=$dir/etc/slurm.conf
    # Cancel jobs first so their slurmstepd processes end before slurmd does.
    if pid_alive "$dir/run/slurmctld.pid" slurmctld; then
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            wait_for 15 eval '[ -z "$(squeue -h -o %i 2>/dev/null)" ]' || true
        fi
    fi
    local f
    for f in "$dir"/run/slurmd-*.pid; do
        [ -e "$f" ] && stop_pidfile "$f" slurmd
    done
    stop_pidfile "$dir/run/slurmctld.pid" slurmctld
    stop_pidfile "$dir/run/munged.pid" munged
    echo "slurm-local: stopped the cluster in $dir"
}

cmd_status() {
    local dir=$1 rc=0 f
    for f in "$dir/run/munged.pid:munged" "$dir/run/slurmctld.pid:slurmctld"; do
        if pid_alive "${f%%:*}" "${f##*:}"; then
            echo "${f##*:}: running (pid $(cat "${f%%:*}"))"
        else
            echo "${f##*:}: not running"; rc=1
        fi
    done
    for f in "$dir"/run/slurmd-*.pid; do
        [ -e "$f" ] || continue
        if pid_alive "$f" slurmd; then echo "slurmd: running (pid $(cat "$f"))"
        else echo "slurmd: not running ($f)"; rc=1; fi
    done
    SLURM_CONF=$dir/etc/slurm.conf sinfo -N -o '%N %t %c %G' 2>/dev/null || rc=1
    return $rc
}

cmd_plugstack() {
    local dir=$1; shift
    [ -f "$dir/etc/slurm.conf" ] || die "plugstack: no cluster configured in $dir"
    local plugin
    plugin=$(awk '{print $2}' "$dir/etc/plugstack.conf" 2>/dev/null)
    [ -n "$plugin" ] || plugin="$repo_root/build/lib/spank_moe.so"
    case ${1:-} in
        --plugin) plugin=${2:?--plugin needs a path}; shift 2 ;;
        --no-plugin) plugin=""; shift ;;
    esac
    write_plugstack "$dir" "$plugin" "$@"
    # sbatch/srun and every new slurmstepd read plugstack.conf afresh: no restart needed.
    cat "$dir/etc/plugstack.conf"
}

[ $# -ge 1 ] || { usage >&2; exit 2; }
case $1 in
    -h|--help) usage; exit 0 ;;
    install) cmd_install; exit 0 ;;
esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
cmd=$1 dir=$2; shift 2
case $cmd in
    start) cmd_start "$dir" "$@" ;;
    stop) cmd_stop "$dir" ;;
    status) cmd_status "$dir" ;;
    plugstack) cmd_plugstack "$dir" "$@" ;;
    env) echo "export SLURM_CONF=$(cd "$dir" && pwd)/etc/slurm.conf" ;;
    *) usage >&2; exit 2 ;;
esac

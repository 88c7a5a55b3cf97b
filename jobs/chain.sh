#!/bin/bash
# moekit: the sanity-then-scale chain.
#
# Submits jobs/sanity.sbatch, then jobs/scale.sbatch to start only if the sanity job succeeds
# (--dependency=afterok); if the sanity job fails, Slurm cancels the scale job instead of leaving
# it pending forever (--kill-on-invalid-dep=yes). Both write under the same checkpoint and run
# directories, one subdirectory per stage. Prints both job ids.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
    cat <<'EOF'
Usage: jobs/chain.sh [options]

Submit the L0 sanity job, then the L1 scale job after it succeeds.

  -p, --partition NAME    partition for both jobs
  -A, --account NAME      account for both jobs
  -N, --nodes N           nodes for the scale job (default: --card's, else 1; the sanity job
                          uses one)
      --card h100|h200|b200
                          the scale job's GPUs, 8 a node: the smallest layout moe-train --plan
                          says fits L1_8x7B_ep there (NOTES.md, "The memory plan on real
                          cards"): h100 2 nodes (EP=8 x DP=2), h200 1 node, b200 1 node
                          without activation recompute (faster; 174 of 179 GiB with the
                          FP8 weight copies kept for a step)
  -t, --time LIMIT        time limit of the scale job (default: the script's, 24:00:00)
      --sanity-time LIMIT time limit of the sanity job (default: the script's, 00:30:00)
      --ckpt-dir DIR      checkpoint root; the jobs use DIR/sanity and DIR/scale
                          (default ./checkpoints/chain-DATE)
      --run-dir DIR       run root for metrics and loss plots; DIR/sanity and DIR/scale
                          (default ./runs/chain-DATE)
      --set KEY=VALUE     config override for both jobs (repeatable)
      --sanity-set KEY=VALUE, --scale-set KEY=VALUE
                          config override for one job (repeatable)
      --sanity-opt OPT, --scale-opt OPT
                          one more sbatch option for one job (repeatable), e.g.
                          --scale-opt=--moe-check  or  --sanity-opt=--moe-config=L0_sanity
      --sanity-script FILE, --scale-script FILE
                          the batch scripts (default: jobs/sanity.sbatch, jobs/scale.sbatch)
  -h, --help              this text

Prints "sanity job ID" and "scale job ID", one per line.
EOF
}

die() { echo "chain.sh: $*" >&2; exit 2; }

stamp=$(date +%Y%m%d-%H%M%S)
ckpt_root="$PWD/checkpoints/chain-$stamp"
run_root="$PWD/runs/chain-$stamp"
sanity_script="$here/sanity.sbatch"
scale_script="$here/scale.sbatch"
common=() sanity_opts=() scale_opts=() sets=() sanity_sets=() scale_sets=()
nodes="" card_nodes="" card_sets=()

# Options as "--opt VALUE" or "--opt=VALUE".
while [ $# -gt 0 ]; do
    opt=$1 val=""
    case $opt in
        -h|--help) usage; exit 0 ;;
        --*=*) val=${opt#*=}; opt=${opt%%=*}; shift ;;
        -p|--partition|-A|--account|-N|--nodes|--card|-t|--time|--sanity-time|--ckpt-dir|--run-dir|\
        --set|--sanity-set|--scale-set|--sanity-opt|--scale-opt|--sanity-script|--scale-script)
            [ $# -ge 2 ] || die "$opt needs a value (see --help)"; val=$2; shift 2 ;;
        -*) die "unknown option '$opt' (see --help)" ;;
        *) die "unexpected argument '$opt' (see --help)" ;;
    esac
    case $opt in
        -p|--partition) common+=("--partition=$val") ;;
        -A|--account) common+=("--account=$val") ;;
        -N|--nodes)
            [[ $val =~ ^[1-9][0-9]*$ ]] || die "--nodes=$val: give a whole number of nodes"
            nodes=$val ;;
        --card)
            case $val in
                h100) card_nodes=2 ;;
                h200) card_nodes=1 ;;
                b200) card_nodes=1 card_sets=("train.activation_recompute=false") ;;
                *) die "--card=$val: one of h100, h200, b200" ;;
            esac ;;
        -t|--time) scale_opts+=("--time=$val") ;;
        --sanity-time) sanity_opts+=("--time=$val") ;;
        --ckpt-dir) ckpt_root=$val ;;
        --run-dir) run_root=$val ;;
        --set) sets+=("$val") ;;
        --sanity-set) sanity_sets+=("$val") ;;
        --scale-set) scale_sets+=("$val") ;;
        --sanity-opt) sanity_opts+=("$val") ;;
        --scale-opt) scale_opts+=("$val") ;;
        --sanity-script) sanity_script=$val ;;
        --scale-script) scale_script=$val ;;
        *) die "unknown option '$opt' (see --help)" ;;
    esac
done

# --nodes wins over --card's node count; --card's overrides come before --scale-set's
nodes=${nodes:-$card_nodes}
[ -z "$nodes" ] || scale_opts+=("--nodes=$nodes")
scale_sets=("${card_sets[@]}" "${scale_sets[@]}")

for f in "$sanity_script" "$scale_script"; do
    [ -r "$f" ] || die "cannot read batch script $f"
done
for dir in "$ckpt_root" "$run_root"; do
    case $dir in
        *,*) die "'$dir': directories for the chain cannot contain ','" ;;
    esac
done
mkdir -p "$ckpt_root" "$run_root"
ckpt_root=$(cd "$ckpt_root" && pwd)
run_root=$(cd "$run_root" && pwd)

# One --moe-set per job: the stage's directories, then the shared and the stage's overrides.
moe_set() { # STAGE ITEM...
    local stage=$1; shift
    local IFS=,
    echo "--moe-set=checkpoint.ckpt_dir=$ckpt_root/$stage,logger.run_dir=$run_root/$stage${*:+,$*}"
}

sanity_id=$(sbatch --parsable "${common[@]}" "${sanity_opts[@]}" \
    "$(moe_set sanity "${sets[@]}" "${sanity_sets[@]}")" "$sanity_script") ||
    die "the sanity job was not submitted (see sbatch's message above)"
sanity_id=${sanity_id%%;*}
echo "sanity job $sanity_id"

scale_id=$(sbatch --parsable "${common[@]}" "${scale_opts[@]}" \
    --dependency="afterok:$sanity_id" --kill-on-invalid-dep=yes \
    "$(moe_set scale "${sets[@]}" "${scale_sets[@]}")" "$scale_script") || {
    echo "chain.sh: the scale job was not submitted (see sbatch's message above);" \
        "cancelling sanity job $sanity_id" >&2
    scancel "$sanity_id" || true
    exit 1
}
scale_id=${scale_id%%;*}
echo "scale job $scale_id"

#!/bin/bash
# Useful tokens/s on a corpus of short records, packed against padded windows.
#
#   bench/data/packed_vs_padded.sh WORKDIR [COUNT] [key=value ...]
#
# Makes WORKDIR/contigs.fa.gz (COUNT contigs, default 4000, log-normal lengths with median
# 2.2 kb and mean about 4 kb, pieces of the shipped E. coli 536 genome: build/tests/contigs)
# and the store WORKDIR/store (moe-data prepare; both kept for the next run), then trains the
# same steps twice from the store, data.pack=padded and data.pack=packed, and prints for each:
# steps, window positions, counted targets (the tokens the loss learns from), the share of
# positions that are targets, seconds over the steps after the first, and useful tokens/s
# (counted targets per second), and the loss at the first and the last step (a speed whose loss
# does not fall is no speed). Every key=value goes to both runs; the defaults are
#   --config L0_sanity train.seq_length=2048 train.micro_batch_size=1 train.steps=12
# (later keys win), and on a GPU, e.g. (data.pack=packed runs cuda's packed attention):
#   bench/data/packed_vs_padded.sh /scratch/pvp 20000 --config bench_8x7B_2L_genomic \
#       --backend cuda train.seq_length=8192 train.steps=20
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${1:?usage: packed_vs_padded.sh WORKDIR [COUNT] [key=value ...]}; shift
COUNT=4000
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then COUNT=$1; shift; fi
CONFIG=(--config L0_sanity)
ARGS=()
while [ $# -gt 0 ]; do
    case $1 in
        --config) CONFIG=(--config "$2"); shift 2 ;;
        --backend) ARGS+=(--backend "$2"); shift 2 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
mkdir -p "$W"
[ -f "$W/contigs.fa.gz" ] ||
    "$ROOT/build/tests/contigs" "$W/contigs.fa.gz" "$COUNT" --from "$ROOT/data/ecoli_536.fna.gz" \
        --max 200000 || exit 1
"$ROOT/build/bin/moe-data" prepare --quiet --out "$W/store" "$W/contigs.fa.gz" || exit 1
printf '%-7s %6s %12s %12s %7s %9s %14s %8s %8s\n' windows steps positions targets share seconds \
    useful_tok/s loss_1 loss_end
for pack in padded packed; do
    run=$W/run-$pack
    rm -rf "$run"
    if ! "$ROOT/build/bin/moe-train" "${CONFIG[@]}" --quiet data.store="$W/store" data.pack=$pack \
        train.seq_length=2048 train.micro_batch_size=1 train.steps=12 scheduler.warmup_steps=1 \
        train.eval_every_n_steps=0 checkpoint.ckpt_dir= checkpoint.save_every_n_steps=0 \
        logger.run_dir="$run" "${ARGS[@]}" >"$run.log" 2>&1; then
        printf '%-7s failed: %s\n' $pack "$(grep -m1 'moe-train' "$run.log")"
        continue
    fi
    # the steps after the first (start-up and warm-up out): targets and seconds between them
    python3 - "$run/metrics.jsonl" "$run/config.cfg" $pack <<'EOF'
import json, re, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l and '"val_loss"' not in l]
cfg = open(sys.argv[2]).read()
T = int(re.search(r'seq_length\s*=\s*(\d+)', cfg).group(1))
B = int(re.search(r'micro_batch_size\s*=\s*(\d+)', cfg).group(1))
A = int(re.search(r'grad_accum_steps\s*=\s*(\d+)', cfg).group(1))
first, last = steps[0], steps[-1]
n = len(steps) - 1
targets = last["tokens"] - first["tokens"]
secs = last["elapsed_s"] - first["elapsed_s"]
positions = n * B * A * T
print(f'{sys.argv[3]:<7} {n:6d} {positions:12d} {targets:12d} {targets / positions:7.3f} '
      f'{secs:9.2f} {targets / secs:14.1f} {first["loss"]:8.4f} {last["loss"]:8.4f}')
EOF
done

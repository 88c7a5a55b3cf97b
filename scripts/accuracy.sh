#!/bin/bash
# The precision study: one config trained in several precisions from the same seed and data;
# the held-out loss curves go into one PNG and the final gaps (in percent of the first
# precision's loss) into summary.txt.
#   scripts/accuracy.sh CONFIG OUT_DIR [PRECISION...]   train, then plot (default: bf16 fp8_block)
#   scripts/accuracy.sh --plot OUT_DIR [PRECISION...]   plot runs already in OUT_DIR
# PRECISION is a precision.compute value on the cuda backend, or "cpu" (the fp32 reference);
# NAME+all runs NAME with the attention projections in it too (precision.layers=all).
# Extra settings for every run: MOE_ACCURACY_SET="key=value ...". Needs python3; gnuplot for
# the PNG (skipped with a note when it is missing). BUILD_DIR defaults to build.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/${BUILD_DIR:-build}/bin/moe-train
plot_only=0
if [ "${1:-}" = --plot ]; then plot_only=1; shift; CONFIG=; else CONFIG=${1:?usage: scripts/accuracy.sh CONFIG OUT_DIR [PRECISION...]}; shift; fi
OUT=${1:?usage: scripts/accuracy.sh CONFIG OUT_DIR [PRECISION...]}; shift
PRECS=${*:-bf16 fp8_block}
mkdir -p "$OUT"

if [ $plot_only -eq 0 ]; then
    for p in $PRECS; do
        if [ "$p" = cpu ]; then args=(--backend cpu)
        elif [ "${p%+all}" != "$p" ]; then args=(--backend cuda "precision.compute=${p%+all}" precision.layers=all)
        else args=(--backend cuda "precision.compute=$p"); fi
        rm -rf "${OUT:?}/$p"
        echo "== $CONFIG in $p"
        # shellcheck disable=SC2086
        "$BIN" --config "$CONFIG" "${args[@]}" logger.run_dir="$OUT/$p" ${MOE_ACCURACY_SET:-} \
            2>&1 | tee "$OUT/$p.log" | grep -E "backend|^eval|done" || { echo "run $p failed: see $OUT/$p.log"; exit 1; }
    done
fi

# held-out losses per run -> OUT/<p>.dat, the table -> summary.txt
python3 - "$OUT" $PRECS <<'PY'
import json, sys, os
out, precs = sys.argv[1], sys.argv[2:]
final = {}
for p in precs:
    path = os.path.join(out, p, "metrics.jsonl")
    pts = []
    if os.path.exists(path):
        for line in open(path):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "val_loss" in r:
                pts.append((r["step"], r["val_loss"]))
    else:  # a run kept as its .dat alone (step, held-out loss per line)
        path = os.path.join(out, p + ".dat")
        pts = [(int(a), float(b)) for a, b in (l.split() for l in open(path) if l.strip())]
    if not pts:
        sys.exit(f"{path}: no held-out losses")
    with open(os.path.join(out, p + ".dat"), "w") as f:
        for s, v in pts:
            f.write(f"{s} {v}\n")
    final[p] = pts[-1]
ref = precs[0]
with open(os.path.join(out, "summary.txt"), "w") as f:
    for p in precs:
        step, v = final[p]
        gap = 100 * (v - final[ref][1]) / final[ref][1]
        line = f"{p:<12} final held-out loss {v:.4f} at step {step}  ({gap:+.2f}% vs {ref})"
        print(line)
        f.write(line + "\n")
PY

if command -v gnuplot >/dev/null; then
    title=${MOE_ACCURACY_TITLE:-$(basename "$OUT")}
    plots=""
    for p in $PRECS; do plots="$plots${plots:+, }'$OUT/$p.dat' using 1:2 with linespoints lw 2 pt 7 title '$p'"; done
    gnuplot <<GP
set terminal pngcairo size 900,540 noenhanced
set output '$OUT/accuracy.png'
set title 'held-out loss by precision: $title'
set xlabel 'step'
set ylabel 'cross-entropy (nats/token)'
set grid
set key top right
plot $plots
GP
    echo "plot: $OUT/accuracy.png"
else
    echo "no gnuplot here: plot later with scripts/accuracy.sh --plot $OUT $PRECS"
fi

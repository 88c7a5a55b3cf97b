#!/bin/bash
# A trained model as transformers users get it: train a small model, then
# final_model and a sharded `moe-train export` each load with
# MixtralForCausalLM.from_pretrained and AutoTokenizer.from_pretrained, the
# tokenizer encodes DNA to moekit's ids, and transformers' loss on those ids
# equals `moe-train eval`'s. Needs python3 with torch and transformers.
#   tests/hf/export_check.sh [BUILD_DIR]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
BIN=$B/bin/moe-train
T=$(mktemp -d /tmp/moekit-hf-export-XXXXXX)
trap 'rm -rf "$T"' EXIT
passed=0 failed=0
"$BIN" --config L0_sanity --backend cpu --quiet train.steps=40 checkpoint.ckpt_dir="$T/ck" \
    logger.frequency=1000 >"$T/train.out" 2>&1 || { tail -5 "$T/train.out"; exit 1; }
"$BIN" export --checkpoint "$T/ck" --out "$T/export" --max-shard-size 100KB >"$T/export.out" 2>&1 ||
    { cat "$T/export.out"; exit 1; }
DNA=ACGTTGCAAGGCTTACGATCGATCGGATCCTAGNNACGTacgtGGCCAATT,TTGACCGTAGGCATCGATTACGGCATTCGAAGTCCGGTAACGTGATCAGCT
for dir in final_model export; do
    m=$T/$dir; [ "$dir" = final_model ] && m=$T/ck/final_model
    if python3 "$ROOT/tests/hf/check_moekit_checkpoint.py" "$m" --dna "$DNA" --out-tokens "$T/$dir.tok" \
           >"$T/$dir.hf.json" 2>"$T/$dir.err" &&
       "$BIN" eval --checkpoint "$m" --tokens "$T/$dir.tok" --backend cpu >"$T/$dir.moe.json" 2>>"$T/$dir.err" &&
       why=$(python3 - "$T/$dir.hf.json" "$T/$dir.moe.json" <<'PY'
import json, sys
hf, moe = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("lm_loss", "aux_loss"):
    if abs(hf[k] - moe[k]) > 1e-5 * max(1.0, abs(hf[k])):
        sys.exit("%s: transformers %.9f, moe-train eval %.9f" % (k, hf[k], moe[k]))
print("lm_loss %.9f (transformers) %.9f (moe-train eval)" % (hf["lm_loss"], moe["lm_loss"]))
PY
); then
        passed=$((passed + 1)); echo "ok $dir: $why"
    else
        failed=$((failed + 1)); echo "not ok $dir"; cat "$T/$dir.err" "$T/$dir.hf.json" "$T/$dir.moe.json" 2>/dev/null | tail -8
    fi
done
ls "$T/export" | tr '\n' ' '; echo
echo "hf export: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

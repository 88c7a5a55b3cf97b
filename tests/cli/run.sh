#!/bin/bash
# moe-train from the command line, the way users meet it: bad configs,
# overrides, FASTA files and checkpoints each give a clear error and a
# non-zero exit, never a crash and never a partial checkpoint; eval prints
# JSON; a checkpoint loads back. Usage: tests/cli/run.sh [BUILD_DIR]
set -u
B=${1:-build}
BIN=$(cd "$(dirname "$0")/../.." && pwd)/$B/bin/moe-train
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /tmp/moekit-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
passed=0 failed=0
# a tiny model so every case runs in well under a second
TINY=(model.hidden_size=16 model.num_layers=1 model.num_heads=2 model.num_kv_heads=1
      model.head_dim=8 model.num_experts=2 model.top_k=1 model.intermediate_size=16
      train.seq_length=32 train.micro_batch_size=2 train.steps=3 scheduler.warmup_steps=1
      train.eval_batches=1 --quiet)

ok() { passed=$((passed + 1)); echo "ok $1"; }
bad() { failed=$((failed + 1)); echo "not ok $1"; shift; printf '  %s\n' "$@"; }

# expect_fail NAME PATTERN CMD...: non-zero exit (not a signal) and PATTERN in stderr
expect_fail() {
    local name=$1 pat=$2; shift 2
    "$@" >"$T/out" 2>"$T/err"; local rc=$?
    if [ $rc -eq 0 ]; then bad "$name" "exit 0, expected failure"; return; fi
    if [ $rc -ge 128 ]; then bad "$name" "died with signal $((rc - 128))" "$(cat "$T/err")"; return; fi
    if ! grep -qE -- "$pat" "$T/err"; then bad "$name" "stderr lacks /$pat/:" "$(cat "$T/err")"; return; fi
    ok "$name"
}

# ---- configs and overrides
printf 'base = "%s/configs/defaults.cfg";\nmodel = { hidden_size = 64 \n' "$ROOT" > "$T/syntax.cfg"
expect_fail config_syntax "syntax.cfg:[0-9]+" "$BIN" --config "$T/syntax.cfg"
printf 'base = "%s/configs/defaults.cfg";\nmodel = { hiden_size = 64; };\n' "$ROOT" > "$T/unknown.cfg"
expect_fail config_unknown_key "unknown.cfg:2.*hiden_size.*did you mean.*hidden_size" "$BIN" --config "$T/unknown.cfg"
printf 'base = "%s/configs/defaults.cfg";\ntrain = { steps = "many"; };\n' "$ROOT" > "$T/type.cfg"
expect_fail config_wrong_type "type.cfg:2.*train.steps" "$BIN" --config "$T/type.cfg"
expect_fail override_unknown_key "trian.steps" "$BIN" --config L0_sanity trian.steps=5
expect_fail override_wrong_type "train.steps" "$BIN" --config L0_sanity train.steps=five
expect_fail override_out_of_range "model.top_k" "$BIN" --config L0_sanity model.top_k=9
expect_fail config_name_unknown "L9_nothing" "$BIN" --config L9_nothing
expect_fail cli_unknown_option "--frobnicate" "$BIN" --frobnicate
expect_fail cpu_refuses_bf16 "precision.compute=bf16.*cuda" "$BIN" --config L0_sanity --backend cpu precision.compute=bf16 "${TINY[@]}"

# the same seed gives the same bits on any thread count
for th in 1 2; do
    "$BIN" --config L0_sanity --threads $th checkpoint.ckpt_dir="$T/th$th" "${TINY[@]}" >/dev/null 2>&1
done
RANK0=rank-00000-of-00001.safetensors  # a one-rank run's state: masters and moments
if cmp -s "$T/th1/step_00000003/$RANK0" "$T/th2/step_00000003/$RANK0"; then
    ok deterministic_across_thread_counts
else
    bad deterministic_across_thread_counts "weights differ between --threads 1 and 2"
fi

# initialising from a Hugging Face checkpoint: the transformers fixture's weights
FIX="$ROOT/tests/fixtures/hf/genomic_top2of8"
FIXCFG=(model.hidden_size=48 model.num_layers=3 model.num_heads=6 model.num_kv_heads=2
        model.head_dim=8 model.num_experts=8 model.top_k=2 model.intermediate_size=40
        model.rms_norm_eps=1e-6 train.seq_length=32 train.micro_batch_size=2 train.steps=2
        scheduler.warmup_steps=1 train.eval_batches=1)
if "$BIN" --config L0_sanity checkpoint.init_from="$FIX" "${FIXCFG[@]}" >"$T/out" 2>"$T/err" &&
   grep -q "initialised the weights from" "$T/out"; then
    ok init_from_hf_checkpoint
else
    bad init_from_hf_checkpoint "$(cat "$T/out" "$T/err" | tail -5)"
fi

# ---- FASTA
expect_fail fasta_missing "nothere.fa" "$BIN" --config L0_sanity data.files="$T/nothere.fa" "${TINY[@]}"
: > "$T/empty.fa"
expect_fail fasta_empty "empty.fa" "$BIN" --config L0_sanity data.files="$T/empty.fa" "${TINY[@]}"
head -c 2000 "$BIN" > "$T/binary.fa"
expect_fail fasta_binary "binary.fa" "$BIN" --config L0_sanity data.files="$T/binary.fa" "${TINY[@]}"
printf '>seq1\nACGTACGTXXACGT\n' > "$T/letters.fa"
expect_fail fasta_bad_letters "letters.fa:2" "$BIN" --config L0_sanity data.files="$T/letters.fa" "${TINY[@]}"

# ---- a real checkpoint, then broken copies of it
CK="$T/ckpt"
if "$BIN" --config L0_sanity checkpoint.ckpt_dir="$CK" "${TINY[@]}" >"$T/out" 2>"$T/err" &&
   [ -f "$CK/step_00000003/$RANK0" ] && [ -f "$CK/step_00000003/checkpoint.index.json" ] &&
   [ -f "$CK/final_model/config.json" ] && [ -f "$CK/final_model/tokenizer.json" ] &&
   (cd "$CK/step_00000003" && sha256sum --quiet --strict -c MANIFEST); then
    ok checkpoint_written
else
    bad checkpoint_written "$(cat "$T/err")"
fi
printf '%s\n' "2 5 7 9 3 6 2 8 9 4" "2 6 6 7 8 9 4 5 6 7" > "$T/tokens.txt"
if "$BIN" eval --checkpoint "$CK/final_model" --tokens "$T/tokens.txt" >"$T/out" 2>"$T/err" &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["lm_loss"]>0 and d["aux_loss"]>0' "$T/out"; then
    ok eval_json
else
    bad eval_json "$(cat "$T/out" "$T/err")"
fi
printf '2 5 7\n2 5\n' > "$T/ragged.txt"
expect_fail eval_ragged_lines "ragged.txt:2" "$BIN" eval --checkpoint "$CK/final_model" --tokens "$T/ragged.txt"
printf '2 5 700\n' > "$T/oov.txt"
expect_fail eval_token_out_of_vocab "oov.txt:1.*700" "$BIN" eval --checkpoint "$CK/final_model" --tokens "$T/oov.txt"

# resume refuses a corrupted checkpoint and names the file
cp -r "$CK" "$T/ck_flip"
python3 - "$T/ck_flip/step_00000003/$RANK0" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-5] ^= 0x40; open(p, 'wb').write(b)
PY
rm -rf "$T/ck_flip/final_model"
expect_fail resume_corrupted_checkpoint "$RANK0.*(do not|does not) match" "$BIN" --config L0_sanity checkpoint.ckpt_dir="$T/ck_flip" checkpoint.resume_from_checkpoint=true "${TINY[@]}" train.steps=4

# the export: sharded past --max-shard-size, an index, the tokenizer; the
# same losses as final_model (both bf16)
if "$BIN" export --checkpoint "$CK" --out "$T/exp" --max-shard-size 20KB >"$T/out" 2>"$T/err" &&
   [ -f "$T/exp/model-00001-of-00002.safetensors" ] && [ -f "$T/exp/model.safetensors.index.json" ] &&
   [ -f "$T/exp/tokenizer.json" ] && [ -f "$T/exp/README.md" ] &&
   "$BIN" eval --checkpoint "$T/exp" --tokens "$T/tokens.txt" >"$T/exp.json" 2>>"$T/err" &&
   "$BIN" eval --checkpoint "$CK/final_model" --tokens "$T/tokens.txt" >"$T/final.json" 2>>"$T/err" &&
   cmp -s "$T/exp.json" "$T/final.json"; then
    ok export_sharded_equals_final_model
else
    bad export_sharded_equals_final_model "$(cat "$T/out" "$T/err" "$T/exp.json" "$T/final.json" 2>/dev/null)"
fi
expect_fail export_refuses_existing_out "exists" "$BIN" export --checkpoint "$CK" --out "$T/exp"

# eval checks config.json against the weights before sizing anything by it
cp -r "$CK/final_model" "$T/liar"
python3 - "$T/liar/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["vocab_size"] = 30000000; json.dump(c, open(p, "w"))
PY
expect_fail eval_config_disagrees_with_weights "embed_tokens.weight is \\[256,16\\] but its config.json implies \\[30000000,16\\]" \
    "$BIN" eval --checkpoint "$T/liar" --tokens "$T/tokens.txt"

# ---- the checkpoint directory: one run at a time, no silent reuse
expect_fail reuse_without_resume_refused "already holds 1 checkpoint.*resume_from_checkpoint=true.*overwrite=true" \
    "$BIN" --config L0_sanity checkpoint.ckpt_dir="$CK" "${TINY[@]}"
cp -r "$CK" "$T/ck_over"
if "$BIN" --config L0_sanity checkpoint.ckpt_dir="$T/ck_over" checkpoint.overwrite=true "${TINY[@]}" train.steps=2 \
       >"$T/out" 2>"$T/err" && [ -d "$T/ck_over/step_00000002" ] && [ ! -d "$T/ck_over/step_00000003" ]; then
    ok overwrite_replaces_checkpoints
else
    bad overwrite_replaces_checkpoints "$(cat "$T/err")"
fi
# a second run on a directory in use is refused naming the first; once the
# first is dead (SIGKILL: no cleanup), the directory is usable again
"$BIN" --config L0_sanity checkpoint.ckpt_dir="$T/ck_busy" "${TINY[@]}" train.steps=1000000 \
    logger.run_dir="$T/busy" >/dev/null 2>&1 &
busy=$!
for _ in $(seq 200); do [ -s "$T/busy/metrics.jsonl" ] && break; sleep 0.05; done
expect_fail second_writer_refused "ck_busy/moekit.lock is held by another run \\(host=.* pid=$busy " \
    "$BIN" --config L0_sanity checkpoint.ckpt_dir="$T/ck_busy" checkpoint.resume_from_checkpoint=true "${TINY[@]}"
kill -KILL $busy; wait $busy 2>/dev/null
if "$BIN" --config L0_sanity checkpoint.ckpt_dir="$T/ck_busy" checkpoint.resume_from_checkpoint=true "${TINY[@]}" \
       >"$T/out" 2>"$T/err"; then
    ok dead_holders_lock_recovered
else
    bad dead_holders_lock_recovered "$(cat "$T/err")"
fi
# ckpt_dir is checked at start-up, not at the first save
ln -s "$T/nowhere/at/all" "$T/dangling"
expect_fail ckpt_dir_dangling_link_at_startup "checkpoint.ckpt_dir.*dangling" \
    "$BIN" --config L0_sanity checkpoint.ckpt_dir="$T/dangling" "${TINY[@]}" logger.run_dir="$T/dangling_run"
if [ -e "$T/dangling_run/metrics.jsonl" ]; then bad ckpt_dir_checked_before_training "it trained first"; else ok ckpt_dir_checked_before_training; fi

# HF-style loading (weights only) checks header lengths, offsets, dtypes, shapes
mkhf() { rm -rf "$T/hf"; cp -r "$CK/final_model" "$T/hf"; }
corrupt() { python3 - "$T/hf/model.safetensors" "$1" <<'PY'
import json, struct, sys
p, how = sys.argv[1], sys.argv[2]
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
hdr = json.loads(b[8:8 + n])
name = sorted(k for k in hdr if k != '__metadata__')[0]
if how == 'truncate':
    b = b[:len(b) // 2]
elif how == 'header_len':
    b[:8] = struct.pack('<Q', len(b) * 4)
else:
    if how == 'offsets':
        hdr[name]['data_offsets'][1] += 4096
    elif how == 'dtype':
        hdr[name]['dtype'] = 'Q17'
    elif how == 'shape':
        hdr[name]['shape'] = [hdr[name]['shape'][0] + 1] + hdr[name]['shape'][1:]
    h = json.dumps(hdr).encode()
    h += b' ' * (-len(h) % 8)
    b = struct.pack('<Q', len(h)) + h + b[8 + n:]
open(p, 'wb').write(b)
PY
}
for how in truncate header_len offsets dtype shape; do
    mkhf; corrupt $how
    expect_fail "init_from_${how}" "model.safetensors" "$BIN" --config L0_sanity checkpoint.init_from="$T/hf" "${TINY[@]}"
done
mkhf; python3 - "$T/hf/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["num_local_experts"] = 4; json.dump(c, open(p, "w"))
PY
expect_fail init_from_other_shape "num_local_experts" "$BIN" --config L0_sanity checkpoint.init_from="$T/hf" "${TINY[@]}"

# a failed save leaves no partial checkpoint: an unwritable ckpt_dir
mkdir -p "$T/ro" && chmod 555 "$T/ro"
if [ "$(id -u)" != 0 ]; then
    expect_fail ckpt_dir_unwritable "checkpoint" "$BIN" --config L0_sanity checkpoint.ckpt_dir="$T/ro/ck" "${TINY[@]}"
fi
leftover=$(find "$T" -name '.tmp-*' | head -1)
if [ -z "$leftover" ]; then ok no_partial_checkpoints; else bad no_partial_checkpoints "$leftover"; fi

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

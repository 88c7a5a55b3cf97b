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
. "$ROOT/tests/cli/lib.sh"

# expect_status NAME STATUS PATTERN CMD...: exactly STATUS, and PATTERN in stderr
expect_status() {
    local name=$1 want=$2 pat=$3; shift 3
    "$@" >"$T/out" 2>"$T/err"; local rc=$?
    if [ $rc -ne "$want" ]; then bad "$name" "exit $rc, expected $want" "$(tail -3 "$T/err")"; return; fi
    if ! grep -qE -- "$pat" "$T/err"; then bad "$name" "stderr lacks /$pat/:" "$(cat "$T/err")"; return; fi
    ok "$name"
}

# ---- command-line manners: getopt_long, one set of exit statuses (2 usage, 1 failure, 75 stopped)
expect_status cli_unknown_option_is_usage 2 "unknown option '--frobnicate'" "$BIN" --frobnicate
expect_status cli_missing_value_is_usage 2 "--threads needs a value" "$BIN" --threads
expect_status cli_bad_count_is_usage 2 "--threads 'x'" "$BIN" --threads=x
# one thread limit (MOE_MAX_THREADS) for --threads and runtime.threads: 2000 passed --threads once
# and failed later as runtime.threads
expect_status cli_threads_over_the_limit 2 "--threads '2000': expected a whole number from 0 to 1024" \
    "$BIN" --threads 2000 --print-config
# --backend gpu is refused while parsing: before the (missing) config is even looked up
expect_status cli_backend_gpu_refused_at_parse 2 "--backend 'gpu': expected one of auto\\|cpu\\|cuda" \
    "$BIN" --config=L9_nothing --backend gpu
expect_status cli_backend_equals_gpu_refused 2 "--backend 'gpu'" "$BIN" --backend=gpu
expect_status cli_config_error_is_failure 1 "L9_nothing" "$BIN" --config=L9_nothing
expect_status cli_stray_word_is_usage 2 "'stray' is neither an option" "$BIN" --config=L0_sanity stray
expect_status eval_missing_both 2 "missing --checkpoint DIR and --tokens FILE" "$BIN" eval
expect_status eval_missing_tokens 2 "missing --tokens FILE" "$BIN" eval --checkpoint=/nonexistent
expect_status eval_missing_checkpoint 2 "missing --checkpoint DIR" "$BIN" eval --tokens /nonexistent
expect_status eval_unknown_option 2 "unknown option '--frob'" "$BIN" eval --frob
expect_status eval_backend_gpu_refused 2 "--backend 'gpu'" "$BIN" eval --checkpoint=/x --tokens=/y --backend=gpu
expect_status eval_unreadable_is_failure 1 "nonexistent" "$BIN" eval --checkpoint=/nonexistent --tokens=/nonexistent
# --name=value everywhere, options after overrides too (getopt_long permutes)
"$BIN" --config=L0_sanity --threads=1 "${TINY[@]}" train.steps=4 --stop-after-steps=2 \
    checkpoint.ckpt_dir="$T/eq" >"$T/out" 2>"$T/err"; rc=$?
if [ $rc -eq 75 ] && [ -d "$T/eq/step_00000002" ] && [ ! -d "$T/eq/step_00000004" ]; then
    ok cli_long_options_with_equals
else
    bad cli_long_options_with_equals "exit $rc (want 75 after 2 steps)" "$(tail -3 "$T/err")"
fi
if "$BIN" --help | grep -q -- "--stop-after-steps N" && "$BIN" eval --help | grep -q -- "--tokens FILE" &&
   "$BIN" --version | grep -qE '^moe-train \(moekit\) [0-9]'; then
    ok cli_help_and_version
else
    bad cli_help_and_version "$("$BIN" --help 2>&1 | head -5)"
fi

# ---- the smaller habits: a copied config finds its base, warmup clamps, notes that matter only
cp "$ROOT/configs/L0_sanity.cfg" "$T/my_L0.cfg"
if "$BIN" --config "$T/my_L0.cfg" --print-config >"$T/out" 2>"$T/err"; then
    ok copied_config_finds_defaults
else
    bad copied_config_finds_defaults "$(cat "$T/err")"
fi
"$BIN" --config L0_sanity "${TINY[@]}" scheduler.warmup_steps=30 >"$T/out" 2>"$T/err"; rc=$?
if [ $rc -eq 0 ] && grep -q "scheduler.warmup_steps = 30 is longer than train.steps = 3" "$T/err"; then
    ok warmup_longer_than_steps_clamped
else
    bad warmup_longer_than_steps_clamped "exit $rc" "$(cat "$T/err")"
fi
if grep -q "no checkpoint.ckpt_dir: the trained model will not be saved" "$T/err"; then
    ok no_ckpt_dir_said_at_startup
else
    bad no_ckpt_dir_said_at_startup "$(cat "$T/err")"
fi
"$BIN" --config L0_sanity "${TINY[@]}" checkpoint.ckpt_dir="$T/quiet_ck" >"$T/out" 2>"$T/err"
if [ ! -s "$T/err" ]; then
    ok single_rank_L0_is_quiet
else
    bad single_rank_L0_is_quiet "stderr: $(cat "$T/err")"
fi

# ---- Ctrl-C: the first SIGINT checkpoints and exits 75, a second one aborts at once
# (a background job of a script starts with SIGINT ignored; moe-train installs its own handler)
LONG=("${TINY[@]}" train.steps=1000000 checkpoint.save_every_n_steps=0 logger.frequency=1)
wait_for_steps() { # RUN_DIR [LINES]: metrics.jsonl has that many lines (default 3; 180 s at most,
    # for slow sanitizer builds): training runs, so its signal handlers are in place
    local i; for ((i = 0; i < 1800; i++)); do
        [ -f "$1/metrics.jsonl" ] && [ "$(wc -l < "$1/metrics.jsonl")" -ge "${2:-3}" ] && return 0; sleep 0.1
    done; return 1
}
"$BIN" --config L0_sanity "${LONG[@]}" checkpoint.ckpt_dir="$T/int1" logger.run_dir="$T/int1r" \
    >"$T/int1.out" 2>"$T/int1.err" & pid=$!
wait_for_steps "$T/int1r"; kill -INT $pid; wait $pid; rc=$?
if [ $rc -eq 75 ] && ls -d "$T"/int1/step_* >/dev/null 2>&1 && grep -q "Ctrl-C again aborts" "$T/int1.err"; then
    ok sigint_checkpoints_and_exits_75
else
    bad sigint_checkpoints_and_exits_75 "exit $rc, checkpoints: $(ls "$T/int1" 2>&1)" "$(tail -3 "$T/int1.err")"
fi
# SIGHUP (a closed terminal or ssh session, a hung-up tmux) is SIGTERM: finish the step, save, exit 75
# (it killed the run without saving). Started with SIGHUP at its default: moe-train keeps an
# ignored SIGHUP ignored (nohup), and a suite run under nohup would otherwise wait forever.
env --default-signal=HUP "$BIN" --config L0_sanity "${LONG[@]}" checkpoint.ckpt_dir="$T/hup" \
    logger.run_dir="$T/hupr" >"$T/hup.out" 2>"$T/hup.err" & pid=$!
wait_for_steps "$T/hupr"; kill -HUP $pid; wait $pid; rc=$?
if [ $rc -eq 75 ] && ls -d "$T"/hup/step_* >/dev/null 2>&1; then
    ok sighup_checkpoints_and_exits_75
else
    bad sighup_checkpoints_and_exits_75 "exit $rc, checkpoints: $(ls "$T/hup" 2>&1)" "$(tail -3 "$T/hup.err")"
fi
# the second SIGINT, once the first was taken (its note printed), aborts without saving:
# L0_sanity's own model, whose steps take far longer than the gap between the two
"$BIN" --config L0_sanity train.steps=1000000 train.eval_every_n_steps=0 logger.frequency=1 \
    checkpoint.save_every_n_steps=0 checkpoint.ckpt_dir="$T/int2" logger.run_dir="$T/int2r" \
    >"$T/int2.out" 2>"$T/int2.err" & pid=$!
wait_for_steps "$T/int2r" 1; kill -INT $pid
for ((i = 0; i < 500; i++)); do grep -q "Ctrl-C again" "$T/int2.err" && break; sleep 0.01; done
kill -INT $pid; wait $pid; rc=$?
if [ $rc -eq $((128 + 2)) ] && ! ls -d "$T"/int2/step_* >/dev/null 2>&1; then
    ok second_sigint_aborts
else
    bad second_sigint_aborts "exit $rc (want 130, killed by SIGINT), checkpoints: $(ls "$T/int2" 2>&1)"
fi
# a second Ctrl-C during the first one's save leaves that save's temporary directory, never a
# checkpoint; the next save into the directory sweeps it (no_partial_checkpoints, at the end)
"$BIN" --config L0_sanity "${TINY[@]}" checkpoint.ckpt_dir="$T/int2" >/dev/null 2>&1 ||
    bad second_sigint_then_train_again "a run into the aborted run's checkpoint directory failed"

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

# moe-train eval on the transformers fixtures: one sequence (genomic_top2of8) and two (gqa_top2)
for fix in gqa_top2 genomic_top2of8; do
    d=$ROOT/tests/fixtures/hf/$fix
    if "$BIN" eval --backend cpu --checkpoint "$d" --tokens "$d/tokens.txt" >"$T/eval.json" 2>"$T/err" &&
       python3 - "$T/eval.json" "$d/meta.json" <<'PY'
import json, sys
got, ref = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("lm_loss", "aux_loss"):
    assert abs(got[k] - ref[k]) <= 1e-5 * abs(ref[k]), (k, got[k], ref[k])
PY
    then
        ok "eval_matches_transformers_$fix"
    else
        bad "eval_matches_transformers_$fix" "$(cat "$T/eval.json" "$T/err" | tail -3)"
    fi
done

# initialising from a Hugging Face checkpoint: the architecture comes from its config.json (as
# from_pretrained takes it), so only the training keys are given
FIX="$ROOT/tests/fixtures/hf/genomic_top2of8"
FIXRUN=(train.seq_length=32 train.micro_batch_size=2 train.steps=2 scheduler.warmup_steps=1
        train.eval_batches=1)
if "$BIN" --config L0_sanity checkpoint.init_from="$FIX" "${FIXRUN[@]}" >"$T/out" 2>"$T/err" &&
   grep -q "initialised the weights from" "$T/out" &&
   grep -q "3 layers, hidden 48, 6 heads / 2 kv heads (dim 8), 8 experts top-2, intermediate 40" "$T/out"; then
    ok init_from_takes_the_architecture
else
    bad init_from_takes_the_architecture "$(cat "$T/out" "$T/err" | tail -5)"
fi
# a value the run sets itself must agree, and both values are named
expect_status init_from_rope_theta_mismatch 1 "config.json has rope_theta = 1000000 but the config sets model.rope_theta = 10000" \
    "$BIN" --config L0_sanity checkpoint.init_from="$FIX" "${FIXRUN[@]}" model.rope_theta=10000
expect_status init_from_rms_norm_eps_mismatch 1 "rms_norm_eps = 1e-06 but the config sets model.rms_norm_eps = 1e-05" \
    "$BIN" --config L0_sanity checkpoint.init_from="$FIX" "${FIXRUN[@]}" model.rms_norm_eps=1e-5
expect_status init_from_size_mismatch 1 "hidden_size = 48 but the config sets model.hidden_size = 64" \
    "$BIN" --config L0_sanity checkpoint.init_from="$FIX" "${FIXRUN[@]}" model.hidden_size=64
# the same values, stated: accepted
if "$BIN" --config L0_sanity checkpoint.init_from="$FIX" "${FIXRUN[@]}" model.hidden_size=48 \
    model.rms_norm_eps=1e-6 --quiet >"$T/out" 2>"$T/err"; then
    ok init_from_agreeing_values
else
    bad init_from_agreeing_values "$(tail -3 "$T/err")"
fi
# a config file that names init_from states its own model keys; its base's do not count
printf 'base = "%s/configs/L0_sanity.cfg";\ncheckpoint = { init_from = "%s"; };\nmodel = { num_layers = 2; };\n' \
    "$ROOT" "$FIX" > "$T/finetune.cfg"
expect_status init_from_file_states_num_layers 1 "num_hidden_layers = 3 but the config sets model.num_layers = 2" \
    "$BIN" --config "$T/finetune.cfg" "${FIXRUN[@]}"
# the vocabulary must cover the tokenizer: refused when the config is read, not at step 1
expect_status vocab_smaller_than_tokenizer 1 "model.vocab_size = 60 is smaller than the genomic tokenizer's 256" \
    "$BIN" --config L0_sanity model.vocab_size=60 --print-config

# ---- metrics people can open: metrics.jsonl fields, TensorBoard events read back, loss.png panels
"$BIN" --config L0_sanity "${TINY[@]}" train.steps=6 train.eval_every_n_steps=3 \
    logger.run_dir="$T/tb" logger.tensorboard=true >"$T/out" 2>"$T/err"; rc=$?
if [ $rc -eq 0 ] && python3 - "$T/tb/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "loss" in l]
evals = [l for l in lines if "val_loss" in l]
assert len(steps) == 6 and len(evals) == 2, (len(steps), len(evals))
for l in steps:
    for k in ("time", "elapsed_s", "tokens_per_s", "tflops", "mfu", "mem_bytes"):
        assert k in l, (k, l)
    assert l["time"] > 1.7e9 and l["elapsed_s"] > 0 and l["tokens_per_s"] > 0, l
    assert l["tflops"] > 0 and l["mem_bytes"] > 1e6, l
    assert l["mfu"] is None, l  # the CPU has no known peak
    assert l["host_link_bytes"] is None, l  # nor a host link: its buffers are host memory
assert steps[-1]["elapsed_s"] >= steps[0]["elapsed_s"]
PY
then ok metrics_jsonl_fields; else bad metrics_jsonl_fields "exit $rc" "$(head -2 "$T/tb/metrics.jsonl")"; fi
ev=$(ls "$T"/tb/events.out.tfevents.* 2>/dev/null | head -1)
if [ -n "$ev" ] && python3 "$ROOT/tests/cli/read_tfevents.py" "$ev" > "$T/events.json" &&
   python3 - "$T/events.json" "$T/tb/metrics.jsonl" <<'PY'
import json, struct, sys
events = [json.loads(l) for l in open(sys.argv[1])]
metrics = [json.loads(l) for l in open(sys.argv[2])]
assert events[0].get("file_version") == "brain.Event:2", events[0]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
train = {e["step"]: e["scalars"] for e in events[1:] if "train/loss" in e.get("scalars", {})}
val = {e["step"]: e["scalars"]["val/loss"] for e in events[1:] if "val/loss" in e.get("scalars", {})}
for m in metrics:
    if "loss" in m:
        s = train[m["step"]]
        assert abs(s["train/loss"] - f32(m["loss"])) < 1e-6, (s, m)
        assert abs(s["train/lr"] - f32(m["lr"])) <= 1e-6 * abs(m["lr"]) + 1e-12, (s, m)
        assert s["perf/tokens_per_s"] > 0 and "perf/mfu" not in s, s
    else:
        assert abs(val[m["step"]] - f32(m["val_loss"])) < 1e-6, (val, m)
assert sorted(train) == list(range(1, 7)) and sorted(val) == [3, 6], (sorted(train), sorted(val))
PY
then ok tensorboard_events_read_back; else bad tensorboard_events_read_back "file: $ev" "$(tail -3 "$T/events.json" 2>&1)"; fi
# a damaged record is caught by the reader's own CRC: the check above can fail
if [ -n "$ev" ]; then
    cp "$ev" "$T/damaged.tfevents"
    printf '\x7f' | dd of="$T/damaged.tfevents" bs=1 seek=30 conv=notrunc 2>/dev/null
    if ! python3 "$ROOT/tests/cli/read_tfevents.py" "$T/damaged.tfevents" >/dev/null 2>&1; then
        ok tensorboard_reader_catches_damage; else bad tensorboard_reader_catches_damage; fi
fi
png_size() { python3 -c 'import struct,sys; b=open(sys.argv[1],"rb").read(24); assert b[:8]==b"\x89PNG\r\n\x1a\n"; print("%dx%d" % struct.unpack(">II", b[16:24]))' "$1" 2>/dev/null; }
if [ "$(png_size "$T/tb/loss.png")" = 1200x1000 ]; then ok loss_png_panels; else bad loss_png_panels "$(png_size "$T/tb/loss.png")"; fi
# loss.png is drawn at each evaluation while training runs, and again on a stop (exit 75)
"$BIN" --config L0_sanity "${TINY[@]}" train.steps=1000000 train.eval_every_n_steps=2 \
    logger.run_dir="$T/live" >"$T/live.out" 2>"$T/live.err" & pid=$!
for ((i = 0; i < 1800; i++)); do [ -s "$T/live/loss.png" ] && break; sleep 0.1; done
drawn_live=$([ -s "$T/live/loss.png" ] && echo yes || echo no)
kill -TERM $pid; wait $pid; rc=$?
if [ "$drawn_live" = yes ] && [ $rc -eq 75 ] && [ "$(png_size "$T/live/loss.png")" = 1200x1000 ]; then
    ok loss_png_at_each_evaluation_and_on_stop
else
    bad loss_png_at_each_evaluation_and_on_stop "drawn while running: $drawn_live, exit $rc"
fi
"$BIN" --config L0_sanity "${TINY[@]}" train.steps=6 train.eval_every_n_steps=0 --stop-after-steps=2 \
    logger.run_dir="$T/stopped" >"$T/out" 2>"$T/err"; rc=$?
if [ $rc -eq 75 ] && [ -s "$T/stopped/loss.png" ]; then ok loss_png_on_exit_75; else bad loss_png_on_exit_75 "exit $rc"; fi

# ---- gnuplot gets data, never code: hostile run_dir and config file names
mkdir -p "$T/hostile" && cp "$ROOT/configs/L0_sanity.cfg" "$T/hostile/cfg'q;system 'touch PWNED_CFG';'.cfg"
( cd "$T/hostile" &&
  "$BIN" --config "./cfg'q;system 'touch PWNED_CFG';'.cfg" "${TINY[@]}" \
      "logger.run_dir=runs/a'b\";system 'touch PWNED_DIR';print '" >"$T/out" 2>"$T/err" &&
  "$BIN" --config L0_sanity "${TINY[@]}" "logger.run_dir=<touch PWNED_PIPE;x" >>"$T/out" 2>>"$T/err" )
rc=$?
pwned=$(find "$T/hostile" -name 'PWNED*' | head -3)
if [ $rc -eq 0 ] && [ -z "$pwned" ] && [ -s "$T/hostile/runs/a'b\";system 'touch PWNED_DIR';print '/loss.png" ] &&
   [ -s "$T/hostile/<touch PWNED_PIPE;x/loss.png" ]; then
    ok gnuplot_hostile_names_stay_data
else
    bad gnuplot_hostile_names_stay_data "exit $rc; commands ran: ${pwned:-none}" "$(tail -3 "$T/err")"
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
# an empty --out is refused before anything is written (it was refused after the whole export)
expect_status export_refuses_empty_out 2 "--out is empty" "$BIN" export --checkpoint "$CK" --out ""
# weights that are not finite are refused, naming the tensor (they were exported without a word)
cp -r "$CK/final_model" "$T/nan_model" && rm -f "$T/nan_model/MANIFEST"
python3 - "$T/nan_model/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]; t = json.loads(b[8:8 + n])["model.layers.0.self_attn.q_proj.weight"]
at = 8 + n + t["data_offsets"][0] + 5 * (2 if t["dtype"] == "BF16" else 4)
b[at:at + 4] = b"\xc0\x7f\xc0\x7f" if t["dtype"] == "BF16" else struct.pack("<f", float("nan"))
open(p, "wb").write(b)
PY
expect_fail export_refuses_nan_weights "model.layers.0.self_attn.q_proj.weight: element 5 is NaN" \
    "$BIN" export --checkpoint "$T/nan_model" --out "$T/nan_exp"
[ -e "$T/nan_exp" ] && bad export_nan_leaves_no_out "$T/nan_exp exists" || ok export_nan_leaves_no_out

# eval checks config.json against the weights before sizing anything by it
cp -r "$CK/final_model" "$T/liar"
python3 - "$T/liar/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["vocab_size"] = 300000; json.dump(c, open(p, "w"))
PY
expect_fail eval_config_disagrees_with_weights "embed_tokens.weight is \\[256,16\\] but its config.json implies \\[300000,16\\]" \
    "$BIN" eval --checkpoint "$T/liar" --tokens "$T/tokens.txt"
# sizes past the config schema's limits are refused as config.json is read (3,000,000 layers made
# eval's layout 6 GB before a tensor was compared); within them, the headers' tensor count comes
# before the layout: eval and checkpoint.init_from alike
liar_layers() { # DIR LAYERS
    rm -rf "$1"; cp -r "$CK/final_model" "$1"
    python3 - "$1/config.json" "$2" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["num_hidden_layers"] = int(sys.argv[2]); json.dump(c, open(p, "w"))
PY
}
NO_LAYERS=("${TINY[@]/model.num_layers=1/train.steps=3}")
liar_layers "$T/liar_huge" 3000000
expect_fail eval_config_past_the_schema_limits "\"num_hidden_layers\" = 3000000 is out of range \\(1..65536, the limit of model.num_layers\\)" \
    "$BIN" eval --checkpoint "$T/liar_huge" --tokens "$T/tokens.txt"
liar_layers "$T/liar_many" 65536
expect_fail eval_tensor_count_before_layout "liar_many holds [0-9]+ model tensors but its config.json \\(65536 layers of [0-9]+, 2 experts\\) implies [0-9]+" \
    "$BIN" eval --checkpoint "$T/liar_many" --tokens "$T/tokens.txt"
expect_fail init_from_tensor_count_before_layout "checkpoint.init_from: .*liar_many holds [0-9]+ model tensors but its config.json \\(65536 layers" \
    "$BIN" --config L0_sanity "${NO_LAYERS[@]}" checkpoint.init_from="$T/liar_many"

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
# what dead writers left (temp dirs of a step, of the final model) goes at the next
# run's start, even when that run saves nothing
dead=$(sh -c 'echo $$')
mkdir -p "$T/ck_busy/.tmp-step_00000999-$dead/x" "$T/ck_busy/.tmp-final_model-$dead"
"$BIN" --config L0_sanity checkpoint.ckpt_dir="$T/ck_busy" checkpoint.resume_from_checkpoint=true \
    "${TINY[@]}" train.steps=1 >"$T/out" 2>"$T/err"
if [ ! -e "$T/ck_busy/.tmp-step_00000999-$dead" ] && [ ! -e "$T/ck_busy/.tmp-final_model-$dead" ] &&
    [ -z "$(find "$T/ck_busy" -name '.tmp-*')" ]; then
    ok dead_writers_debris_swept_at_start
else
    bad dead_writers_debris_swept_at_start "$(ls -a "$T/ck_busy"; tail -3 "$T/err")"
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
# ---- the job scripts share one body (jobs/job_body.sh, copied in by scripts/job_scripts.sh)
if "$ROOT/scripts/job_scripts.sh" --check 2>"$T/err"; then ok job_scripts_share_one_body
else bad job_scripts_share_one_body "$(cat "$T/err")"; fi
mkdir -p "$T/tree/scripts" && cp -r "$ROOT/jobs" "$T/tree/" && cp "$ROOT/scripts/job_scripts.sh" "$T/tree/scripts/"
echo 'echo one more line' >> "$T/tree/jobs/job_body.sh"
if ! "$T/tree/scripts/job_scripts.sh" --check 2>"$T/err" && grep -q "sanity.sbatch does not end in" "$T/err" &&
    "$T/tree/scripts/job_scripts.sh" >/dev/null && "$T/tree/scripts/job_scripts.sh" --check &&
    [ "$(tail -1 "$T/tree/jobs/scale.sbatch")" = "echo one more line" ]; then ok job_scripts_check_sees_a_stale_body
else bad job_scripts_check_sees_a_stale_body "$(cat "$T/err")"; fi
leftover=$(find "$T" -name '.tmp-*' | head -1)
if [ -z "$leftover" ]; then ok no_partial_checkpoints; else bad no_partial_checkpoints "$leftover"; fi

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

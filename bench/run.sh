#!/bin/bash
# moekit's benchmark, run in ONE go on a GPU machine: moekit (bf16, and fp8_block experts on
# Hopper) and Hugging Face
# MixtralForCausalLM at the same sizes on the same genome (bench_8x7B_2L: 2 Mixtral-8x7B layers,
# vocab 32000, sequence 4096, micro-batch 2 = 8192 tokens a step, AdamW, fp32 masters; or
# MOE_BENCH_CONFIG=bench_8x7B_2L_genomic: vocab 256, sequence 8192, micro-batch 1).
# Prints a table: tokens/s, model TFLOP/s (6 x active params x tokens + causal attention),
# % of the bf16 GEMM peak (760 TFLOP/s measured on the H200), peak memory, time to first step.
#   bench/run.sh [BUILD_DIR] [HF setups...]   (default: eager_fp32 grouped_bf16 grouped_bf16_compiled;
#                                              "-": moekit alone)
#   bench/run.sh BUILD_DIR --genomic          the genomic variant at 8k, 32k, 64k and 128k tokens
#       (configs bench_8x7B_2L_genomic{,_32k,_64k,_128k}), each against Hugging Face's grouped_mm
#       setups in the same call, then attention alone: moekit (cuDNN and its own kernels) against
#       torch SDPA (cuDNN and flash backends) at the same shapes.
#   MOE_BENCH_STEPS / MOE_BENCH_WARM: steps run and steps left out as warm-up (12 / 4);
#   MOE_BENCH_LOG_DIR: keep each moekit run's whole log there;
#   MOE_BENCH_HF_TIMEOUT: seconds a Hugging Face setup may run (300); --genomic's setups per
#   length: MOE_BENCH_HF_8K, MOE_BENCH_HF_LONG (32k, 64k), MOE_BENCH_HF_128K, and moekit's
#   precisions at 64k and 128k: MOE_BENCH_64K, MOE_BENCH_128K ("-" leaves the length out).
set -u
B=${1:-build}; shift || true
# MOE_BENCH_ACCUM="1 8": the whole benchmark once per global batch (micro-batches an optimizer
# step, both sides: moekit's train.grad_accum_steps, the Hugging Face side's loop)
if [ "$(wc -w <<< "${MOE_BENCH_ACCUM:-1}")" -gt 1 ]; then
    for a in $MOE_BENCH_ACCUM; do MOE_BENCH_ACCUM=$a "$0" "$B" "$@" || exit; done
    exit 0
fi
ACCUM=${MOE_BENCH_ACCUM:-1}
if [ "${1:-}" = --genomic ]; then
    ROOT=$(cd "$(dirname "$0")/.." && pwd)
    # per length: the precisions moekit runs (recompute chosen by measurement, NOTES.md; bf16
    # moments as the configs set them, and at 8k also fp32 moments) and
    # the Hugging Face setups: grouped_mm experts with SDPA as torch picks it and with its
    # cuDNN backend first; compiled at 8k only (the fastest there; at 32k it did not run)
    for row in "bench_8x7B_2L_genomic|bf16 bf16+optimizer.moments_dtype=fp32 fp8_block|${MOE_BENCH_HF_8K:-grouped_bf16_compiled grouped_bf16_cudnn}" \
               "bench_8x7B_2L_genomic_32k|bf16 fp8_block|${MOE_BENCH_HF_LONG:-grouped_bf16 grouped_bf16_cudnn}" \
               "bench_8x7B_2L_genomic_64k|${MOE_BENCH_64K:-bf16 fp8_block}|${MOE_BENCH_HF_LONG:-grouped_bf16 grouped_bf16_cudnn}" \
               "bench_8x7B_2L_genomic_128k|${MOE_BENCH_128K:-bf16 fp8_block}|${MOE_BENCH_HF_128K:-grouped_bf16_cudnn}"; do
        IFS='|' read -r cfg precs setups <<< "$row"
        [ "$precs" = - ] && continue # a length left out (one that cannot fit this GPU)
        MOE_BENCH_CONFIG=$cfg MOE_BENCH_PRECISIONS=$precs "$0" "$B" $setups
    done
    echo "attention alone, forward + backward, causal, 32/8 heads of 128, bf16, batch 1"
    MOE_BENCH_ATTN_FAMILIES="cudnn mma" "$ROOT/$B/tests/gpu/bench_attention" 8192 32768
    MOE_BENCH_ATTN_FAMILIES=cudnn "$ROOT/$B/tests/gpu/bench_attention" 65536 131072 | tail -n +2
    python3 "$ROOT/bench/attn_sdpa.py" 8192 32768 65536 131072
    exit 0
fi
SETUPS=${*:-eager_fp32 grouped_bf16 grouped_bf16_compiled}
[ "$SETUPS" = - ] && SETUPS=
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONFIG=${MOE_BENCH_CONFIG:-bench_8x7B_2L}
STEPS=${MOE_BENCH_STEPS:-12} WARM=${MOE_BENCH_WARM:-4}
# the sizes both sides run at, from the config as moe-train resolves it
sizes=$("$ROOT/$B/bin/moe-train" --config "$CONFIG" --print-config) || exit 1
size() { echo "$sizes" | sed -n "s/^ *$1 = \([0-9]*\);.*/\1/p" | head -1; }
# both sides on one learning-rate schedule: moekit's warm-up and cosine, as the config's
MIN_LR_RATIO=$(echo "$sizes" | sed -n 's/^ *min_lr_ratio = \([0-9.eE+-]*\);.*/\1/p' | head -1)
LR=3e-4 LR_WARMUP=2
VOCAB=$(size vocab_size) LAYERS=$(size num_layers) SEQ=$(size seq_length) BATCH=$(size micro_batch_size)
# the genome both sides read (the config's first data file)
GENOME=$(echo "$sizes" | sed -n 's/^ *files = \[ *"\([^"]*\)".*/\1/p' | head -1)
for v in HIDDEN:hidden_size HEADS:num_heads KV:num_kv_heads HDIM:head_dim EXPERTS:num_experts \
         TOPK:top_k FFN:intermediate_size; do
    printf -v "${v%%:*}" '%s' "$(size "${v#*:}")"
done
if [ "$HIDDEN/$HEADS/$KV/$HDIM/$EXPERTS/$TOPK/$FFN" != 4096/32/8/128/8/2/14336 ]; then
    echo "bench/run.sh: $CONFIG is not at Mixtral-8x7B's layer sizes (the Hugging Face side is)" >&2
    exit 2
fi
res=$(mktemp)
# moekit, once per precision (MOE_BENCH_PRECISIONS, default "bf16 fp8_block"): tokens/s from
# its steady-state log lines; peak memory sampled from nvidia-smi
# An entry may carry settings after '+': "fp8_block+precision.fp8_saved_activations=false".
run_moekit() {
    local name=$1 prec=${1%%+*} extra=()
    [ "$prec" != "$name" ] && IFS=+ read -r -a extra <<< "${name#*+}"
    ( while sleep 0.2; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done ) > /tmp/moe_mem.txt &
    local smi=$!
    local t0; t0=$(date +%s.%N)
    "$ROOT/$B/bin/moe-train" --config "$CONFIG" --backend cuda train.steps=$STEPS \
        scheduler.warmup_steps=$LR_WARMUP logger.frequency=1 train.eval_every_n_steps=0 train.eval_batches=1 \
        optimizer.lr=$LR train.grad_accum_steps=$ACCUM precision.compute="$prec" "${extra[@]}" 2>&1 | while IFS= read -r l; do echo "$(date +%s.%N) $l"; done > /tmp/moe_bench.log
    kill $smi 2>/dev/null
    # MOE_BENCH_LOG_DIR=DIR keeps each moekit run's log (start-up summary, plan against allocated)
    [ -n "${MOE_BENCH_LOG_DIR:-}" ] && cut -d' ' -f2- /tmp/moe_bench.log \
        > "$MOE_BENCH_LOG_DIR/moekit_${CONFIG}_${name//[^A-Za-z0-9_.-]/_}.log"
    python3 - "$t0" $WARM "$name" >> "$res" <<'PY' || tail -5 /tmp/moe_bench.log
import json, re, sys
t0, warm, prec = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
stamped = [l.split(' ', 1) for l in open('/tmp/moe_bench.log')]
lines = [l for _, l in stamped if l.startswith('step ')]
rates = [float(re.search(r'\| ([0-9.]+) tok/s', l).group(1)) for l in lines]
steady = rates[warm:]
mem = max(int(x) for x in open('/tmp/moe_mem.txt').read().split() if x.strip().isdigit()) / 1024
# time to the first finished step: when its log line appeared, from the launch
first = next(float(ts) - t0 for ts, l in stamped if l.startswith('step '))
print(json.dumps({"impl": "moekit_" + prec, "tokens_per_s": len(steady) / sum(1 / r for r in steady),
                  "peak_mem_gib": mem, "first_step_s": first,
                  "final_loss": float(re.search(r'loss ([0-9.]+)', lines[-1]).group(1)),
                  "losses": [float(re.search(r'loss ([0-9.]+)', l).group(1)) for l in lines]}))
PY
}
for prec in ${MOE_BENCH_PRECISIONS:-bf16 fp8_block}; do
    run_moekit "$prec"
done
for s in $SETUPS; do
    PYTHONUNBUFFERED=1 timeout "${MOE_BENCH_HF_TIMEOUT:-300}" python3 "$ROOT/bench/hf_bench.py" --setup "$s" --steps $STEPS \
        --warmup $WARM --layers "$LAYERS" --vocab "$VOCAB" --seq "$SEQ" --batch "$BATCH" \
        --lr $LR --lr-warmup $LR_WARMUP --min-lr-ratio "$MIN_LR_RATIO" --accum $ACCUM \
        ${GENOME:+--data "$ROOT/data/$GENOME"} \
        2>"/tmp/hf_$s.err" | tail -1 > "/tmp/hf_$s.out"
    # a setup that printed no result says why
    grep -q '^{' "/tmp/hf_$s.out" && cat "/tmp/hf_$s.out" >> "$res" ||
        { echo "hf $s failed:"; tail -3 "/tmp/hf_$s.err"; }
done
echo "$CONFIG: $LAYERS layers, vocab $VOCAB, sequence $SEQ, micro-batch $BATCH, $ACCUM micro-batch(es) an optimizer step"
python3 - "$res" "$LAYERS" "$VOCAB" "$SEQ" "$BATCH" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith('{')]
L, V, S, Bt = map(int, sys.argv[2:6])
C, HD, KVD, E, K, I = 4096, 32 * 128, 8 * 128, 8, 2, 14336
# active parameters a token meets (as moe-train's summary counts them: embedding and LM head
# included): attention, router, top-k experts and two norms a layer, plus the final norm
active = L * (2 * C * HD + 2 * C * KVD + C * E + K * 3 * C * I + 2 * C) + 2 * V * C + C
tok = Bt * S
# causal attention, QK^T and PV: 2 S^2 HD flops forward a sequence and layer, x3 with the backward
attn = 6 * S * S * HD * L * Bt
peak = 760e12
base = {r['impl']: r['tokens_per_s'] for r in rows}
print(f"{'setup':<28}{'tokens/s':>10}{'TFLOP/s':>9}{'% peak':>8}{'peak GiB':>10}{'1st step s':>11}{'vs HF eager':>12}{'loss@12':>9}")
for r in rows:
    tf = r['tokens_per_s'] * (6 * active + attn / tok) / 1e12
    ref = base.get('hf_eager_fp32')
    rel = f"{r['tokens_per_s'] / ref:.2f}x" if ref else "-"
    fs = f"{r['first_step_s']:.1f}" if r.get('first_step_s') else "-"
    fl = f"{r['final_loss']:.4f}" if r.get('final_loss') else "-"
    print(f"{r['impl']:<28}{r['tokens_per_s']:>10.0f}{tf:>9.1f}{100 * tf * 1e12 / peak:>7.1f}%{r['peak_mem_gib']:>10.1f}{fs:>11}{rel:>12}{fl:>9}")
# the loss of every step, both sides on the same windows: a speed is worth only a sane curve
print("loss by step")
for r in rows:
    if r.get('losses'):
        print(f"  {r['impl']:<26}" + " ".join(f"{x:.3f}" for x in r['losses']))
PY
rm -f "$res"

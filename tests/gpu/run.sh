#!/bin/bash
# The GPU checks, run on a machine with an NVIDIA GPU (not in CI):
#   1. every CUDA op against the CPU reference (fresh random inputs, poisoned outputs);
#   2. moe-train eval on the transformers fixtures with the cuda backend (bf16) against
#      transformers' float64 losses, within 2%;
#   3. L0_sanity trained on the GPU against the same run on the CPU: final train and held-out
#      losses within 2% in bf16, within 3% with the experts in fp8_block (Hopper) and in
#      mxfp8_emulated (MXFP8 values through bf16 GEMMs, any GPU);
#      L0_sanity also with the attention projections in fp8_block / mxfp8_emulated
#      (precision.layers=all), within 3%;
#   4. the quantiser kernels byte for byte against the C reference, the FP8 GEMMs against
#      float64, and the attention projections in low precision against float64 on the C
#      reference's quantised operands (tests/gpu/test_lowp_cuda.c, test_fp8_gemm.c,
#      test_linear_lowp.c);
#   5. expert buffers by capacity: rows beyond it in further passes, against one pass
#      (tests/gpu/test_capacity_cuda.c);
#   6. NCCL at world size 1 bound to the backend: L1's exchange rows after a slow producer,
#      byte for byte, and the abort path (tests/gpu/test_parallel_nccl.c); several ranks as
#      threads on this one GPU (each its own backend, stream and communicator stream) over the
#      in-process communicator with random delays on every collective: EP=2, 4, 8, DP=2,
#      EP=2 x DP=2, capacity passes, against one rank, and the same with the stream order off
#      must fail (tests/unit/test_local_ranks.c, run with "cuda");
#   7. a GPU run stopped at a checkpoint and resumed: every logged number equal to the straight
#      bf16 run's;
#   8. packed windows: moe-train eval --pack packed (the CPU reference) on contigs against
#      transformers with position_ids and a block-diagonal mask, and each record alone
#      (tests/hf/check_packed.py); the cuda backend's RoPE at packed positions is in step 1.
# Usage: tests/gpu/run.sh [BUILD_DIR]; last line "gpu: N passed, N failed".
# MOE_GPU_LOG_DIR=DIR keeps the logs and the per-op error table there.
set -u
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/$B/bin/moe-train
T=$(mktemp -d /tmp/moekit-gpu-XXXXXX)
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok $1"; }
bad() { failed=$((failed + 1)); echo "not ok $1: $2"; }
within() { python3 -c "import sys; a,b,t=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b)<=t*abs(b) else 1)" "$@"; }

if "$ROOT/$B/tests/gpu/test_cuda_ops" 2>&1 | tee "$T/ops.log" | tail -1 | grep -q ' 0 failed$'; then
    ok cuda_ops
else
    bad cuda_ops "$(grep -E 'FAIL|cuda' "$T/ops.log" | head -5)"
fi
grep -E "rel " "$T/ops.log" > "$T/ops_table.txt"

# packed windows against transformers (needs python3 with torch and transformers)
fx=$ROOT/tests/fixtures/hf/genomic_top2of8
"$ROOT/$B/tests/contigs" "$T/contigs.fa" 12 --median 90 --sigma 0.6 --min 10 --max 400 \
    --from "$ROOT/data/lambda_virus.fa.gz" --seed 3 >/dev/null
if "$BIN" eval --backend cpu --checkpoint "$fx" --fasta "$T/contigs.fa" --seq-length 64 \
        --pack packed >"$T/packed.json" 2>&1 &&
   python3 "$ROOT/tests/hf/check_packed.py" "$fx" "$T/contigs.fa" 64 "$T/packed.json" \
        >"$T/packed_hf.json" 2>&1; then
    ok packed_windows_match_hf
else
    bad packed_windows_match_hf "$(cat "$T/packed.json" "$T/packed_hf.json" | tail -5)"
fi
cat "$T/packed_hf.json" 2>/dev/null

for fix in gqa_top2 genomic_top2of8; do
    d=$ROOT/tests/fixtures/hf/$fix
    out=$("$BIN" eval --backend cuda --checkpoint "$d" --tokens "$d/tokens.txt" 2>&1)
    ref_lm=$(python3 -c "import json;print(json.load(open('$d/meta.json'))['lm_loss'])")
    ref_aux=$(python3 -c "import json;print(json.load(open('$d/meta.json'))['aux_loss'])")
    lm=$(echo "$out" | python3 -c "import json,sys;print(json.load(sys.stdin)['lm_loss'])" 2>/dev/null)
    aux=$(echo "$out" | python3 -c "import json,sys;print(json.load(sys.stdin)['aux_loss'])" 2>/dev/null)
    echo "  $fix: cuda lm_loss $lm (HF $ref_lm), aux $aux (HF $ref_aux)"
    if [ -n "$lm" ] && within "$lm" "$ref_lm" 0.02 && within "$aux" "$ref_aux" 0.02; then
        ok "hf_fixture_$fix"
    else
        bad "hf_fixture_$fix" "$out"
    fi
done

run_l0() { "$BIN" --config L0_sanity --backend "$1" logger.run_dir="$T/$2" logger.frequency=100 \
    ${3:+precision.compute=$3} ${4:-} 2>&1 | tee "$T/$2.log" | grep -E "^step|^eval|done|backend" ; }
final() { grep "moe-train: done" "$T/$1.log" | sed -E 's/.*final loss ([0-9.]+), held-out loss ([0-9.]+).*/\1 \2/'; }
run_l0 cpu cpu >/dev/null
c=$(final cpu)
# NAME+all: the attention projections in that precision too (precision.layers=all)
for prec in bf16:0.02 fp8_block:0.03 fp8_block+all:0.03 mxfp8_emulated:0.03 mxfp8_emulated+all:0.03; do
    p=${prec%:*} tol=${prec#*:}
    layers=experts
    [ "${p%+all}" != "$p" ] && layers=all
    run_l0 cuda "cuda_$p" "${p%+all}" precision.layers=$layers
    g=$(final "cuda_$p")
    echo "  L0_sanity final (train, held-out): cuda $p $g, cpu $c"
    set -- $g $c
    if [ $# -eq 4 ] && within "$1" "$3" "$tol" && within "$2" "$4" "$tol"; then
        ok "l0_sanity_gpu_${p}_matches_cpu"
    else
        bad "l0_sanity_gpu_${p}_matches_cpu" "cuda '$g' cpu '$c'"
    fi
done

# a checkpoint of the GPU run (masters rebuilt from the device's split halves, moments, staged
# through pinned memory) resumes bit for bit: 150 steps, stop, resume to 300 against the straight run
R=$T/resume
RESUME=(--config L0_sanity --backend cuda precision.compute=bf16 precision.layers=experts
        logger.frequency=1000 checkpoint.ckpt_dir="$R/ck" logger.run_dir="$R/run")
"$BIN" "${RESUME[@]}" --stop-after-steps 150 >"$T/resume1.log" 2>&1
rc1=$?
"$BIN" "${RESUME[@]}" checkpoint.resume_from_checkpoint=true >"$T/resume2.log" 2>&1
rc2=$?
learned() { python3 -c 'import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(d["step"], d.get("loss"), d.get("grad_norm"), d.get("val_loss"))' "$1"; }
if [ $rc1 -eq 75 ] && [ $rc2 -eq 0 ] && grep -q "resuming from .*(step 150)" "$T/resume2.log" &&
   [ "$(learned "$R/run/metrics.jsonl")" = "$(learned "$T/cuda_bf16/metrics.jsonl")" ]; then
    ok resume_on_gpu_bit_identical
else
    bad resume_on_gpu_bit_identical "exit $rc1 then $rc2; $(diff <(learned "$R/run/metrics.jsonl") \
        <(learned "$T/cuda_bf16/metrics.jsonl") | head -4 | tr '\n' ' ')"
fi

# the same run twice, the same bits: no kernel of the step adds in an order that changes
# between runs (moekit's own attention kernels here; the cuDNN runs above are compared by the
# resume check)
for i in 1 2; do
    "$BIN" --config L0_sanity --backend cuda precision.compute=bf16 runtime.attention=mma \
        train.steps=60 logger.frequency=1000 logger.run_dir="$T/again$i" >"$T/again$i.log" 2>&1
done
if [ -s "$T/again1/metrics.jsonl" ] &&
   [ "$(learned "$T/again1/metrics.jsonl")" = "$(learned "$T/again2/metrics.jsonl")" ]; then
    ok same_run_same_bits
else
    bad same_run_same_bits "$(diff <(learned "$T/again1/metrics.jsonl") \
        <(learned "$T/again2/metrics.jsonl") | head -4 | tr '\n' ' ')"
fi

# PCIe per step (metrics.jsonl host_link_bytes): the batch's tokens and the routing's indices,
# never weights, gradients or optimizer state; bound: 16 B a token + 32 B a token a layer + 64 KiB
if python3 - "$T/cuda_bf16/metrics.jsonl" "$T/cuda_bf16/config.cfg" <<'PY'
import json, re, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
steps = [s for s in steps if "loss" in s]
layers = int(re.search(r"num_layers\s*=\s*(\d+)", open(sys.argv[2]).read()).group(1))
for a, b in zip(steps, steps[1:]):
    tokens, moved = b["tokens"] - a["tokens"], b["host_link_bytes"]
    bound = tokens * (16 + 32 * layers) + 65536
    print("  step %d: %d bytes over PCIe for %d tokens (bound %d)"
          % (b["step"], moved, tokens, bound))
    assert 0 < moved <= bound, (b["step"], moved, bound)
PY
then
    ok pcie_bytes_per_step
else
    bad pcie_bytes_per_step "see the lines above"
fi

for t in test_lowp_cuda "test_fp8_gemm --no-bench" test_linear_lowp test_capacity_cuda; do
    if "$ROOT/$B/tests/gpu/"$t > "$T/${t%% *}.log" 2>&1 && tail -1 "$T/${t%% *}.log" | grep -q ' 0 failed$'; then
        ok "${t%% *}"
    else
        bad "${t%% *}" "$(grep -E '^not ok|FAIL' "$T/${t%% *}.log" | head -5)"
    fi
done
if "$ROOT/$B/tests/gpu/test_parallel_nccl" > "$T/parallel_nccl.log" 2>&1 &&
    tail -1 "$T/parallel_nccl.log" | grep -q ' 0 failed$'; then
    ok nccl_world_1_exchange_at_l1_rows
else
    bad nccl_world_1_exchange_at_l1_rows "$(grep -E '^not ok|FAIL' "$T/parallel_nccl.log" | head -5)"
fi
grep -E "rows of|self exchange" "$T/parallel_nccl.log"
if "$ROOT/$B/tests/test_local_ranks" cuda > "$T/local_ranks.log" 2>&1 &&
    tail -1 "$T/local_ranks.log" | grep -q ' 0 failed$'; then
    ok local_ranks_on_one_gpu
else
    bad local_ranks_on_one_gpu "$(grep -E '^not ok|FAIL' "$T/local_ranks.log" | head -5)"
fi
grep -E "^  " "$T/local_ranks.log" | cut -c1-200
# where the input order's teeth do not show: the order-off run alone with the process's hardware
# queues at the default 8 and at 32 (a difference names them as what ordered the copies)
if grep -q "^not ok test_without_input_order_fails" "$T/local_ranks.log"; then
    for conn in 8 32; do
        CUDA_DEVICE_MAX_CONNECTIONS=$conn MOE_TEST_DELAY_US=1000 MOE_TEST_SEED=5 \
            "$ROOT/$B/tests/test_local_ranks" cuda --order-off 1 >"$T/order_off_$conn.log" 2>&1
        echo "  without input order, CUDA_DEVICE_MAX_CONNECTIONS=$conn: exit $? (42: matched, 0: missed)"
    done
fi
[ -n "${MOE_GPU_LOG_DIR:-}" ] && cp "$T"/*.log "$T/ops_table.txt" "$MOE_GPU_LOG_DIR"/ 2>/dev/null
echo "gpu: $passed passed, $failed failed"
rm -rf "$T"
[ "$failed" -eq 0 ]

#!/bin/bash
# Where a training step's GPU time goes, by kind of work, for several runs in one table.
#
#   bench/trace_breakdown.sh BUILD_DIR RUN [RUN ...]
#
# A RUN is CONFIG[+key=value...], e.g. bench_8x7B_2L_genomic+precision.compute=fp8_block.
# Each run trains MOE_TRACE_STEPS steps (default 8) under build/tests/gpu/libkernel_trace.so,
# traced after the third optimizer step (MOE_TRACE_MARKER names the kernel that ends a step,
# default adamw_split_kernel) (start-up and warm-up stay out), and its kernels are
# put in kinds by name:
#   fp8 gemm   cuBLASLt FP8 GEMMs (nvjet qq*, e4m3)        bf16 gemm  every other GEMM
#   attention  cuDNN SDPA and moekit's attention kernels, RoPE
#   optimizer  AdamW, the gradient norm, the fp32 master splits, gradient accumulation
#   quantise   the FP8 / MXFP8 quantisers and transposes, the SwiGLU that writes E4M3
#   rows       the router, permute and combine (the expert exchange's local half)
#   exchange   NCCL kernels                                 other      norms, adds, embedding, loss, copies
# Prints ms a step per kind, the step, GPU busy share, and the final loss of the run (a
# breakdown of a run that diverged is no breakdown). MOE_TRACE_LOG_DIR keeps the reports.
set -u
B=${1:?usage: trace_breakdown.sh BUILD_DIR RUN [RUN ...]}; shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $B in /*) ;; *) B=$ROOT/$B ;; esac
LIB=$B/tests/gpu/libkernel_trace.so
[ -f "$LIB" ] || { echo "trace_breakdown: no $LIB (build with nvcc present)" >&2; exit 2; }
STEPS=${MOE_TRACE_STEPS:-8}
LOGS=${MOE_TRACE_LOG_DIR:-$(mktemp -d /tmp/moekit-trace-XXXXXX)}
mkdir -p "$LOGS"

# kind of one activity name (the report's last column)
classify='
function kind(n) {
    if (n ~ /nccl/) return "exchange"
    if (n ~ /nvjet_(sm[0-9]+_)?qq|e4m3|f8f6f4|_fp8_gemm|sm90_xmma_gemm_e4m3/) return "fp8 gemm"
    if (n ~ /nvjet|gemm|xmma|cutlass|Kernel2|splitKreduce/) return "bf16 gemm"
    if (n ~ /sdpa|fmha|flash|attn_|rope_kernel|cudnn/) return "attention"
    if (n ~ /adamw|sumsq|split_(to|from)_f32|masters_init|accumulate_kernel|dw_add_partials/) return "optimizer"
    if (n ~ /fp8blk|mxfp8|fp8_transpose|swiglu_prob_save8|swiglu_mxfp8|quant/) return "quantise"
    if (n ~ /router|permute|combine|segment_bias/) return "rows"
    return "other"
}'
kinds="fp8 gemm|bf16 gemm|attention|optimizer|quantise|rows|exchange|other"

printf "%-58s %8s %6s" "run" "step ms" "busy"
IFS='|' read -ra K <<< "$kinds"
for k in "${K[@]}"; do printf " %9s" "$k"; done
printf " %8s\n" "loss"
for run in "$@"; do
    IFS='+' read -ra parts <<< "$run"
    cfg=${parts[0]}; keys=("${parts[@]:1}")
    tag=$(echo "$run" | tr -c 'A-Za-z0-9_.\n' '_')
    out=$LOGS/$tag.trace log=$LOGS/$tag.log
    LD_PRELOAD=$LIB MOE_TRACE_AFTER=${MOE_TRACE_MARKER:-adamw_split_kernel}:3 MOE_TRACE_OUT=$out \
        "$B/bin/moe-train" --config "$cfg" --backend cuda train.steps="$STEPS" logger.frequency=1 \
        checkpoint.ckpt_dir= "${keys[@]}" > "$log" 2>&1
    rc=$?
    loss=$(sed -n 's/.*final loss \([0-9.]*\).*/\1/p' "$log" | tail -1)
    if [ $rc -ne 0 ] || [ ! -s "$out" ]; then
        printf "%-58s failed (exit %d): %s\n" "$run" "$rc" "$(tail -1 "$log")"
        continue
    fi
    awk -v run="$run" -v kinds="$kinds" -v loss="${loss:-?}" "$classify"'
        /^per marker:/ { step = $3; busy = $9; gsub(/[()%,]/, "", busy) }
        /^ *[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+%  / {
            name = $0; sub(/^ *[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+%  /, "", name)
            ms[kind(name)] += $1
        }
        END {
            printf "%-58.58s %8.2f %5s%%", run, step, busy
            n = split(kinds, K, "|")
            for (i = 1; i <= n; i++) printf " %9.2f", ms[K[i]]
            printf " %8s\n", loss
        }' "$out"
done
echo "reports: $LOGS"

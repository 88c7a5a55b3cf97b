#!/usr/bin/env python3
"""The Hugging Face side of moekit's benchmark: MixtralForCausalLM at the same
sizes, on the same genome tokens, timed the same way (tokens/s over the steps
after warm-up, peak GPU memory, seconds from process start to the first
finished step). AdamW (fused) over the weights as configured.

    python3 bench/hf_bench.py --setup eager_fp32 | grouped_bf16 | grouped_bf16_compiled |
                                      grouped_bf16_cudnn (SDPA's cuDNN backend first)
           [--layers 2 --vocab 32000 --seq 4096 --batch 2 --steps 12 --warmup 4 --accum 1]
           [--lr 3e-4 --lr-warmup 0 --min-lr-ratio 1]
Prints one JSON line.
"""
import argparse
import gzip
import json
import math
import os
import contextlib
import time

T0 = time.time()

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import MixtralConfig, MixtralForCausalLM


def genome_batches(path, batch, seq, n):
    seq_bytes = b"".join(l.strip() for l in gzip.open(path) if not l.startswith(b">")).upper()
    while len(seq_bytes) < seq + 1:  # a genome shorter than a sequence repeats (every row full)
        seq_bytes += seq_bytes
    out, pos = [], 0
    for _ in range(n):
        rows = []
        for _ in range(batch):
            if pos + seq + 1 > len(seq_bytes):
                pos = 0
            rows.append(list(seq_bytes[pos:pos + seq]))
            pos += seq
        out.append(torch.tensor(rows, dtype=torch.long))
    return out


def moekit_lr_factor(warmup, min_ratio, step, total):
    """lr / peak lr at a 0-based step, as moe-train's schedule_lr gives it."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = total - warmup
    if span <= 1:
        return 1.0
    progress = min(1.0, (step - warmup) / (span - 1))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--setup", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)  # steps left out of the timing
    # the learning rate as moe-train schedules it (trainer/train/schedule.c): linear warm-up
    # to --lr over --lr-warmup steps, then cosine to --min-lr-ratio x lr at the last step
    ap.add_argument("--accum", type=int, default=1)  # micro-batches an optimizer step
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lr-warmup", type=int, default=0)
    ap.add_argument("--min-lr-ratio", type=float, default=1.0)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                   "lambda_virus.fa.gz"))
    a = ap.parse_args()
    torch.manual_seed(42)
    impl = "eager" if a.setup.startswith("eager") else "grouped_mm"
    cfg = MixtralConfig(hidden_size=4096, num_hidden_layers=a.layers, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=128, num_local_experts=8,
                        num_experts_per_tok=2, intermediate_size=14336, vocab_size=a.vocab,
                        rope_theta=1e6, rms_norm_eps=1e-5,
                        max_position_embeddings=max(8192, a.seq),
                        tie_word_embeddings=False)
    dtype = torch.float32 if a.setup == "eager_fp32" else torch.bfloat16
    with torch.device("cuda"):
        model = MixtralForCausalLM._from_config(cfg, attn_implementation="sdpa",
                                                experts_implementation=impl, dtype=dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: moekit_lr_factor(a.lr_warmup, a.min_lr_ratio, step, a.steps))
    step_fn = model
    if a.setup.endswith("compiled"):
        step_fn = torch.compile(model)
    # "_cudnn": torch's SDPA tries its cuDNN backend first (its fastest on Hopper at long
    # sequences), else its own order
    # (a fresh context each step: one made by sdpa_kernel is entered once only)
    attn = contextlib.nullcontext
    if "cudnn" in a.setup:
        attn = lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                                    SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
                                   set_priority=True)
    batches = genome_batches(a.data, a.batch, a.seq, a.steps * a.accum)
    steps = [batches[i * a.accum:(i + 1) * a.accum] for i in range(a.steps)]
    torch.cuda.reset_peak_memory_stats()
    times, losses, first = [], [], None
    for i, micro in enumerate(steps):
        micro = [ids.cuda() for ids in micro]
        torch.cuda.synchronize()
        t = time.time()
        step_loss = torch.zeros((), device="cuda")
        for ids in micro:  # the step's loss: the mean over its micro-batches, as moe-train's
            with attn(), torch.autocast("cuda", dtype=torch.bfloat16,
                                        enabled=(dtype == torch.float32)):
                out = step_fn(input_ids=ids, labels=ids)
                (out.loss / a.accum).backward()
            step_loss += out.loss.detach().float() / a.accum  # no host wait inside the step
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.time() - t)
        losses.append(float(step_loss))
        if first is None:
            first = time.time() - T0
    steady = times[a.warmup:]
    tok = a.batch * a.seq * a.accum
    print(json.dumps({"impl": "hf_" + a.setup, "tokens_per_s": tok * len(steady) / sum(steady),
                      "step_ms": 1000 * sum(steady) / len(steady),
                      "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "first_step_s": first, "final_loss": losses[-1],
                      "losses": losses}))


if __name__ == "__main__":
    main()

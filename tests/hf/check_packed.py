#!/usr/bin/env python3
"""moekit's packed windows against transformers, on the same weights.

    python3 tests/hf/check_packed.py MODEL_DIR FASTA SEQ_LENGTH MOEKIT_EVAL_JSON

MODEL_DIR is a moekit final_model (or any Mixtral directory with moekit's byte
vocabulary), MOEKIT_EVAL_JSON the output of

    moe-train eval --checkpoint MODEL_DIR --fasta FASTA --seq-length T --pack packed --backend cpu

This script lays the FASTA's records end to end into windows of T + 1 tokens
exactly as moekit does (trainer/data/data.h: BOS, bases, EOS per record, a
window every T tokens, PAD only after the stream's end; a sequence starts at
every BOS and after every EOS; targets -1 on PAD, across sequences and on
bases other than ACGT), then scores every window with
MixtralForCausalLM.from_pretrained(MODEL_DIR) in float64, twice:

  packed: the whole window at once with position_ids restarting at each
          sequence and a 4-D block-diagonal causal attention mask (what
          flash attention's cu_seqlens does);
  alone:  every sequence of every window as its own input, positions 0..n-1.

It prints the largest logit difference between the two, both mean losses and
moekit's lm_loss, and exits 1 when packed and alone differ by more than 1e-4
in the logits or moekit differs from transformers by more than 2e-5 relative
(moekit's CPU reference is fp32). Not ~1e-12: transformers' RMSNorm rounds
the residual stream to float32, so float64 sums taken in another order flip
its last bit now and then (1.1e-6 measured); a mask that lets one sequence
see another moves logits by orders of magnitude more.
"""
import gzip
import json
import sys

import torch
from transformers import MixtralForCausalLM

EOS, PAD, BOS = 0, 1, 2
ACGT = {ord(c) for c in "ACGT"}


def records(path):
    """The FASTA's records as moekit's tokenizer reads them (data.h)."""
    opener = gzip.open if path.endswith(".gz") else open
    recs, cur = [], None
    with opener(path, "rb") as f:
        for line in f:
            line = line.rstrip(b"\r\n")
            if line.startswith(b">"):
                if cur is not None:
                    recs.append(cur)
                cur = []
            elif line.startswith(b";") or not line.strip():
                continue
            else:
                for c in line:
                    if c in b" \t-*":
                        continue
                    cur.append(3 if c < 4 else c - 32 if ord("a") <= c <= ord("z") else c)
    if cur is not None:
        recs.append(cur)
    return [[BOS] + r + [EOS] for r in recs]


def window_count(n, T):
    """layout_window_count(n, T, T) of trainer/data/layout.c."""
    W = T + 1
    if n < 2:
        return 0
    full = (n - W) // T + 1 if n >= W else 0
    last = (full - 1) * T + T if full else 0
    if last < n - 1 and full * T <= n - 2:
        full += 1
    return full


def starts(prev, cur):
    return cur == BOS or prev == EOS


def windows(stream, T):
    for k in range(window_count(len(stream), T)):
        w = stream[k * T:k * T + T + 1]
        w = w + [PAD] * (T + 1 - len(w))
        inp = w[:T]
        tgt = []
        for t in range(T):
            nx = w[t + 1]
            masked = nx == PAD or starts(w[t], nx) or (nx >= 4 and nx not in ACGT)
            tgt.append(-100 if masked else nx)
        seg = [0]
        for t in range(1, T):
            if starts(inp[t - 1], inp[t]):
                seg.append(t)
        yield inp, tgt, seg


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    model_dir, fasta, T, moekit_json = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    # eager experts: the reference runs in float64, which grouped_mm lacks
    model = MixtralForCausalLM.from_pretrained(model_dir, dtype=torch.float64,
                                               attn_implementation="eager",
                                               experts_implementation="eager")
    model.eval()
    stream = [t for r in records(fasta) for t in r]
    loss_sum = {"packed": 0.0, "alone": 0.0}
    counted, worst = 0, 0.0
    neg = torch.finfo(torch.float64).min
    with torch.no_grad():
        for inp, tgt, seg in windows(stream, T):
            ids = torch.tensor([inp])
            bounds = seg + [T]
            pos = torch.zeros(1, T, dtype=torch.long)
            mask = torch.full((1, 1, T, T), neg, dtype=torch.float64)
            for a, z in zip(bounds, bounds[1:]):
                pos[0, a:z] = torch.arange(z - a)
                mask[0, 0, a:z, a:z] = torch.triu(torch.full((z - a, z - a), neg,
                                                             dtype=torch.float64), 1)
            # no router logits: transformers' load-balancing loss takes only a 2-D mask
            packed = model(input_ids=ids, attention_mask=mask, position_ids=pos,
                           output_router_logits=False).logits[0]
            alone = torch.cat([model(input_ids=ids[:, a:z], output_router_logits=False).logits[0]
                               for a, z in zip(bounds, bounds[1:])])
            worst = max(worst, (packed - alone).abs().max().item())
            y = torch.tensor(tgt)
            for name, logits in (("packed", packed), ("alone", alone)):
                loss_sum[name] += torch.nn.functional.cross_entropy(
                    logits, y, ignore_index=-100, reduction="sum").item()
            counted += int((y != -100).sum())
    moekit = json.load(open(moekit_json))
    hf = loss_sum["packed"] / counted
    rel = abs(moekit["lm_loss"] - hf) / hf
    print(json.dumps({"windows": window_count(len(stream), T), "targets": counted,
                      "hf_packed_loss": hf, "hf_alone_loss": loss_sum["alone"] / counted,
                      "moekit_lm_loss": moekit["lm_loss"], "moekit_targets": moekit["tokens"],
                      "packed_vs_alone_max_logit_diff": worst, "moekit_vs_hf_rel": rel}))
    ok = worst <= 1e-4 and rel <= 2e-5 and moekit["tokens"] == counted and \
        moekit.get("windows") == "packed"
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Load a moekit model directory with transformers and score tokens.

    python3 tests/hf/check_moekit_checkpoint.py MODEL_DIR TOKENS_FILE
    python3 tests/hf/check_moekit_checkpoint.py MODEL_DIR --dna SEQ[,SEQ...] --out-tokens FILE

Prints one JSON object like `moe-train eval` does (lm_loss, aux_loss), computed
by MixtralForCausalLM.from_pretrained(MODEL_DIR) in float64, so the two can be
compared on the same weights and tokens. With --dna, the tokens come from
AutoTokenizer.from_pretrained(MODEL_DIR) encoding the sequences (all of one
length), which must give moekit's ids (the byte value, lower case read as
upper case, bytes 0-3 as <unk> = 3) and decode back; they are written to FILE
in moe-train eval's format.
"""
import json
import sys

import torch
from transformers import AutoTokenizer, MixtralForCausalLM


def moekit_ids(seq):
    """moekit's byte tokenizer (trainer/data/tokenizer.c)."""
    out = []
    for c in seq.encode("latin-1"):
        out.append(3 if c < 4 else c - 32 if ord("a") <= c <= ord("z") else c)
    return out


def tokens_from_tokenizer(model_dir, seqs, out_path):
    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = []
    for s in seqs:
        ids = tok(s, add_special_tokens=True)["input_ids"]
        if ids != moekit_ids(s):
            raise SystemExit(f"{model_dir}: the tokenizer gives {ids[:12]}... for {s[:12]}..., "
                             f"moekit {moekit_ids(s)[:12]}...")
        back = tok.decode(ids)
        if back != s.upper():
            raise SystemExit(f"{model_dir}: decode gives {back[:20]!r}, expected {s.upper()[:20]!r}")
        rows.append(ids)
    special = {"eos": tok.eos_token_id, "pad": tok.pad_token_id, "bos": tok.bos_token_id,
               "unk": tok.unk_token_id}
    if special != {"eos": 0, "pad": 1, "bos": 2, "unk": 3}:
        raise SystemExit(f"{model_dir}: special token ids {special}")
    with open(out_path, "w") as f:
        for r in rows:
            f.write(" ".join(map(str, r)) + "\n")
    return rows


def main():
    ckpt = sys.argv[1]
    if len(sys.argv) == 6 and sys.argv[2] == "--dna" and sys.argv[4] == "--out-tokens":
        rows = tokens_from_tokenizer(ckpt, sys.argv[3].split(","), sys.argv[5])
    else:
        rows = [[int(t) for t in line.split()] for line in open(sys.argv[2]) if line.strip()]
    # eager kernels: the reference runs in float64, which grouped_mm lacks
    model, info = MixtralForCausalLM.from_pretrained(ckpt, output_loading_info=True,
                                                     dtype=torch.float32,
                                                     attn_implementation="eager",
                                                     experts_implementation="eager")
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"{ckpt}: transformers reported loading problems: {problems}")
    model = model.double().eval()
    ids = torch.tensor(rows)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, output_router_logits=True)
    aux = float(out.aux_loss)
    lm = float(out.loss) - model.config.router_aux_loss_coef * aux
    print(json.dumps({"lm_loss": lm, "aux_loss": aux, "tokens": ids.numel() - len(rows),
                      "sequences": len(rows), "backend": "transformers"}))


if __name__ == "__main__":
    main()

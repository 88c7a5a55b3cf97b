#!/usr/bin/env python3
"""Load a moekit checkpoint with transformers and score a token file.

    python3 tests/hf/check_moekit_checkpoint.py CKPT_DIR TOKENS_FILE

Prints one JSON object like `moe-train eval` does (lm_loss, aux_loss), computed
by MixtralForCausalLM.from_pretrained(CKPT_DIR) in float64, so the two can be
compared on the same weights and tokens.
"""
import json
import sys

import torch
from transformers import MixtralForCausalLM


def main():
    ckpt, tokfile = sys.argv[1], sys.argv[2]
    # eager kernels: the reference runs in float64, which grouped_mm lacks
    model, info = MixtralForCausalLM.from_pretrained(ckpt, output_loading_info=True,
                                                     dtype=torch.float32,
                                                     attn_implementation="eager",
                                                     experts_implementation="eager")
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"{ckpt}: transformers reported loading problems: {problems}")
    model = model.double().eval()
    rows = [[int(t) for t in line.split()] for line in open(tokfile) if line.strip()]
    ids = torch.tensor(rows)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, output_router_logits=True)
    aux = float(out.aux_loss)
    lm = float(out.loss) - model.config.router_aux_loss_coef * aux
    print(json.dumps({"lm_loss": lm, "aux_loss": aux, "tokens": ids.numel() - len(rows),
                      "sequences": len(rows), "backend": "transformers"}))


if __name__ == "__main__":
    main()

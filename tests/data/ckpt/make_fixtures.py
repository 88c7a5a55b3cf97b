#!/usr/bin/env python3
"""Make test_ckpt's fixtures with the reference Python libraries, and check
that what moekit writes loads there.

    python3 make_fixtures.py OUT_DIR [MOEKIT_EXPORT_DIR]

OUT_DIR receives
  st_python.safetensors  written by safetensors.torch.save_file
  hf_tiny/               a tiny MixtralForCausalLM saved by transformers'
                         save_pretrained, sharded, plus expected.json: every
                         tensor's shape, sum and first values as safetensors
                         reads them back
  config_tf5.json        hf_tiny's config.json
With MOEKIT_EXPORT_DIR (what test_ckpt leaves there when run with
MOE_CKPT_EXPORT_DIR set), it loads moekit's st_moekit.safetensors with
safetensors and hf_moekit/ with MixtralForCausalLM.from_pretrained, and
fails on any difference.

config_tf4.json is Mixtral-8x7B-v0.1's published config.json (transformers
4.36), copied by hand. Needs torch, safetensors and transformers 5.x."""
import inspect
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import MixtralConfig, MixtralForCausalLM


def value(name, numel):
    """test_ckpt.c's fixture_value: k/64 with |k| <= 48, exact in fp32/bf16/fp16."""
    h = sum(name.encode()) % 97
    i = torch.arange(numel, dtype=torch.int64)
    return (((i * 7 + h) % 97) - 48).to(torch.float32) / 64.0


def make_safetensors(out):
    tensors = {
        "f32": value("f32", 6).reshape(2, 3),
        "bf16": value("bf16", 12).reshape(3, 4).to(torch.bfloat16),
        "f16": value("f16", 5).to(torch.float16),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "i64": torch.arange(4, dtype=torch.int64),
    }
    save_file(tensors, os.path.join(out, "st_python.safetensors"),
              metadata={"format": "pt", "producer": "safetensors-python"})


def tiny_config():
    kw = dict(vocab_size=256, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
              max_position_embeddings=64, rms_norm_eps=1e-5, router_aux_loss_coef=0.02,
              initializer_range=0.02, bos_token_id=2, eos_token_id=0, pad_token_id=1,
              tie_word_embeddings=False)
    if "rope_parameters" in inspect.signature(MixtralConfig.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    else:
        kw["rope_theta"] = 10000.0
    return MixtralConfig(**kw)


def read_shards(d):
    tensors = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as sf:
                for k in sf.keys():
                    tensors[k] = sf.get_tensor(k)
    return tensors


def make_hf_tiny(out):
    model = MixtralForCausalLM(tiny_config()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(value(name, p.numel()).reshape(p.shape))
    d = os.path.join(out, "hf_tiny")
    model.save_pretrained(d, max_shard_size="40KB")
    expected = {}
    for k, t in sorted(read_shards(d).items()):
        x = t.float()
        expected[k] = {"shape": list(x.shape), "dtype": str(t.dtype), "sum": float(x.double().sum()),
                       "head": [float(v) for v in x.flatten()[:4]]}
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "tensors": expected}, f, indent=1)
        f.write("\n")
    shutil.copy(os.path.join(d, "config.json"), os.path.join(out, "config_tf5.json"))
    print("hf_tiny:", sorted(os.listdir(d)))
    print("hf_tiny tensor names (first 6):", list(expected)[:6])


def check(cond, what):
    if not cond:
        raise SystemExit("MISMATCH: " + what)


def check_moekit_safetensors(path):
    sd = load_file(path)
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    check(meta == {"format": "pt", "writer": "moekit"}, f"metadata {meta}")
    v = value("mixed", 12)
    check(torch.equal(sd["f32"], v.reshape(3, 4)), "f32")
    check(sd["bf16_conv"].dtype == torch.bfloat16 and torch.equal(sd["bf16_conv"].float(), v.reshape(4, 3)), "bf16_conv")
    check(sd["f16_conv"].dtype == torch.float16 and torch.equal(sd["f16_conv"].float(), v), "f16_conv")
    check(sd["bf16_raw"].float().tolist() == [1.0, -0.75, 3.140625, 0.0], f"bf16_raw {sd['bf16_raw']}")
    check(sd["i32"].dtype == torch.int32 and sd["i32"].tolist() == [7, -8, 9], "i32")
    check(sd["scalar"].shape == () and sd["scalar"].item() == -1.25, "scalar")
    check(sd["empty"].shape == (0, 3) and sd["empty"].dtype == torch.bfloat16, "empty")
    print("st_moekit.safetensors: all 7 tensors and the metadata match")


def check_moekit_hf_dir(d):
    model, info = MixtralForCausalLM.from_pretrained(d, output_loading_info=True)
    print("loading info:", {k: v for k, v in info.items()})
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        check(not info.get(k), f"{k}: {info.get(k)}")
    c = model.config
    rope = getattr(c, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(c, "rope_theta", None))
    got = (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
           c.num_key_value_heads, c.head_dim, c.num_local_experts, c.num_experts_per_tok, c.vocab_size,
           c.max_position_embeddings, theta, c.rms_norm_eps, c.router_aux_loss_coef, c.tie_word_embeddings,
           c.sliding_window, c.bos_token_id, c.eos_token_id, c.pad_token_id)
    want = (16, 32, 2, 4, 2, 4, 4, 2, 256, 64, 10000.0, 1e-5, 0.02, False, None, 2, 0, 1)
    check(got == want, f"config {got} != {want}")
    orig = load_file(os.path.join(d, "model.safetensors"))
    for k, t in orig.items():
        check(torch.equal(t.flatten(), value(k, t.numel())), f"value formula {k}")
    # Load -> save must give back the same hub-named tensors.
    tmp = tempfile.mkdtemp()
    model.save_pretrained(tmp)
    saved = read_shards(tmp)
    check(set(saved) == set(orig), f"names differ: {sorted(set(saved) ^ set(orig))[:8]}")
    for k in orig:
        check(torch.equal(saved[k], orig[k]), f"tensor {k} changed in load/save")
    with torch.no_grad():
        out = model(torch.tensor([[2, 65, 67, 71, 84, 0]]))
    check(torch.isfinite(out.logits).all().item(), "non-finite logits")
    print(f"hf_moekit: from_pretrained OK ({len(orig)} tensors, config matches, load/save identical, "
          f"logits {tuple(out.logits.shape)} finite)")


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    print("torch", torch.__version__, "transformers", transformers.__version__)
    make_safetensors(out)
    make_hf_tiny(out)
    if len(sys.argv) == 3:
        check_moekit_safetensors(os.path.join(sys.argv[2], "st_moekit.safetensors"))
        check_moekit_hf_dir(os.path.join(sys.argv[2], "hf_moekit"))
    print("done")


if __name__ == "__main__":
    main()

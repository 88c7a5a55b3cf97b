#!/usr/bin/env python3
"""Write the Hugging Face reference fixtures that moekit's CPU tests compare against.

For each case: a small random Mixtral checkpoint in the Hub naming
(model.safetensors + config.json), a token file (one sequence per line), and
reference.safetensors with what transformers computes in float64 for those
weights and tokens: logits, the LM loss, the aux loss and the gradient of
(lm_loss + router_aux_loss_coef * aux_loss) for every parameter.

Run where torch and transformers are installed:
    python3 tests/hf/make_fixtures.py tests/fixtures/hf
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import MixtralConfig, MixtralForCausalLM

CASES = {
    # GQA (4 query heads over 2 kv heads), top-2 of 4 experts, aux loss on
    "gqa_top2": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, num_local_experts=4,
                     num_experts_per_tok=2, intermediate_size=48, vocab_size=64,
                     rope_theta=10000.0, rms_norm_eps=1e-5, router_aux_loss_coef=0.02,
                     batch=2, seq=17),
    # the nucleotide vocabulary, 3 layers, top-2 of 8 (some experts idle), GQA 6/2
    "genomic_top2of8": dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                            num_key_value_heads=2, head_dim=8, num_local_experts=8,
                            num_experts_per_tok=2, intermediate_size=40, vocab_size=256,
                            rope_theta=1e6, rms_norm_eps=1e-6, router_aux_loss_coef=0.1,
                            batch=1, seq=33),
}


def legacy_state(model, cfg):
    """The model's parameters under the Hub's Mixtral names (per-expert w1/w2/w3),
    whatever module layout this transformers version uses internally."""
    out = {}
    for name, t in model.state_dict().items():
        t = t.detach()
        if ".mlp.experts.gate_up_proj" in name or ".block_sparse_moe.experts.gate_up_proj" in name:
            prefix = name.split(".experts.")[0].replace(".mlp", ".block_sparse_moe")
            inter = cfg.intermediate_size
            for e in range(t.shape[0]):
                out[f"{prefix}.experts.{e}.w1.weight"] = t[e, :inter].clone()
                out[f"{prefix}.experts.{e}.w3.weight"] = t[e, inter:].clone()
        elif ".experts.down_proj" in name:
            prefix = name.split(".experts.")[0].replace(".mlp", ".block_sparse_moe")
            for e in range(t.shape[0]):
                out[f"{prefix}.experts.{e}.w2.weight"] = t[e].clone()
        else:
            out[name.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = t.clone()
    return out


def legacy_grads(model, cfg):
    """Gradients under the Hub names, split the same way as the weights."""
    class Grads:
        def state_dict(self):
            return {n: (p.grad if p.grad is not None else torch.zeros_like(p))
                    for n, p in model.named_parameters()}
    return legacy_state(Grads(), cfg)


def topk_margin(model, input_ids, k):
    """Smallest gap between the k-th and (k+1)-th router probability over all
    layers and tokens: a tiny gap would let float rounding flip the routing."""
    with torch.no_grad():
        out = model(input_ids=input_ids, output_router_logits=True)
    worst = 1.0
    for logits in out.router_logits:
        p = torch.softmax(logits.double(), dim=-1)
        s = torch.sort(p, dim=-1, descending=True).values
        if s.shape[-1] > k:
            worst = min(worst, float((s[:, k - 1] - s[:, k]).min()))
    return worst


def make_case(outdir, name, spec):
    spec = dict(spec)
    batch, seq = spec.pop("batch"), spec.pop("seq")
    cfg = MixtralConfig(**spec, max_position_embeddings=4096, tie_word_embeddings=False,
                        output_router_logits=True, bos_token_id=2, eos_token_id=0,
                        pad_token_id=1, initializer_range=0.02)
    # the plainest implementations: reference numbers, not speed
    for attr, val in (("_attn_implementation", "eager"), ("_experts_implementation", "eager")):
        try:
            setattr(cfg, attr, val)
        except Exception:
            pass
    for seed in range(100):
        torch.manual_seed(1000 + seed)
        model = MixtralForCausalLM(cfg)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if p.dim() == 1:
                    p.copy_(1 + 0.2 * torch.randn_like(p))
                else:
                    p.copy_(0.15 * torch.randn_like(p))
        input_ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        model64 = model.double()
        margin = topk_margin(model64, input_ids, cfg.num_experts_per_tok)
        if margin > 1e-4:
            break
    else:
        raise SystemExit(f"{name}: no seed gave a safe top-k margin")

    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    # weights are stored in fp32: the float64 model holds exactly these values
    model = model64.float()
    state = legacy_state(model, cfg)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(d, "model.safetensors"))
    cfg.save_pretrained(d)
    model = model.double()

    # transformers must load the Hub-named file back to the same weights
    loaded, info = MixtralForCausalLM.from_pretrained(d, output_loading_info=True,
                                                      dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise SystemExit(f"{name}: transformers reported loading problems: {bad}")
    for k, v in legacy_state(loaded, cfg).items():
        if not torch.equal(v.float(), state[k].float()):
            raise SystemExit(f"{name}: {k} did not round-trip through from_pretrained")

    import tempfile
    from safetensors import safe_open
    with tempfile.TemporaryDirectory() as tmp:
        model.float().save_pretrained(tmp)
        native = []
        for fn in sorted(os.listdir(tmp)):
            if fn.endswith(".safetensors"):
                with safe_open(os.path.join(tmp, fn), "pt") as f:
                    native += list(f.keys())
    model = model.double()
    model.zero_grad()
    out = model(input_ids=input_ids, labels=input_ids, output_router_logits=True)
    # recompute the parts: out.loss = lm_loss + coef * aux_loss
    aux = out.aux_loss.double()
    lm = out.loss - cfg.router_aux_loss_coef * aux
    out.loss.backward()
    grads = legacy_grads(model, cfg)

    ref = {"logits": out.logits.detach().float().contiguous(),
           "lm_loss": lm.detach().reshape(1).float(),
           "aux_loss": aux.detach().reshape(1).float(),
           "total_loss": out.loss.detach().reshape(1).float()}
    for k, g in grads.items():
        ref["grad." + k] = g.float().contiguous()
    save_file(ref, os.path.join(d, "reference.safetensors"))
    with open(os.path.join(d, "tokens.txt"), "w") as f:
        for row in input_ids.tolist():
            f.write(" ".join(str(t) for t in row) + "\n")
    meta = {"case": name, "batch": batch, "seq": seq, "topk_margin": margin,
            "lm_loss": float(lm), "aux_loss": float(aux), "total_loss": float(out.loss),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "computed_in": "float64 on CPU",
            "internal_parameter_names": [n for n, _ in model.named_parameters()][:16],
            "save_pretrained_names": sorted(native)[:24]}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: lm_loss {float(lm):.6f} aux {float(aux):.6f} margin {margin:.2e}")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/hf"
    torch.set_default_dtype(torch.float32)
    for name, spec in CASES.items():
        make_case(outdir, name, spec)


if __name__ == "__main__":
    main()

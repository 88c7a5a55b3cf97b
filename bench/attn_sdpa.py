"""torch SDPA's causal GQA attention, forward + backward, at the shapes
tests/gpu/bench_attention times moekit's at: 32 query / 8 key heads of 128,
bf16, batch 1, once per SDPA backend (cuDNN, flash). Events around each
repetition after a warm-up, median of 5; TFLOP/s with bench_attention's count
(3 x the causal forward's 2 * 2 * S^2 * HD / 2 a head).
  python3 bench/attn_sdpa.py [S ...]        (default 8192 32768)
GQA goes in natively (enable_gqa); where a backend refuses it, K and V are
expanded to 32 heads first, outside the timed region, and the row says so."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

NH, NKV, HD, REPS = 32, 8, 128, 5


def time_backend(backend, S, gqa):
    torch.manual_seed(S)
    q = torch.randn(1, NH, S, HD, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    kv_heads = NKV if gqa else NH
    k = torch.randn(1, kv_heads, S, HD, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, kv_heads, S, HD, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(1, NH, S, HD, device="cuda", dtype=torch.bfloat16)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    fwd, bwd = [], []
    with sdpa_kernel([backend]):
        for r in range(REPS + 1):
            ev[0].record()
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            ev[1].record()
            o.backward(do)
            ev[2].record()
            torch.cuda.synchronize()
            q.grad = k.grad = v.grad = None
            if r:
                fwd.append(ev[0].elapsed_time(ev[1]))
                bwd.append(ev[1].elapsed_time(ev[2]))
    both = sorted(a + b for a, b in zip(fwd, bwd))
    return sorted(fwd)[REPS // 2], sorted(bwd)[REPS // 2], both[REPS // 2]


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [8192, 32768]
    print(f"{'S':<8} {'backend':<16} {'fwd ms':>10} {'bwd ms':>10} {'fwd+bwd ms':>10} {'TFLOP/s':>12}")
    for S in sizes:
        flop = 3 * 4.0 * NH * S * S / 2 * HD
        for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            row = None
            for gqa in (True, False):
                try:
                    row = time_backend(backend, S, gqa) + (gqa,)
                    break
                except RuntimeError as e:
                    err = str(e).splitlines()[0][:120]
                    torch.cuda.empty_cache()
            if row is None:
                print(f"{S:<8} {name:<16} failed: {err}")
                continue
            f, b, t, gqa = row
            label = name + ("" if gqa else " (kv x4)")
            print(f"{S:<8} {label:<16} {f:10.3f} {b:10.3f} {t:10.3f} {flop / t / 1e9:12.1f}", flush=True)


if __name__ == "__main__":
    main()

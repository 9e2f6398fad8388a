"""PyTorch's scaled_dot_product_attention (the flash backend where it
takes the configuration) next to dlcc's attention, for tests/gpu/check.sh.

    python3 torch_attn.py --dlcc FILE

FILE holds layer_bench attention's lines ("attention MODE N=.. H=.. S=..
d=.. causal=C  fwd X us Y TFLOP/s  bwd X us Y TFLOP/s").  For each, times
PyTorch's forward and backward (torch.autograd.grad of the result with
respect to q, k and v) on the same shapes, [N, H, S, d], GPU time by CUDA
events (a warm-up, then the median of five timings of back-to-back calls),
and prints both with dlcc's throughput over PyTorch's; then the issue's
target (dlcc's forward at least 0.8x PyTorch's at S=2048 in f16).  FLOPs
as layer_bench counts them (FlashAttention's convention).  Exits 0 when
torch cannot be imported or sees no GPU (it says so): the comparison is
optional, dlcc's own numbers are not."""
import argparse
import re
import sys

from torch_bench import gpu_ms  # beside this file: events around back-to-back calls

LINE = re.compile(r"^attention (\w+) +N=(\d+) H=(\d+) S=(\d+) d=(\d+) causal=(\d)"
                  r"(?:  fwd +([\d.]+) us +[\d.]+ TFLOP/s)?(?:  bwd +([\d.]+) us +[\d.]+ TFLOP/s)?")
DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def torch_times(torch, mode, n, h, s, d, causal):
    """PyTorch's forward and backward milliseconds, and the backend used."""
    F = torch.nn.functional
    dt = getattr(torch, DTYPES[mode])
    q, k, v = (torch.randn(n, h, s, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    dy = torch.randn(n, h, s, d, device="cuda", dtype=dt)
    backend = "flash"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])
        with ctx():
            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    except Exception:  # no flash kernel for this configuration (f32): the default choice
        import contextlib
        ctx, backend = contextlib.nullcontext, "default"
    with ctx():
        fwd = gpu_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        bwd = gpu_ms(torch, lambda: torch.autograd.grad(o, (q, k, v), dy, retain_graph=True))
    return fwd, bwd, backend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlcc", required=True)
    a = ap.parse_args()
    rows = [m.groups() for m in map(LINE.match, open(a.dlcc)) if m]
    try:
        import torch
    except Exception as e:  # any failure to import is "no PyTorch here"
        print("torch: n/a (import torch failed: %s)" % e)
        return 0
    if not torch.cuda.is_available():
        print("torch: n/a (no GPU visible to PyTorch)")
        return 0
    print("== attention: dlcc next to PyTorch %s's scaled_dot_product_attention (TFLOP/s, GPU time)" %
          torch.__version__)
    target = []
    for mode, n, h, s, d, causal, dfwd, dbwd in rows:
        n, h, s, d, causal = int(n), int(h), int(s), int(d), int(causal)
        flops = 4.0 * n * h * s * s * d / (2 if causal else 1)
        try:
            tfwd, tbwd, backend = torch_times(torch, mode, n, h, s, d, causal)
        except Exception as e:
            print("attention %-4s N=%d H=%d S=%d d=%d causal=%d  torch failed: %s" % (mode, n, h, s, d, causal, e))
            continue
        cells = []
        for name, mine, theirs, f in (("fwd", dfwd, tfwd, flops), ("bwd", dbwd, tbwd, 2.5 * flops)):
            torch_tf = f / (theirs * 1e-3) * 1e-12
            if mine is None:
                cells.append("%s torch %6.1f TFLOP/s, dlcc n/a" % (name, torch_tf))
                continue
            dlcc_tf = f / (float(mine) * 1e-6) * 1e-12
            cells.append("%s torch %6.1f dlcc %6.1f TFLOP/s (%.2fx)" % (name, torch_tf, dlcc_tf, dlcc_tf / torch_tf))
            if name == "fwd" and mode == "f16" and s == 2048:
                target.append(dlcc_tf / torch_tf)
        print("attention %-4s N=%d H=%d S=%d d=%d causal=%d [%s]  %s" %
              (mode, n, h, s, d, causal, backend, "  ".join(cells)))
        sys.stdout.flush()
    if target:
        worst = min(target)
        print("target attention f16 S=2048 forward >= 0.8x PyTorch's: %s (worst %.2fx)" %
              ("met" if worst >= 0.8 else "MISSED", worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())

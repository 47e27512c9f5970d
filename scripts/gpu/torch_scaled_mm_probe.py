#!/usr/bin/env python3
"""torch_scaled_mm_probe.py: the per-tensor FP8 GEMMs that cuBLASLt refused train_gpt on the
H200 (docs/gpu-results.md), asked through PyTorch's torch._scaled_mm instead: the same shapes
(GPT-2 124M's qkv linear at B 8 x T 1024, and a small one), E4M3 x E4M3 and the backward's
E5M2 gradient x E4M3, with and without a bf16 bias and fast accumulation. One line per case,
"ok" with its TFLOP/s or the error PyTorch gives, and bf16 torch.matmul of the same shape for
scale; --json writes them. PyTorch calls cuBLASLt itself, so a case that runs here and not in
train_gpt points at how train_gpt builds its descriptors, and one refused in both at the
library or the GPU. Run by scripts/gpu/gpu_check_fp8.sh (no test: it needs a GPU).

  python3 scripts/gpu/torch_scaled_mm_probe.py [--json FILE] [--iters 20]
"""
import argparse
import json
import sys


def scaled_mm(torch, a, b, bias, fast):
    """torch._scaled_mm across PyTorch versions (2.1-2.3 return (out, amax); later, out)."""
    one = torch.ones((), device=a.device, dtype=torch.float32)
    kwargs = dict(out_dtype=torch.bfloat16, scale_a=one, scale_b=one, use_fast_accum=fast)
    if bias is not None:
        kwargs["bias"] = bias
    out = torch._scaled_mm(a, b, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def timed(torch, fn, iters):
    """Milliseconds per call of fn, after a warm-up, by CUDA events."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def cases(torch):
    """(name, rows, cols, inner, A's format): D(rows, cols) = A(rows, inner) B(inner, cols)."""
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    return [("forward 8192x2304x768 e4m3 x e4m3", 8192, 2304, 768, e4),
            ("dgrad 8192x768x2304 e5m2 x e4m3", 8192, 768, 2304, e5),
            ("forward 32x48x64 e4m3 x e4m3", 32, 48, 64, e4)]


def run_case(torch, name, m, n, k, a_fmt, bias_on, fast, iters):
    a = torch.randn(m, k, device="cuda").to(a_fmt)
    # B column-major (its transpose contiguous), the layout _scaled_mm requires.
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias_on else None
    label = f"{name}, bias {'on' if bias_on else 'off'}, fast accumulation {'on' if fast else 'off'}"
    try:
        ms = timed(torch, lambda: scaled_mm(torch, a, b, bias, fast), iters)
        return {"case": label, "ran": True, "tflops": 2.0 * m * n * k / ms / 1e9}
    except Exception as e:  # noqa: BLE001 (the refusal is what we want to see, whatever it is)
        return {"case": label, "ran": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    out = {"torch": None, "device": None, "results": []}
    try:
        import torch
    except ImportError:
        print("torch_scaled_mm_probe: no torch")
        out["skipped"] = "no torch"
    else:
        out["torch"] = torch.__version__
        if not torch.cuda.is_available():
            out["skipped"] = "no CUDA device"
        elif not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            out["skipped"] = f"torch {torch.__version__} has no _scaled_mm"
        else:
            out["device"] = torch.cuda.get_device_name(0)
            for name, m, n, k, a_fmt in cases(torch):
                for bias_on in (False, True):
                    for fast in (False, True):
                        out["results"].append(run_case(torch, name, m, n, k, a_fmt, bias_on, fast,
                                                       args.iters))
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
                ms = timed(torch, lambda: x @ w, args.iters)
                out["results"].append({"case": f"{name.split(' e')[0]} bf16 torch.matmul",
                                       "ran": True, "tflops": 2.0 * m * n * k / ms / 1e9})
    if "skipped" in out:
        print(f"torch_scaled_mm_probe: skipped: {out['skipped']}")
    for r in out["results"]:
        said = f"ok, {r['tflops']:.1f} TFLOP/s" if r["ran"] else f"REFUSED: {r['error']}"
        print(f"torch {r['case']}: {said}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

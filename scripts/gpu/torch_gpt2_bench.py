#!/usr/bin/env python3
"""GPT-2 training step in plain PyTorch: the baseline that `train_gpt bench` is read against.

The model is written out here (no transformers import) so that it is the same network as
train_gpt's: token + position embeddings, n_layer pre-LN blocks (LayerNorm, one fused QKV
linear, causal attention through F.scaled_dot_product_attention(is_causal=True), an output
projection; LayerNorm, a 4C linear, GELU with the tanh approximation, a C linear), a final
LayerNorm and an lm_head tied to the token embedding. The vocabulary is padded to a multiple
of 128 (50257 -> 50304) as src/model/model.h's pad_vocab does; the loss is the cross-entropy over
the real V columns only.

One step = zero_grad, forward + loss under bf16 autocast (fp32 master weights, as train_gpt's
bf16 mode), backward, the global gradient norm with clipping at 1.0 (train_gpt computes the
norm every step), AdamW (fused when this torch has it; lr 1e-4, betas 0.9/0.95, weight decay
0.1 on the 2-D weights, as train_gpt's defaults). Tokens and targets are random in [0, V).

Timing: the host clock around each step after a device synchronize, as src/cli/bench.cpp does;
warm-up steps are left out, the median of the timed steps is reported. The model is timed
eager first, then under torch.compile (whose compile time, the first compiled steps, is
reported separately), so an eager number exists even if compiling fails or is cut off.

MFU uses src/model/model.cpp's flops_per_token, the same formula as train_gpt bench:
  6 * (L * 12 * C^2 + Vp * C) + 3 * (L * 2 * 2 * T * C)  FLOPs per token
(weights: 2 FLOPs per multiply-add times 3 for forward and two backward GEMMs, the tied
lm_head over the padded vocabulary, the embedding lookup not counted; attention scores and
weighted sum counted in full, not halved for causality), over src/training/gpu_peak.cpp's peak:
989 TFLOP/s dense bf16 on an H100/H200, 312 on an A100, none otherwise.

Usage:
  python3 scripts/gpu/torch_gpt2_bench.py --device cuda --batch 8 --seq 1024 --json out.json
  python3 scripts/gpu/torch_gpt2_bench.py --device cpu --tiny          (smoke test, seconds)
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit(f"torch_gpt2_bench: no torch in this python ({sys.executable})")

MODELS = {  # name: (n_layer, n_head, n_embd), vocab 50257, max_seq_len 1024
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
}


def pad_vocab(v):
    """src/model/model.h: V padded to a multiple of 128."""
    return (v + 127) // 128 * 128


def flops_per_token(L, C, Vp, T):
    """src/model/model.cpp flops_per_token, term for term."""
    matmul_params = L * 12.0 * C * C + Vp * C
    attn = L * 2.0 * 2.0 * T * C
    return 6.0 * matmul_params + 3.0 * attn


def num_parameters(L, C, Vp, maxT):
    """src/model/model.cpp num_parameters: the llm.c tensor list (wte over Vp rows)."""
    return (Vp * C + maxT * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C
                                     + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C)


def gpu_peak_flops(name):
    """src/training/gpu_peak.cpp's dense bf16 peak (0: unknown)."""
    if "H200" in name or "H100" in name:
        return 989e12
    if "A100" in name:
        return 312e12
    return 0.0


class Block(nn.Module):
    def __init__(self, C, NH, sdpa):
        super().__init__()
        self.nh, self.sdpa = NH, sdpa
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch without SDPA (< 2.0): the same function spelled out
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.attproj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, V, maxT, sdpa):
        super().__init__()
        self.V, self.Vp = V, pad_vocab(V)
        self.wte = nn.Embedding(self.Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH, sdpa) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        # GPT-2's initialisation (std 0.02, residual projections scaled by 1/sqrt(2L)),
        # padded vocabulary rows zero, as train_gpt's init_random.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        with torch.no_grad():
            self.wte.weight[V:].zero_()

    def forward(self, idx, targets):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # the tied lm_head, (B, T, Vp)
        logits = logits[..., : self.V].float()
        return F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))


def make_optimizer(model, device):
    """AdamW as train_gpt's defaults; fused where this torch and device have it."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    kw = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    for variant in ("fused", "foreach"):
        try:
            return torch.optim.AdamW(groups, **kw, **{variant: True}), variant
        except (TypeError, RuntimeError, ValueError):
            pass
    return torch.optim.AdamW(groups, **kw), "plain"


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def run_steps(step, n, device):
    """Milliseconds of n steps, each ended by a device synchronize."""
    ms = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        sync(device)
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def result_row(label, ms, a, L, C, Vp, T, peak, mem_bytes, extra):
    med = statistics.median(ms)
    tps = a.batch * T / (med / 1e3)
    flops = tps * flops_per_token(L, C, Vp, T)
    row = {
        "variant": label, "ms_per_step": med, "ms_min": min(ms), "ms_max": max(ms),
        "steps_timed": len(ms), "tokens_per_second": tps, "gflops_per_second": flops / 1e9,
        "mfu": flops / peak if peak > 0 else None, "peak_memory_bytes": mem_bytes,
    }
    row.update(extra)
    return row


def print_row(r, a, nparams):
    mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
    mem = (f"{r['peak_memory_bytes'] / 1048576:.1f} MiB" if r["peak_memory_bytes"] is not None
           else "-")
    print(f"| torch {r['variant']} | {nparams} | {a.batch} x {a.seq} | bf16 autocast | "
          f"{r['ms_per_step']:.2f} | {r['ms_min']:.2f}-{r['ms_max']:.2f} | "
          f"{r['tokens_per_second']:.0f} | {r['gflops_per_second']:.1f} | {mfu} | {mem} |",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--model", default="gpt2", choices=sorted(MODELS))
    ap.add_argument("--tiny", action="store_true",
                    help="smoke test: L2 C64 NH4, V 256, B 2, T 32, few steps")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (eager and compiled)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    ap.add_argument("--compile-warmup", type=int, default=2,
                    help="compiled steps counted as compile time (the first compiles)")
    ap.add_argument("--no-eager", action="store_true", help="time only the compiled model")
    ap.add_argument("--no-compile", action="store_true", help="time only the eager model")
    ap.add_argument("--json", help="write the results here (rewritten after each variant)")
    a = ap.parse_args()

    if a.tiny:
        (L, NH, C), V, maxT = (2, 4, 64), 256, 64
        a.batch, a.seq, a.warmup, a.steps, a.compile_warmup = 2, 32, 1, 3, 1
    else:
        (L, NH, C), V, maxT = MODELS[a.model], 50257, 1024
    if a.seq > maxT:
        sys.exit(f"--seq {a.seq} is over max_seq_len {maxT}")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt2_bench: --device cuda but torch sees no CUDA device")
    Vp, T = pad_vocab(V), a.seq

    torch.manual_seed(1)
    sdpa = hasattr(F, "scaled_dot_product_attention")
    can_compile = hasattr(torch, "compile")
    name = torch.cuda.get_device_name() if a.device == "cuda" else platform.processor() or "cpu"
    peak = gpu_peak_flops(name) if a.device == "cuda" else 0.0
    info = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "device": a.device, "device_name": name, "model": "tiny" if a.tiny else a.model,
        "n_layer": L, "n_head": NH, "n_embd": C, "vocab": V, "padded_vocab": Vp,
        "batch": a.batch, "seq": T, "params": num_parameters(L, C, Vp, maxT),
        "flops_per_token": flops_per_token(L, C, Vp, T), "peak_flops": peak or None,
        "attention": "F.scaled_dot_product_attention(is_causal=True)" if sdpa
                     else "explicit masked softmax (this torch has no SDPA)",
        "results": [],
    }
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {a.device}: {name}; "
          f"GPT-2 {info['model']} L{L} C{C} NH{NH} V{V}->{Vp}, B {a.batch} x T {T}; "
          f"attention: {info['attention']}", flush=True)

    def save():
        if a.json:
            with open(a.json, "w") as f:
                json.dump(info, f, indent=1)

    model = GPT(L, NH, C, V, maxT, sdpa).to(a.device)
    # The same tensors as train_gpt's model: the counts must agree.
    info["params_model"] = sum(p.numel() for p in model.parameters())
    if info["params_model"] != info["params"]:
        print(f"WARNING: this model has {info['params_model']} parameters, train_gpt's "
              f"formula {info['params']}: the networks differ", flush=True)
    opt, opt_kind = make_optimizer(model, a.device)
    info["optimizer"] = f"AdamW ({opt_kind})"
    g = torch.Generator(device="cpu").manual_seed(2)
    idx = torch.randint(0, V, (a.batch, T), generator=g).to(a.device)
    tgt = torch.randint(0, V, (a.batch, T), generator=g).to(a.device)
    print(f"optimizer: AdamW ({opt_kind}); parameters {info['params']}; "
          f"{info['flops_per_token'] / 1e9:.3f} GFLOP per token", flush=True)
    print("| variant | params | B x T | mode | ms/step | spread | tokens/s | GFLOP/s | MFU | "
          "peak memory |\n|---|---:|---:|---|---:|---:|---:|---:|---:|---:|", flush=True)

    def make_step(fwd):
        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
                loss = fwd(idx, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss
        return step

    def timed(label, step, warmup, extra):
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        run_steps(step, warmup, a.device)
        ms = run_steps(step, a.steps, a.device)
        mem = torch.cuda.max_memory_allocated() if a.device == "cuda" else None
        r = result_row(label, ms, a, L, C, Vp, T, peak, mem, extra)
        info["results"].append(r)
        save()
        print_row(r, a, info["params"])
        return r

    save()
    if not a.no_eager:
        timed("eager", make_step(model), a.warmup, {})
    if a.no_compile:
        pass
    elif not can_compile:
        print(f"torch.compile: not in torch {torch.__version__}; compiled variant skipped",
              flush=True)
        info["compile_error"] = "torch.compile missing"
        save()
    else:
        try:
            cmodel = torch.compile(model)
            step = make_step(cmodel)
            # The first compiled steps compile (forward, then backward): their time is the
            # compile time, reported apart from the timed steps.
            t0 = time.perf_counter()
            run_steps(step, a.compile_warmup, a.device)
            compile_s = time.perf_counter() - t0
            print(f"torch.compile: first {a.compile_warmup} step(s) took {compile_s:.1f} s "
                  "(compile time, not timed)", flush=True)
            timed("compiled", step, a.warmup, {"compile_seconds": compile_s})
        except Exception as e:  # report it: the eager row stands
            msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            print(f"torch.compile failed: {msg}", flush=True)
            info["compile_error"] = msg
            save()
    if not info["results"]:
        sys.exit("torch_gpt2_bench: nothing was timed")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Small readers for scripts/gpu/gpu_check.sh: they turn its logs into the lines of summary.md.

Each subcommand prints plain lines (no markdown list marks) and never fails the caller: a
missing or unreadable input prints a line that says so, and the exit code is 0.

  bench LOG...              one line per `train_gpt bench` table row in the logs:
                            model, mode, ms/step, tokens/s, MFU, peak memory
  ratio LOG... --num M --den M
                            tokens/s and peak memory of mode M over mode M (same model)
  torch JSON                the PyTorch baseline's rows (scripts/gpu/torch_gpt2_bench.py --json)
  headline LOG JSON         train_gpt bf16 (GPT-2 124M) against PyTorch: the headline ratio
  parity GPU_DIR CPU_DIR    max relative loss gap between two runs' metrics.jsonl
  doctest LOG               "N passed, N failed" of a test log, with the failed cases
"""

import argparse
import json
import os
import re


def bench_rows(paths):
    """The table rows of `train_gpt bench` (src/cli/bench.cpp): | model | params | B x T | mode |
    ms/step | spread | tokens/s | GFLOP/s | MFU | time vs first | peak memory | memory vs first |"""
    rows = []
    for p in paths:
        try:
            lines = open(p, errors="replace").read().splitlines()
        except OSError:
            continue
        for line in lines:
            c = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(c) != 12 or not c[0].startswith("GPT-2"):
                continue
            try:
                rows.append({"model": c[0].split(" (")[0], "mode": c[3], "ms": float(c[4]),
                             "tps": float(c[6]), "mfu": c[8],
                             "mem_mib": float(c[10].split()[0]), "file": os.path.basename(p)})
            except ValueError:
                pass
    return rows


def cmd_bench(a):
    rows = bench_rows(a.logs)
    if not rows:
        print("no bench rows in " + ", ".join(os.path.basename(p) for p in a.logs))
    for r in rows:
        print(f"{r['model']} {r['mode']}{a.tag}: {r['tps']:.0f} tokens/s, {r['ms']:.2f} ms/step, "
              f"MFU {r['mfu']}, peak {r['mem_mib']:.0f} MiB")


def cmd_ratio(a):
    by = {}
    for r in bench_rows(a.logs):
        by[(r["model"], r["mode"])] = r
    models = sorted({m for m, _ in by})
    out = False
    for m in models:
        n, d = by.get((m, a.num)), by.get((m, a.den))
        if n and d:
            out = True
            print(f"{m}: {a.num}/{a.den} tokens/s {n['tps'] / d['tps']:.2f}x, "
                  f"peak memory {n['mem_mib'] / d['mem_mib']:.2f}x")
    if not out:
        print(f"no {a.num} and {a.den} rows of one model to compare")


def load_json(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": f"{os.path.basename(p)}: {e.__class__.__name__}"}


def fmt_torch_row(r):
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
    mem = r.get("peak_memory_bytes")
    mem = f"{mem / 1048576:.0f} MiB" if mem is not None else "-"
    extra = (f", compile {r['compile_seconds']:.0f} s" if "compile_seconds" in r else "")
    return (f"{r['tokens_per_second']:.0f} tokens/s, {r['ms_per_step']:.2f} ms/step, "
            f"MFU {mfu}, peak {mem}{extra}")


def cmd_torch(a):
    j = load_json(a.json)
    if "error" in j:
        print("no PyTorch results: " + j["error"])
        return
    head = (f"torch {j.get('torch')} on {j.get('device_name')}, {j.get('model')} "
            f"B {j.get('batch')} x T {j.get('seq')}, {j.get('optimizer', '?')}")
    print(head)
    for r in j.get("results", []):
        print(f"torch {r['variant']}: {fmt_torch_row(r)}")
    if "compile_error" in j:
        print(f"torch.compile: {j['compile_error']}")


def cmd_headline(a):
    ours = [r for r in bench_rows([a.log]) if r["mode"] == "bf16"]
    j = load_json(a.json)
    res = {r["variant"]: r for r in j.get("results", [])}
    theirs = res.get("compiled") or res.get("eager")
    if not ours or not theirs:
        print("headline: missing " + ("train_gpt bf16 row" if not ours else "PyTorch result"))
        return
    o = ours[0]
    line = (f"GPT-2 124M bf16, B x T as run: train_gpt {o['tps']:.0f} tokens/s (MFU {o['mfu']}) "
            f"vs PyTorch {theirs['variant']} {theirs['tokens_per_second']:.0f} tokens/s")
    if theirs.get("mfu") is not None:
        line += f" (MFU {100 * theirs['mfu']:.1f}%)"
    line += f": train_gpt/PyTorch = {o['tps'] / theirs['tokens_per_second']:.2f}x"
    if theirs.get("peak_memory_bytes"):
        line += (f"; peak memory {o['mem_mib']:.0f} vs "
                 f"{theirs['peak_memory_bytes'] / 1048576:.0f} MiB")
    print(line)


def losses(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return [json.loads(l)["loss"] for l in f if '"kind":"train"' in l.replace(" ", "")]
    except (OSError, ValueError, KeyError):
        return []


def cmd_parity(a):
    g, c = losses(a.gpu), losses(a.cpu)
    if not g or len(g) != len(c):
        print(f"FAILED: {len(g)} gpu / {len(c)} cpu train steps logged")
        return
    # The first ten steps show the arithmetic; later, rounding differences grow with the
    # training's own sensitivity (a loss spike on one device and not the other).
    gaps = [abs(x / y - 1) for x, y in zip(g, c)]
    print(f"max rel loss gap {max(gaps[:10]):.2e} over the first {min(10, len(g))} steps, "
          f"{max(gaps):.2e} over all {len(g)}; final {g[-1]:.4f} (gpu) vs {c[-1]:.4f} (cpu)")


def cmd_doctest(a):
    try:
        text = open(a.log, errors="replace").read()
    except OSError:
        print("no log")
        return
    m = re.findall(r"^(\d+) passed, (\d+) failed", text, re.M)
    counts = f"{m[-1][0]} passed, {m[-1][1]} failed" if m else "no closing count"
    # doctest's console report: blocks between rules of '=', each naming its "TEST CASE:";
    # a failed check, an exception or a crash says "ERROR:" (MESSAGE blocks do not).
    failed = []
    for block in re.split(r"^=+$", text, flags=re.M):
        name = re.search(r"^TEST CASE:\s+(.*)$", block, re.M)
        if name and re.search(r"(^|: )(FATAL )?ERROR:", block, re.M):
            if name.group(1) not in failed:
                failed.append(name.group(1))
    print(counts + ("; failed: " + "; ".join(failed) if failed else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("bench")
    p.add_argument("logs", nargs="+")
    p.add_argument("--tag", default="", help="appended to the mode in each line")
    p = sub.add_parser("ratio")
    p.add_argument("logs", nargs="+")
    p.add_argument("--num", required=True)
    p.add_argument("--den", required=True)
    p = sub.add_parser("torch")
    p.add_argument("json")
    p = sub.add_parser("headline")
    p.add_argument("log")
    p.add_argument("json")
    p = sub.add_parser("parity")
    p.add_argument("gpu")
    p.add_argument("cpu")
    p = sub.add_parser("doctest")
    p.add_argument("log")
    a = ap.parse_args()
    globals()["cmd_" + a.cmd](a)


if __name__ == "__main__":
    main()

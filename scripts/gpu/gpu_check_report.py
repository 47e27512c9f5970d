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
  parity GPU_DIR CPU_DIR [--ref DIR [--ref-cpu DIR]]   max relative loss gap between two runs'
                            metrics.jsonl; with --ref (another GPU run, against --ref-cpu's
                            CPU run, else the same CPU run), FAILED when the first ten steps'
                            gap exceeds twice the ref's (at least 2e-3)
  doctest LOG               "N passed, N failed" of a test log, with the failed cases
  llmc LOG [--tag T]        llm.c's train_gpt2cu run: median ms/step over its steps after the
                            first three, tokens/s, its own MFU where it knows the GPU
  compare --bench LOG --torch JSON [--llmc NAME=LOG ...]
                            a markdown table: train_gpt bf16, PyTorch, llm.c side by side
  ncu-pick CSV --top K      from ncu's per-launch durations: the regex of the K kernels with
                            the most time, and the launch skip and count of their last 60
                            launches (three lines)
  ncu-table TIMES METRICS --top K
                            a markdown table of those kernels: time, share, DRAM GB/s and %
                            of peak, SM throughput %
"""

import argparse
import csv
import json
import os
import re
import statistics


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
    line = (f"max rel loss gap {max(gaps[:10]):.2e} over the first {min(10, len(g))} steps, "
            f"{max(gaps):.2e} over all {len(g)}; final {g[-1]:.4f} (gpu) vs {c[-1]:.4f} (cpu)")
    if a.ref:
        # The tolerance is another GPU path's own gap to its CPU twin (cuDNN's attention against
        # the CPU's lse twin, measured by the default bf16 path against the CPU's reference):
        # twice it, at least 2e-3.
        r = losses(a.ref)
        rc = losses(a.ref_cpu) if a.ref_cpu else c
        if not r or len(r) != len(rc) or len(rc) != len(c):
            print(f"FAILED: the reference runs logged {len(r)} / {len(rc)} train steps, the cpu "
                  f"run {len(c)}; " + line)
            return
        ref10 = max(abs(x / y - 1) for x, y in zip(r[:10], rc[:10]))
        tol = max(2 * ref10, 2e-3)
        ok = max(gaps[:10]) <= tol
        line = ("" if ok else "FAILED: ") + line + (
            f"; tolerance {tol:.2e} (twice {os.path.basename(a.ref.rstrip('/'))}'s {ref10:.2e}, "
            f"at least 2e-3)")
    print(line)


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


LLMC_STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) .*\| ([\d.]+) ms \| (-?[\d.]+)% bf16 MFU "
                       r"\| (\d+) tok/s", re.M)


def llmc_run(path):
    """llm.c's train_gpt2.cu output: its parameter table (B, T, device) and step lines
    ("step %4d/%d | loss %7.6f (%+.2fz)| norm ... | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s")."""
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return {"error": f"{os.path.basename(path)}: no log"}
    table = dict(re.findall(r"^\| (\S[^|]*?)\s+\| (.*?)\s+\|$", text, re.M))
    steps = [(int(m[0]), float(m[3]), float(m[4]), m[2]) for m in LLMC_STEP.findall(text)]
    if not steps:
        return {"error": f"{os.path.basename(path)}: no step lines"}
    try:
        b, t = int(table["micro batch size B"]), int(table["sequence length T"])
    except (KeyError, ValueError):
        return {"error": f"{os.path.basename(path)}: no B and T in its table"}
    timed = [s for s in steps if s[0] > 3] or steps  # after the first three, as train_gpt bench
    ms = statistics.median(s[1] for s in timed)
    mfu = statistics.median(s[2] for s in timed)
    return {"ms": ms, "tps": b * t * 1000.0 / ms, "mfu": mfu if mfu > 0 else None,
            "device": table.get("device", "?"), "b": b, "t": t, "steps": len(steps),
            "first": timed[0][0], "last": timed[-1][0], "loss0": steps[0][3], "loss1": steps[-1][3]}


def cmd_llmc(a):
    r = llmc_run(a.log)
    if "error" in r:
        print(f"llm.c{a.tag}: {r['error']}")
        return
    mfu = (f"MFU by llm.c {r['mfu']:.1f}%" if r["mfu"] is not None
           else f"no MFU from llm.c (its mfu.h has no peak for {r['device']})")
    print(f"llm.c{a.tag}: {r['tps']:.0f} tokens/s, {r['ms']:.2f} ms/step (median of steps "
          f"{r['first']}-{r['last']}, B {r['b']} x T {r['t']}), {mfu}; loss {r['loss0']} -> {r['loss1']}")


def pct(s):
    try:
        return float(str(s).rstrip("%"))
    except ValueError:
        return None


def cmd_compare(a):
    ours = [r for r in bench_rows([a.bench]) if r["mode"] == "bf16"]
    o = ours[0] if ours else None
    o_mfu = pct(o["mfu"]) if o else None
    rows = []
    if o:
        rows.append(("train_gpt bf16", o["tps"], o["ms"], f"{o_mfu:.1f}%" if o_mfu is not None else "-"))
    j = load_json(a.torch)
    for r in j.get("results", []):
        m = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
        rows.append((f"PyTorch {r['variant']}", r["tokens_per_second"], r["ms_per_step"], m))
    for spec in a.llmc:
        name, _, path = spec.partition("=")
        r = llmc_run(path)
        if "error" in r:
            rows.append((f"llm.c {name}: {r['error']}", None, None, "-"))
            continue
        m = []
        if o and o_mfu is not None:  # the same model and B x T: MFU scales with tokens/s
            m.append(f"{o_mfu * r['tps'] / o['tps']:.1f}% at train_gpt's count")
        if r["mfu"] is not None:
            m.append(f"{r['mfu']:.1f}% by llm.c")
        rows.append((f"llm.c {name} (-r 0)", r["tps"], r["ms"], "; ".join(m) or "-"))
    print("| GPT-2 124M, B 8 x T 1024 | tokens/s | ms/step | MFU | vs train_gpt bf16 |")
    print("|---|---:|---:|---|---:|")
    for name, tps, ms, mfu in rows:
        vs = f"{tps / o['tps']:.2f}x" if o and tps else "-"
        print(f"| {name} | {f'{tps:.0f}' if tps else '-'} | {f'{ms:.2f}' if ms else '-'} | {mfu} | {vs} |")
    if not o:
        print("\n(no train_gpt bf16 row: logs/bench_gpt2_bf16.log has none)")


# ncu --csv --page raw --print-units base: a row of column names, a row of units, a row per
# profiled launch. Values may carry thousands separators; units are scaled to ns and bytes.
NCU_SCALE = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
             "second": 1e9, "s": 1e9, "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
             "Tbyte": 1e12, "KB": 1e3, "MB": 1e6, "GB": 1e9, "%": 1, "": 1}


def ncu_rows(path):
    try:
        lines = [l for l in open(path, errors="replace").read().splitlines() if l.startswith('"')]
    except OSError:
        return []
    rows = list(csv.reader(lines))
    head = next((r for r in rows if "Kernel Name" in r and "ID" in r), None)
    if head is None:
        return []
    units, out = [""] * len(head), []
    for r in rows[rows.index(head) + 1:]:
        if len(r) != len(head):
            continue
        d = dict(zip(head, r))
        if not d["ID"].strip().isdigit():
            units = r
            continue
        rec = {"id": int(d["ID"]), "name": d["Kernel Name"]}
        for col, unit, v in zip(head, units, r):
            if "__" in col:
                try:
                    rec[col] = float(v.replace(",", "")) * NCU_SCALE.get(unit.strip(), 1)
                except ValueError:
                    pass
        out.append(rec)
    return sorted(out, key=lambda x: x["id"])


def ncu_ranked(times, top):
    by = {}
    for r in times:
        if "gpu__time_duration.sum" in r:
            t = by.setdefault(r["name"], [0.0, 0])
            t[0] += r["gpu__time_duration.sum"]
            t[1] += 1
    ranked = sorted(by.items(), key=lambda kv: -kv[1][0])
    return ranked[:top], sum(v[0] for v in by.values()), sum(v[1] for v in by.values())


def ncu_regex(names):
    return "^(" + "|".join(re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", n) for n in names) + ")$"


def cmd_ncu_pick(a):
    top, _, _ = ncu_ranked(ncu_rows(a.csv), a.top)
    if not top:
        print("none\n0\n0")
        return
    matching = sum(v[1] for _, v in top)
    count = min(matching, 60)  # the last ones: the latest steps in ncu's window
    print(ncu_regex([n for n, _ in top]))
    print(matching - count)
    print(count)


def cmd_ncu_table(a):
    top, total_ns, launches = ncu_ranked(ncu_rows(a.times), a.top)
    if not top:
        print("no kernel durations (logs/ncu_times.csv)")
        return
    met = {}
    for r in ncu_rows(a.metrics):
        if r["name"] not in dict(top) or "gpu__time_duration.sum" not in r:
            continue
        m = met.setdefault(r["name"], {"n": 0, "t": 0.0, "b": 0.0, "dram": 0.0, "sm": 0.0, "nb": 0})
        t = r["gpu__time_duration.sum"]
        m["n"] += 1
        m["t"] += t
        if "dram__bytes_read.sum" in r and "dram__bytes_write.sum" in r:
            m["b"] += r["dram__bytes_read.sum"] + r["dram__bytes_write.sum"]
            m["nb"] += 1
        m["dram"] += t * r.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", float("nan"))
        m["sm"] += t * r.get("sm__throughput.avg.pct_of_peak_sustained_elapsed", float("nan"))
    print(f"{launches} launches, {total_ns / 1e6:.2f} ms of kernel time in ncu's window (the "
          f"run's first launches: set-up, then the first steps; kernels serialised, durations "
          f"by ncu); the counters of the profiled launches weighted by their durations.")
    print()
    print("| kernel | launches | ms | share | us / launch | profiled | DRAM GB/s | DRAM % of peak | SM % of peak |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, (ns, n) in top:
        m = met.get(name)
        short = name if len(name) <= 80 else name[:77] + "..."
        cells = [f"`{short}`", str(n), f"{ns / 1e6:.3f}", f"{100 * ns / total_ns:.1f}%",
                 f"{ns / n / 1e3:.1f}"]
        if m and m["t"] > 0:
            gbs = f"{m['b'] / m['t']:.0f}" if m["nb"] == m["n"] else "-"
            cells += [str(m["n"]), gbs, f"{m['dram'] / m['t']:.1f}", f"{m['sm'] / m['t']:.1f}"]
        else:
            cells += ["0", "-", "-", "-"]
        print("| " + " | ".join(cells) + " |")


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
    p.add_argument("--ref", default="")
    p.add_argument("--ref-cpu", dest="ref_cpu", default="")
    p = sub.add_parser("doctest")
    p.add_argument("log")
    p = sub.add_parser("llmc")
    p.add_argument("log")
    p.add_argument("--tag", default="")
    p = sub.add_parser("compare")
    p.add_argument("--bench", required=True)
    p.add_argument("--torch", required=True)
    p.add_argument("--llmc", action="append", default=[], help="NAME=LOG")
    p = sub.add_parser("ncu-pick")
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=5)
    p = sub.add_parser("ncu-table")
    p.add_argument("times")
    p.add_argument("metrics")
    p.add_argument("--top", type=int, default=5)
    a = ap.parse_args()
    globals()["cmd_" + a.cmd.replace("-", "_")](a)


if __name__ == "__main__":
    main()

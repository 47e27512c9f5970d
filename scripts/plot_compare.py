#!/usr/bin/env python3
"""Plots for `train_gpt compare`, read from OUT_DIR/compare.json, OUT_DIR/runs.jsonl (which
runs, where) and each run's metrics.jsonl.

usage: plot_compare.py OUT_DIR [MODE ...]   (default: every mode in compare.json)

Writes OUT_DIR/loss.png: left, each mode's val loss minus the reference's (compare.json's
"reference", fp32 by default), seed by seed (runs with the same seed start from the same
weights; a report over several thread counts pairs runs by seed and train.threads), the mean over seeds as a line and the min-max over seeds as a band; right, the
val loss itself (mean over seeds) on a log axis, with bits per byte on the right axis where
compare.json gives "bpb_tokens_per_byte". OUT_DIR/loss_scale.png for modes whose
loss scale moved (first seed; red x: skipped). And per mode with numerics telemetry
OUT_DIR/numerics_<mode>.png (first seed): rows are tensors (per layer where the run
recorded layers), columns the sampled steps; left the share of values that underflowed
(zero or subnormal), right log10 of the absolute maximum; for the reference the values, for
the other modes their difference from the reference's run of the same seed (not drawn where
no cell differs visibly). And per mode with
precision.mode=auto records OUT_DIR/auto_<mode>.png (first seed): rows are the GEMM
operands of every layer's block linears, columns the measured steps; left the format each
one was given (colour), middle the SQNR of the narrowest candidate (how sensitive it is),
right the outlier input channels of each linear. And per block-scaled mode with numerics
telemetry OUT_DIR/quant_<mode>.png (first seed): rows are the quantized GEMM operands of
every layer's block linears, columns the sampled steps; left the SQNR of the run's own
recipe, middle the share of elements that quantize to zero, right the share of scale
groups with a clipped element. And per mode whose optimizer state is narrower than fp32 (its
master or a moment), with numerics telemetry, OUT_DIR/state_<mode>.png
(first seed): rows are the parameter tensors per layer, columns the sampled steps; left the
share of updates the stored master weights lost to rounding (stagnation), middle log10 of
the update-to-weight ratio, right the share of Adam's stored moments that underflowed to
zero or saturated (a panel with nothing in it left out; no picture where nothing was lost).
What is not drawn is said on a line "note: ..." of the standard output, which
`train_gpt report` copies into report.md.
"""
import json
import math
import os
import sys

import matplotlib
from runs_file import read_runs

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

try:  # Pillow comes with matplotlib; without it the pictures stay full-colour PNGs
    from PIL import Image
except ImportError:  # pragma: no cover
    Image = None


def save(fig, path, dpi):
    """Writes fig to path as a 256-colour PNG: these plots hold few colours (lines, bands,
    colormap steps), so a palette keeps them as they look at a quarter of the bytes, which
    keeps the reports the repository tracks small."""
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    if Image is None:
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                           dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def read_metrics(path):
    train, val, numerics, auto, quant, state = [], [], [], [], [], []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "train":
                train.append(r)
            elif r.get("kind") == "val":
                val.append(r)
            elif r.get("kind") == "numerics":
                numerics.append(r)
            elif r.get("kind") == "auto":
                auto.append(r)
            elif r.get("kind") == "quant":
                quant.append(r)
            elif r.get("kind") == "state":
                state.append(r)
    return train, val, numerics, auto, quant, state


def report_runs(out_dir, cmp):
    """Each group's runs as (name, seed, threads, directory): from OUT_DIR/runs.jsonl, or from
    compare.json where it lists them (reports from before runs files)."""
    path = os.path.join(out_dir, cmp.get("runs_file") or "runs.jsonl")
    if not os.path.exists(path):
        return [(m["name"], r["seed"], r.get("threads", 0), r["dir"])
                for m in cmp["modes"] for r in m.get("runs", [])]
    runs = []
    for r in read_runs(path):
        train = r.get("config", {}).get("train", {})
        runs.append((r["group"], train.get("seed", 0), train.get("threads", 0),
                     r.get("dir", train.get("out_dir", ""))))
    return runs


def load(out_dir, wanted):
    cmp = json.load(open(os.path.join(out_dir, "compare.json")))
    modes = {}
    for name, seed, threads, run_dir in report_runs(out_dir, cmp):
        p = os.path.join(run_dir, "metrics.jsonl")
        if (wanted and name not in wanted) or not os.path.exists(p):
            continue
        # Runs pair up by seed and CPU part count (a report may hold both).
        modes.setdefault(name, {})[(seed, threads)] = read_metrics(p)
    return cmp, modes


def val_by_step(val):
    return {r["step"]: r["val_loss"] for r in val}


def main():
    out_dir, wanted = sys.argv[1], set(sys.argv[2:])
    cmp, modes = load(out_dir, wanted)
    if not modes:
        sys.exit("no metrics to plot")
    floor = cmp.get("loss_floor")
    ref_name = cmp.get("reference") or "fp32"
    ref = modes.get(ref_name)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, runs) in enumerate(modes.items()):
        color = colors[i % len(colors)]
        # Right: the mean over seeds of the val loss, log axis.
        per_step = {}
        for _, val, *_ in runs.values():
            for s, v in val_by_step(val).items():
                per_step.setdefault(s, []).append(v)
        steps = sorted(per_step)
        ax2.plot(steps, [sum(per_step[s]) / len(per_step[s]) for s in steps], "o-", color=color,
                 markersize=2.5, linewidth=1.2, label=f"{name} ({len(runs)} runs)")
        # Left: differences from fp32, paired by seed.
        if ref is None or name == ref_name:
            continue
        diffs = {}
        for seed, (_, val, *_) in runs.items():
            if seed not in ref:
                continue
            mine, base = val_by_step(val), val_by_step(ref[seed][1])
            for s in mine:
                if s in base:
                    diffs.setdefault(s, []).append(mine[s] - base[s])
        ds = sorted(diffs)
        if not ds:
            continue
        mean = [sum(diffs[s]) / len(diffs[s]) for s in ds]
        ax1.plot(ds, mean, color=color, linewidth=1.4, label=name)
        ax1.fill_between(ds, [min(diffs[s]) for s in ds], [max(diffs[s]) for s in ds], color=color,
                         alpha=0.18, linewidth=0)
    ax1.axhline(0, color="black", linewidth=0.8)
    ax1.set_title(f"val loss minus {ref_name} (line: mean over runs, band: min-max)")
    ax1.set_ylabel("difference (nats/token)")
    if floor is not None:
        ax2.axhline(floor, color="gray", linestyle="--", linewidth=0.8, label="loss floor")
    ax2.set_yscale("log")
    ax2.set_title("val loss (mean over runs)")
    ax2.set_ylabel("loss (nats/token, log)")
    # Bits per byte beside nats per token, where the runs know their tokens per byte.
    tpb = cmp.get("bpb_tokens_per_byte")
    if tpb:
        k = tpb / math.log(2)
        bpb = ax2.secondary_yaxis("right", functions=(lambda x: x * k, lambda b: b / k))
        bpb.set_ylabel("bits per byte (log)")
    for ax in (ax1, ax2):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, os.path.join(out_dir, "loss.png"), 110)

    scaled = {}
    for name, runs in modes.items():
        train = runs[min(runs)][0]
        if any(r["loss_scale"] != 1.0 for r in train):
            scaled[name] = train
    if scaled:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, train in scaled.items():
            ax.step([r["step"] for r in train], [r["loss_scale"] for r in train], where="post",
                    label=name)
            skips = [r for r in train if r["skipped"]]
            if skips:
                ax.plot([r["step"] for r in skips], [r["loss_scale"] for r in skips], "x",
                        color="red", label=f"{name}: skipped step")
        ax.set_yscale("log", base=2)
        ax.set_xlabel("step")
        ax.set_ylabel("loss scale")
        ax.set_title("dynamic loss scale (first seed)")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        save(fig, os.path.join(out_dir, "loss_scale.png"), 110)

    for name, runs in modes.items():
        numerics = runs[min(runs)][2]
        # Another mode's numerics are drawn as differences from the reference's run of the
        # same seed (the same initial weights and batches): their own maps look alike.
        base = None
        if ref is not None and name != ref_name and numerics:
            base = ref.get(min(runs), ref[min(ref)])[2] or None
        if numerics and base is not None:
            plot_numerics_diff(name, numerics, ref_name, base,
                               os.path.join(out_dir, f"numerics_{name}.png"))
        elif numerics:
            plot_numerics(name, numerics, os.path.join(out_dir, f"numerics_{name}.png"))
        auto = runs[min(runs)][3]
        if auto:
            plot_auto(name, auto, os.path.join(out_dir, f"auto_{name}.png"))
        quant = runs[min(runs)][4]
        if quant:
            plot_quant(name, quant, os.path.join(out_dir, f"quant_{name}.png"))
        state = runs[min(runs)][5]
        if state and state_narrowed(state):
            plot_state(name, state, os.path.join(out_dir, f"state_{name}.png"))


def numerics_rows(rec):
    """(row label, stats dict) per tensor of one numerics record, per layer where recorded."""
    rows = []
    layers = rec.get("layers", {})
    for tname, st in rec["tensors"].items():
        if tname in layers:
            per = layers[tname]
            for i in range(len(per["amax"])):
                rows.append((f"L{i} {tname}", {k: per[k][i] for k in per}))
        else:
            rows.append((tname, st))
    return rows


def numerics_grids(numerics):
    """(row labels, steps, underflow share grid, log10 |max| grid) of one run's records: rows
    are tensors (per layer where recorded), columns the sampled steps."""
    labels = [lab for lab, _ in numerics_rows(numerics[0])]
    steps = [r["step"] for r in numerics]
    under = [[float("nan")] * len(steps) for _ in labels]
    amax = [[float("nan")] * len(steps) for _ in labels]
    for j, rec in enumerate(numerics):
        for i, (lab, st) in enumerate(numerics_rows(rec)):
            if i >= len(labels) or lab != labels[i]:
                continue
            under[i][j] = st["zero_frac"] + st["subnormal_frac"]
            a = st["amax"]
            amax[i][j] = math.log10(a) if a > 0 else float("nan")
    return labels, steps, under, amax


def heatmaps(labels, steps, panels, width=14):
    """One figure of heat maps side by side over (row labels x steps); panels are (grid,
    colormap, low, high, title)."""
    height = max(4.0, 0.16 * len(labels) + 1.5)
    fig, axes = plt.subplots(1, len(panels), figsize=(width, height), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (data, cmap, lo, hi, title) in zip(axes, panels):
        im = ax.imshow(data, aspect="auto", cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
        ticks = list(range(0, len(steps), max(1, len(steps) // 8)))
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(steps[t]) for t in ticks], fontsize=7)
        ax.set_xlabel("step")
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.04)
    axes[0].set_yticks(range(len(labels)))
    axes[0].set_yticklabels(labels, fontsize=6)
    fig.tight_layout()
    return fig


def plot_numerics(name, numerics, path):
    """The reference's numerics: the share of values that underflowed, log10 |max|."""
    labels, steps, under, amax = numerics_grids(numerics)
    fig = heatmaps(labels, steps, [
        (under, "magma", 0, 1, f"{name}: share of values zero or subnormal"),
        # One colour scale for every run (fp16's smallest subnormal is 6e-8).
        (amax, "viridis", -8, 3, f"{name}: log10 |max| (white: all zero)"),
    ])
    save(fig, path, 100)


# Differences below these are not drawn: a map of them would be one colour.
NUMERICS_SAME_UNDER = 1e-3  # share of values zero or subnormal
NUMERICS_SAME_AMAX = 0.01   # log10 |max|: 2.3%


def plot_numerics_diff(name, numerics, ref_name, base, path):
    """Another mode's numerics minus the reference's, cell by cell (the tensors and steps both
    recorded), on symmetric scales; not drawn, but said, where no cell differs visibly."""
    labels, steps, under, amax = numerics_grids(numerics)
    blabels, bsteps, bunder, bamax = numerics_grids(base)
    bi = {lab: i for i, lab in enumerate(blabels)}
    bj = {s: j for j, s in enumerate(bsteps)}
    nan = float("nan")

    def minus(grid, bgrid):
        return [[grid[i][j] - bgrid[bi[lab]][bj[s]] if lab in bi and s in bj else nan
                 for j, s in enumerate(steps)] for i, lab in enumerate(labels)]

    dunder, damax = minus(under, bunder), minus(amax, bamax)

    def largest(grid):
        vals = [abs(v) for row in grid for v in row if not math.isnan(v)]
        return max(vals, default=0.0)

    mu, ma = largest(dunder), largest(damax)
    if mu < NUMERICS_SAME_UNDER and ma < NUMERICS_SAME_AMAX:
        print(f"note: {name}'s numerics telemetry is {ref_name}'s at every sampled step (zero or "
              f"subnormal shares within {NUMERICS_SAME_UNDER:g}, |max| within "
              f"{10 ** NUMERICS_SAME_AMAX - 1:.1%}): no numerics_{name}.png")
        if os.path.exists(path):
            os.remove(path)
        return
    # Scales symmetric about zero and no narrower than the threshold, so noise stays pale.
    su, sa = max(mu, 10 * NUMERICS_SAME_UNDER), max(ma, 10 * NUMERICS_SAME_AMAX)
    fig = heatmaps(labels, steps, [
        (dunder, "RdBu_r", -su, su, f"{name} minus {ref_name}: share zero or subnormal "
                                    f"(red: more underflow)"),
        (damax, "RdBu_r", -sa, sa, f"{name} minus {ref_name}: log10 |max| (red: larger)"),
    ])
    save(fig, path, 100)


def state_rows(rec):
    """(row label, {statistic: value}) per parameter tensor and layer of one state record."""
    rows = []
    for pname, per in rec["layers"].items():
        n = len(per["stagnation"])
        for i in range(n):
            rows.append((f"L{i} {pname}" if n > 1 else pname, {k: per[k][i] for k in per}))
    return rows


def state_narrowed(records):
    """Whether any of the optimizer state's formats is narrower than fp32: an fp32 master and
    fp32 moments lose nothing, and their picture would be black panels."""
    rec = records[0]
    return any(rec.get(k, "fp32") != "fp32" for k in ("master", "adam_m", "adam_v"))


def plot_state(name, records, path):
    """What the optimizer state's formats do to an update, per parameter and layer over the
    sampled steps: the share of updates lost to the master format's rounding, the
    update-to-weight ratio, and the moments' underflow or saturation. A panel whose every cell
    is zero (nothing lost, no moment underflowed) is left out and said."""
    labels = [lab for lab, _ in state_rows(records[0])]
    steps = [r["step"] for r in records]
    stag = [[float("nan")] * len(steps) for _ in labels]
    ratio = [[float("nan")] * len(steps) for _ in labels]
    lost = [[float("nan")] * len(steps) for _ in labels]
    for j, rec in enumerate(records):
        for i, (lab, st) in enumerate(state_rows(rec)):
            if i >= len(labels) or lab != labels[i]:
                continue
            stag[i][j] = st["stagnation"]
            r = st["update_ratio"]
            ratio[i][j] = math.log10(r) if r > 0 else float("nan")
            lost[i][j] = max(st["m_underflow"], st["v_underflow"], st["m_saturation"],
                             st["v_saturation"])
    rec = records[0]

    def empty(grid):
        return all(v == 0 or math.isnan(v) for row in grid for v in row)

    def share_top(grid):
        """The colour scale's top for a grid of shares: the smallest of 1, 0.5, 0.2, 0.1,
        0.05, ... at or above its largest cell, so that a few percent is not drawn black."""
        biggest = max((v for row in grid for v in row if not math.isnan(v)), default=0)
        tops = [m * 10.0 ** -d for d in range(5) for m in (1, 0.5, 0.2)]
        return min(t for t in tops if t >= biggest or t == tops[0])

    moments = f"m {rec['adam_m']}, v {rec['adam_v']}"
    if empty(stag) and empty(lost):  # the update ratio alone does not depend on the formats
        print(f"note: {name}: its narrowed optimizer state lost nothing at any sampled step "
              f"(no state_{name}.png)")
        if os.path.exists(path):
            os.remove(path)
        return
    # The share panels, each left out (and said) where it holds nothing.
    shares = {
        "stag": (stag, f"share of updates lost (master {rec['master']})",
                 f"no update was lost to the master format ({rec['master']})"),
        "lost": (lost, f"moments zero or saturated ({moments})",
                 f"no Adam moment ({moments}) underflowed to zero or saturated"),
    }
    panels = []
    for key in ("stag", "ratio", "lost"):
        if key == "ratio":
            panels.append((ratio, "viridis", -6, -1, f"{name}: log10 rms(update) / rms(weight)"))
            continue
        grid, title, nothing = shares[key]
        if empty(grid):
            print(f"note: {name}: {nothing} at any sampled step (panel left out of "
                  f"state_{name}.png)")
            continue
        top = share_top(grid)
        panels.append((grid, "magma", 0, top, f"{name}: {title}, 0-{top:g}"))
    save(heatmaps(labels, steps, panels, width=6 * len(panels) - 1), path, 100)


def plot_auto(name, records, path):
    """Formats chosen per (layer, linear, GEMM role, operand) over the measured steps."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    cands = records[0]["candidates"]
    sl = records[0]["slots"]
    short = {"forward": "fwd", "dgrad": "dgrad", "wgrad": "wgrad"}
    labels = [f"L{l} {lin} {short.get(role, role)} {op}" for l, lin, role, op in
              zip(sl["layer"], sl["linear"], sl["role"], sl["operand"])]
    steps = [r["step"] for r in records]
    fmt = [[cands.index(r["slots"]["format"][i]) for r in records] for i in range(len(labels))]
    narrow = cands[0]
    sqnr = [[r["slots"]["sqnr_db"][narrow][i] for r in records] for i in range(len(labels))]
    sqnr = [[float("nan") if v is None else v for v in row] for row in sqnr]
    height = max(4.0, 0.13 * len(labels) + 1.8)
    fig = plt.figure(figsize=(16, height))
    grid = fig.add_gridspec(1, 3, width_ratios=[5, 5, 2.2])
    ax1 = fig.add_subplot(grid[0])
    ax2 = fig.add_subplot(grid[1], sharey=ax1)
    ax3 = fig.add_subplot(grid[2])
    # Narrow formats warm, wide ones cool; one colour per candidate, in the candidates' order.
    palette = ["#d62728", "#ff7f0e", "#bcbd22", "#2ca02c", "#17becf", "#1f77b4", "#7f7f7f"]
    cmap = ListedColormap(palette[:len(cands) - 1] + ["#1f3b73"] if len(cands) > 1 else ["#1f3b73"])
    ax1.imshow(fmt, aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(cands) - 0.5,
               interpolation="nearest")
    # Centred on the threshold: red below (too lossy for that format), blue above.
    thr = records[0].get("threshold_db", 20)
    im2 = ax2.imshow(sqnr, aspect="auto", cmap="RdBu", vmin=thr - 10, vmax=thr + 10,
                     interpolation="nearest")
    for ax in (ax1, ax2):
        ticks = list(range(0, len(steps), max(1, len(steps) // 10)))
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(steps[t]) for t in ticks], fontsize=7)
        ax.set_xlabel("step (measured)")
        # A line between layers.
        for i in range(1, len(labels)):
            if sl["layer"][i] != sl["layer"][i - 1]:
                ax.axhline(i - 0.5, color="white", linewidth=1.2)
    ax1.set_yticks(range(len(labels)))
    ax1.set_yticklabels(labels, fontsize=5.5)
    share = records[-1].get("low_bit_flop_share")
    ax1.set_title(f"{name}: format per GEMM operand after each measurement"
                  + (f" (last: {100 * share:.0f}% of linear FLOPs <= 8 bits)" if share is not None
                     else ""), fontsize=9)
    ax1.legend(handles=[Patch(color=cmap(i), label=c) for i, c in enumerate(cands)],
               loc="upper left", bbox_to_anchor=(0, -0.06), ncol=len(cands), fontsize=7)
    ax2.set_title(f"SQNR of {narrow} (dB; threshold {thr:g} dB)", fontsize=9)
    plt.setp(ax2.get_yticklabels(), visible=False)
    fig.colorbar(im2, ax=ax2, fraction=0.04)
    # Outlier channels per linear (its input channels above k x the median).
    n_lin = len(records[0].get("outliers", {}).get("count", []))
    if n_lin:
        lins = []
        for l, lin in zip(sl["layer"], sl["linear"]):
            if f"L{l} {lin}" not in lins:
                lins.append(f"L{l} {lin}")
        counts = [[r["outliers"]["count"][i] for r in records] for i in range(n_lin)]
        im3 = ax3.imshow(counts, aspect="auto", cmap="Greys", vmin=0,
                         vmax=max(1, max(max(c) for c in counts)), interpolation="nearest")
        ax3.set_yticks(range(n_lin))
        ax3.set_yticklabels(lins[:n_lin], fontsize=7)
        ticks = list(range(0, len(steps), max(1, len(steps) // 5)))
        ax3.set_xticks(ticks)
        ax3.set_xticklabels([str(steps[t]) for t in ticks], fontsize=7)
        ax3.set_xlabel("step (measured)")
        ax3.set_title("outlier input channels", fontsize=9)
        fig.colorbar(im3, ax=ax3, fraction=0.08)
    else:
        ax3.axis("off")
    fig.tight_layout()
    save(fig, path, 100)


def plot_quant(name, records, path):
    """SQNR, zeros and saturating blocks per quantized (layer, linear, role, operand)."""
    sl = records[-1]["slots"]
    short = {"forward": "fwd", "dgrad": "dgrad", "wgrad": "wgrad"}
    keys = list(zip(sl["layer"], sl["linear"], sl["role"], sl["operand"]))
    labels = [f"L{l} {lin} {short.get(role, role)} {op} ({f})"
              for (l, lin, role, op), f in zip(keys, sl["format"])]
    steps = [r["step"] for r in records]

    def grid(field):
        rows = []
        for k in keys:
            row = []
            for r in records:
                s = r["slots"]
                at = dict(zip(zip(s["layer"], s["linear"], s["role"], s["operand"]), s[field]))
                v = at.get(k)
                row.append(float("nan") if v is None else v)
            rows.append(row)
        return rows

    sqnr, zero, sat = grid("sqnr_db"), grid("zero_frac"), grid("block_saturated_frac")
    height = max(4.0, 0.13 * len(labels) + 1.8)
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, height), sharey=True)
    finite = [v for row in sqnr for v in row if v == v]
    lo, hi = (min(finite), max(finite)) if finite else (0, 40)
    panels = [(ax1, sqnr, "viridis", lo, hi, "SQNR (dB)"),
              (ax2, [[100 * v for v in row] for row in zero], "magma", 0, None,
               "elements quantized to zero (%)"),
              (ax3, [[100 * v for v in row] for row in sat], "magma", 0, None,
               "scale groups with a clipped element (%)")]
    for ax, data, cmap, vmin, vmax, title in panels:
        if vmax is None:
            vals = [v for row in data for v in row if v == v]
            vmax = max(1e-9, max(vals)) if vals else 1
        im = ax.imshow(data, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax,
                       interpolation="nearest")
        ticks = list(range(0, len(steps), max(1, len(steps) // 8)))
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(steps[t]) for t in ticks], fontsize=7)
        ax.set_xlabel("step (sampled)")
        ax.set_title(f"{name}: {title}" if ax is ax1 else title, fontsize=9)
        for i in range(1, len(keys)):
            if keys[i][0] != keys[i - 1][0]:
                ax.axhline(i - 0.5, color="white", linewidth=1.2)
        fig.colorbar(im, ax=ax, fraction=0.04)
    ax1.set_yticks(range(len(labels)))
    ax1.set_yticklabels(labels, fontsize=5.5)
    fig.tight_layout()
    save(fig, path, 100)


if __name__ == "__main__":
    main()

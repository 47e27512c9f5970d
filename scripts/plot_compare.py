#!/usr/bin/env python3
"""Plots for `train_gpt compare`, read from OUT_DIR/compare.json and each run's metrics.jsonl.

usage: plot_compare.py OUT_DIR [MODE ...]   (default: every mode in compare.json)

Writes OUT_DIR/loss.png: left, each mode's val loss minus fp32's, seed by seed (mode and
fp32 with the same seed start from the same weights), the mean over seeds as a line and the
min-max over seeds as a band; right, the val loss itself (mean over seeds) on a log axis.
And OUT_DIR/loss_scale.png for modes whose loss scale moved (first seed; red x: skipped).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path):
    train, val = [], []
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
    return train, val


def load(out_dir, wanted):
    cmp = json.load(open(os.path.join(out_dir, "compare.json")))
    modes = {}
    for m in cmp["modes"]:
        if wanted and m["name"] not in wanted:
            continue
        runs = {}
        for r in m.get("runs", []):
            p = os.path.join(r["dir"], "metrics.jsonl")
            if os.path.exists(p):
                runs[r["seed"]] = read_metrics(p)
        if runs:
            modes[m["name"]] = runs
    return cmp, modes


def val_by_step(val):
    return {r["step"]: r["val_loss"] for r in val}


def main():
    out_dir, wanted = sys.argv[1], set(sys.argv[2:])
    cmp, modes = load(out_dir, wanted)
    if not modes:
        sys.exit("no metrics to plot")
    floor = cmp.get("loss_floor")
    ref = modes.get("fp32")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, runs) in enumerate(modes.items()):
        color = colors[i % len(colors)]
        # Right: the mean over seeds of the val loss, log axis.
        per_step = {}
        for _, val in runs.values():
            for s, v in val_by_step(val).items():
                per_step.setdefault(s, []).append(v)
        steps = sorted(per_step)
        ax2.plot(steps, [sum(per_step[s]) / len(per_step[s]) for s in steps], "o-", color=color,
                 markersize=2.5, linewidth=1.2, label=f"{name} ({len(runs)} seeds)")
        # Left: differences from fp32, paired by seed.
        if ref is None or name == "fp32":
            continue
        diffs = {}
        for seed, (_, val) in runs.items():
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
    ax1.set_title("val loss minus fp32 (line: mean over seeds, band: min-max)")
    ax1.set_ylabel("difference (nats/token)")
    if floor is not None:
        ax2.axhline(floor, color="gray", linestyle="--", linewidth=0.8, label="loss floor")
    ax2.set_yscale("log")
    ax2.set_title("val loss (mean over seeds)")
    ax2.set_ylabel("loss (nats/token, log)")
    for ax in (ax1, ax2):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "loss.png"), dpi=110)

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
        fig.savefig(os.path.join(out_dir, "loss_scale.png"), dpi=110)


if __name__ == "__main__":
    main()

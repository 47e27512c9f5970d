#!/usr/bin/env python3
"""Plots for `train_gpt compare`: loss curves and loss scale per precision mode.

usage: plot_compare.py OUT_DIR MODE [MODE ...]
Reads OUT_DIR/<mode>/metrics.jsonl and writes OUT_DIR/loss.png and OUT_DIR/loss_scale.png.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    train, val = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            (train if r["kind"] == "train" else val if r["kind"] == "val" else []).append(r)
    return train, val


def ema(xs, alpha):
    out, m = [], None
    for x in xs:
        m = x if m is None else alpha * m + (1 - alpha) * x
        out.append(m)
    return out


def main():
    out_dir, modes = sys.argv[1], sys.argv[2:]
    runs = {}
    for m in modes:
        p = os.path.join(out_dir, m, "metrics.jsonl")
        if os.path.exists(p):
            runs[m] = read(p)
    if not runs:
        sys.exit("no metrics to plot")
    floor = None
    meta = os.path.join(out_dir, "compare.json")
    if os.path.exists(meta):
        floor = json.load(open(meta)).get("loss_floor")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for m, (train, val) in runs.items():
        steps = [r["step"] for r in train]
        loss = [r["loss"] for r in train]
        line, = ax1.plot(steps, ema(loss, 0.9), label=m, linewidth=1.2)
        if val:
            ax2.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", color=line.get_color(),
                     label=m, markersize=3)
    for ax, title in ((ax1, "train loss (EMA 0.9)"), (ax2, "validation loss")):
        if floor is not None:
            ax.axhline(floor, color="gray", linestyle="--", linewidth=0.8, label="loss floor")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "loss.png"), dpi=110)

    scaled = {m: t for m, (t, _) in runs.items() if any(r["loss_scale"] != 1.0 for r in t)}
    if scaled:
        fig, ax = plt.subplots(figsize=(7, 4))
        for m, train in scaled.items():
            ax.step([r["step"] for r in train], [r["loss_scale"] for r in train], where="post", label=m)
            skips = [r["step"] for r in train if r["skipped"]]
            if skips:
                ax.plot(skips, [r["loss_scale"] for r in train if r["skipped"]], "x", color="red",
                        label=f"{m}: skipped step")
        ax.set_yscale("log", base=2)
        ax.set_xlabel("step")
        ax.set_ylabel("loss scale")
        ax.set_title("dynamic loss scale")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "loss_scale.png"), dpi=110)


if __name__ == "__main__":
    main()

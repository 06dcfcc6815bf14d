#!/usr/bin/env python3
"""Plots of `reformer memory` sweeps (the sweep.csv of each run folder):

  --lengths DIR  memory against length, log-log, one line per variant: the
                 measured peak of the step plus the parameters, gradients and
                 Adam moments (solid), and the prediction from the shapes
                 (dotted); skipped points are left out.
  --tokens DIR   time per training step against length at a fixed number of
                 tokens per batch (the paper's Figure 5: 1024 x 32 ... 32768 x 1),
                 one line per variant.
  --layers DIR   memory against the number of layers, one line per variant.

Each plot goes to --out-prefix + {_length,_tokens,_layers}.png; --markdown
prints each sweep as a Markdown table instead (skipped points with their
reason), as pasted into docs/memory.md. The plots need matplotlib
(Debian's python3-matplotlib; the project itself never does).

  python3 experiments/plot_memory.py --lengths runs/mem-len --tokens runs/mem-tok \
      --layers runs/mem-layers --out-prefix docs/memory
"""
import argparse
import csv
import os
import sys
from collections import defaultdict


def read_sweep(folder, ran_only=True):
    path = os.path.join(folder, "sweep.csv")
    if not os.path.exists(path):
        sys.exit(f"plot_memory.py: {path} does not exist; run `reformer memory --out {folder}` first")
    with open(path) as f:
        return [row for row in csv.DictReader(f) if row["status"] == "ran" or not ran_only]


def markdown_table(folder):
    lines = ["| variant | L | layers | batch | measured peak MiB | predicted MiB | measured / "
             "predicted | state MiB | s/step |", "|---|---|---|---|---|---|---|---|---|"]
    for r in read_sweep(folder, ran_only=False):
        head = f"| {r['variant']} | {r['length']} | {r['layers']} | {r['batch']} |"
        if r["status"] != "ran":
            lines.append(f"{head} skipped: {r['note']} | | | | |")
            continue
        measured, predicted = float(r["peak_MiB"]), float(r["predicted_peak_MiB"])
        lines.append(f"{head} {measured:.1f} | {predicted:.1f} | {measured / predicted:.2f} | "
                     f"{float(r['state_MiB']):.1f} | {float(r['seconds_per_step']):.3f} |")
    return "\n".join(lines) + "\n"


def series(rows, x_key, y_of):
    """{variant: ([x...], [y...])} sorted by x."""
    points = defaultdict(list)
    for row in rows:
        points[row["variant"]].append((float(row[x_key]), y_of(row)))
    return {v: tuple(zip(*sorted(p))) for v, p in points.items()}


def total_mib(row):
    return float(row["peak_MiB"]) + float(row["state_MiB"])


def predicted_mib(row):
    return float(row["predicted_peak_MiB"]) + float(row["predicted_state_MiB"])


# One colour per variant, the same in every plot (the order of `reformer memory --variants`).
VARIANTS = ["full", "full-rev", "lsh-1", "lsh-2", "lsh-4", "lsh-8", "local", "exact", "exact-rev",
            "reformer"]


def variant_color(variant):
    if variant in VARIANTS:
        i = VARIANTS.index(variant)
        return f"C{i}" if i < 10 else "black"
    return "gray"


def plot(lines, xlabel, ylabel, title, path, loglog=True, predicted=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant, (x, y) in sorted(lines.items()):
        color = variant_color(variant)
        ax.plot(x, y, marker="o", color=color, label=variant)
        if predicted and variant in predicted:
            px, py = predicted[variant]
            ax.plot(px, py, linestyle=":", color=color)
    if loglog:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", help="run folder of a sweep over lengths")
    parser.add_argument("--tokens", help="run folder of a sweep at fixed tokens per batch (--tokens)")
    parser.add_argument("--layers", help="run folder of a sweep over layers")
    parser.add_argument("--out-prefix", default="memory")
    parser.add_argument("--markdown", action="store_true", help="print tables, no plots")
    args = parser.parse_args()
    if not (args.lengths or args.tokens or args.layers):
        sys.exit("plot_memory.py: give at least one of --lengths, --tokens, --layers")
    if args.markdown:
        for folder in (args.lengths, args.tokens, args.layers):
            if folder:
                print(markdown_table(folder))
        return
    if args.lengths:
        rows = read_sweep(args.lengths)
        plot(series(rows, "length", total_mib), "sequence length",
             "peak MiB (step + parameters, gradients, Adam)",
             "Memory of a training step (solid: measured, dotted: predicted)",
             args.out_prefix + "_length.png", predicted=series(rows, "length", predicted_mib))
    if args.tokens:
        rows = read_sweep(args.tokens)
        tokens = {int(r["length"]) * int(r["batch"]) for r in rows}
        plot(series(rows, "length", lambda r: float(r["seconds_per_step"])), "sequence length",
             "seconds per step", f"Time per step at {'/'.join(map(str, sorted(tokens)))} tokens "
             "per batch", args.out_prefix + "_tokens.png")
    if args.layers:
        rows = read_sweep(args.layers)
        lengths = sorted({r["length"] for r in rows})
        plot(series(rows, "layers", total_mib), "layers",
             "peak MiB (step + parameters, gradients, Adam)",
             f"Memory against depth at L = {', '.join(lengths)}", args.out_prefix + "_layers.png",
             loglog=False, predicted=series(rows, "layers", predicted_mib))


if __name__ == "__main__":
    main()

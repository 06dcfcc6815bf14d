#!/usr/bin/env python3
"""Training curves of one or more runs, from their metrics.csv files.

  experiments/plot_curves.py --out curves.png [--title T] LABEL=RUN_DIR ...

Left: training loss against step; right: held-out accuracy (the eval rows)
against step. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import csv
import os
import sys


def read_metrics(run):
    path = os.path.join(run, "metrics.csv")
    if not os.path.exists(path):
        sys.exit(f"plot_curves.py: {path} does not exist; pass LABEL=RUN_DIR of a finished run")
    train, evals = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            point = (int(row["step"]), float(row["loss"]), float(row["accuracy"] or "nan"))
            (evals if row["kind"] == "eval" else train).append(point)
    return train, evals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("runs", nargs="+", metavar="LABEL=RUN_DIR")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for spec in args.runs:
        label, sep, run = spec.partition("=")
        if not sep:
            sys.exit(f"plot_curves.py: '{spec}' is not LABEL=RUN_DIR")
        train, evals = read_metrics(run)
        left.plot([p[0] for p in train], [p[1] for p in train], label=label)
        right.plot([p[0] for p in evals], [100 * p[2] for p in evals], marker=".", label=label)
    left.set(xlabel="step", ylabel="training loss (nats/token)", yscale="log")
    right.set(xlabel="step", ylabel="held-out accuracy (%)", ylim=(0, 101))
    for axes in (left, right):
        axes.grid(alpha=0.3)
        axes.legend()
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

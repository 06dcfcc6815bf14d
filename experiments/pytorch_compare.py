#!/usr/bin/env python3
"""One training step of the same model here and in PyTorch, in one invocation,
on the same thread count: our Reformer (`reformer memory`, variant `reformer`)
against lucidrains' reformer_pytorch.ReformerLM (experiments/pytorch_step.py)
under Debian's python3-torch and under PyPI's torch, and the same for a
full-attention step (our `full` variant against ReformerLM with
use_full_attn=True). Prints a Markdown table with the ratios against the faster
PyTorch, and the machine's sgemm rate measured by every side in the same run.

The model: 6 layers, d_model 256, 4 heads of 64, d_ff 1024, vocabulary 256,
causal, axial positions, batch 1; the Reformer step uses LSH with 2 hashes and
chunks of 64, reversible blocks, chunked feed-forward (ours 1024 positions a
chunk; PyTorch ff_chunks 8) and, on our side, the chunked loss.

Memory, per side:
  - ours: the memory tracker's peak of the step plus the parameters, gradients
    and Adam moments (everything the step's allocations hold), and the process's
    peak resident set as a whole (libraries, Kokkos and the warm-up included);
  - PyTorch: the growth of the peak resident set over the process's own after
    `import torch` (parameters, gradients, Adam, autograd's saved tensors and the
    allocator's slack; pytorch_step.py).
The ratios use our peak resident set, the larger of our two figures.

Usage (needs build/openmp; neither Python is needed by the project itself):
  python3 experiments/pytorch_compare.py [--length 16384] [--full-length 4096] \
      [--threads 2] [--pythons PY ...] [--budget-gib G] [--out runs/pytorch-compare]

The two interpreters (--pythons; the defaults are these paths) are made once:
  # Debian's torch 1.13 (apt-get install python3-torch python3-venv), with
  # reformer-pytorch beside it and Debian's torch left in place:
  python3 -m venv --system-site-packages /work/venv-debian
  /work/venv-debian/bin/pip install --no-deps reformer-pytorch==1.4.4 einops \
      axial-positional-embedding==0.2.1 local-attention==1.4.4 product-key-memory==0.1.10
  # PyPI's torch (CPU wheel) and reformer-pytorch:
  python3 -m venv /work/venv
  /work/venv/bin/pip install torch reformer-pytorch==1.4.4
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env, out_dir):
    """Runs one side in its own process; returns its stdout and its peak RSS in
    MiB (GNU time's maximum resident set size of that process)."""
    rss_file = os.path.join(out_dir, "maxrss.txt")
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd,
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"pytorch_compare.py: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    with open(rss_file) as f:
        return proc.stdout, int(f.read().split()[-1]) / 1024


def ours(args, variant, length, env):
    out_dir = os.path.join(args.out, f"ours-{variant}-{length}")
    cmd = [args.reformer, "memory", "--variants", variant, "--lengths", str(length),
           "--layers", str(args.layers), "--steps", str(args.steps), "--out", out_dir]
    if args.budget_gib:
        cmd += ["--budget-gib", str(args.budget_gib)]
    os.makedirs(out_dir, exist_ok=True)
    _, rss = run(cmd, env, out_dir)
    with open(os.path.join(out_dir, "sweep.json")) as f:
        point = json.load(f)["points"][0]
    if not point["ran"]:
        sys.exit(f"pytorch_compare.py: our {variant} step at L = {length} was skipped: "
                 f"{point['skipped']} (give --budget-gib or a smaller --length)")
    peak = max(point["measured_MiB"].values()) + point["state_MiB"]
    return {"side": "ours", "model": variant, "length": length,
            "seconds_per_step": point["seconds_per_step"], "tracker_MiB": peak, "peak_MiB": rss}


def pytorch(args, python, model, length, env):
    cmd = [python, os.path.join(ROOT, "experiments", "pytorch_step.py"), "--model", model,
           "--length", str(length), "--layers", str(args.layers), "--steps", str(args.steps),
           "--threads", str(args.threads)]
    stdout, _ = run(cmd, env, args.out)
    row = json.loads(stdout.strip().splitlines()[-1])
    return {"side": f"reformer-pytorch {row['reformer_pytorch']}, torch {row['torch']}",
            "model": model, "length": length, "seconds_per_step": row["seconds_per_step"],
            "peak_MiB": row["peak_rss_growth_MiB"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=16384, help="Reformer step length")
    parser.add_argument("--full-length", type=int, default=4096, help="full-attention step length")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reformer", default=os.path.join(ROOT, "build/openmp/bin/reformer"))
    parser.add_argument("--pythons", nargs="+",
                        default=["/work/venv-debian/bin/python", "/work/venv/bin/python"],
                        help="interpreters with torch and reformer-pytorch (Debian's, PyPI's)")
    parser.add_argument("--budget-gib", type=float,
                        help="our memory budget (default: `reformer memory`'s, the free memory)")
    parser.add_argument("--out", default=os.path.join(ROOT, "runs",
                                                      time.strftime("pytorch-compare-%Y%m%d-%H%M%S")))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_PROC_BIND="false")

    if not os.access(args.reformer, os.X_OK):
        sys.exit(f"pytorch_compare.py: {args.reformer} is not an executable; build it "
                 "(tests/run_all.sh or cmake --build build/openmp) or give --reformer")
    for python in args.pythons:
        if not os.access(python, os.X_OK):
            sys.exit(f"pytorch_compare.py: interpreter {python} does not exist; make it as the "
                     "top of this script says, or give --pythons")
    bench_ops = os.path.join(os.path.dirname(args.reformer), "..", "bench", "bench_ops")
    if os.access(bench_ops, os.X_OK):
        sgemm = [subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "sgemm_rate.py"),
                                 "--threads", str(args.threads), "--bench-ops", bench_ops],
                                capture_output=True, text=True, env=env,
                                check=True).stdout.strip()]
    else:
        sgemm = [f"sgemm, ours: not measured ({bench_ops} was not built: "
                 "configure with -DREFORMER_ENABLE_BENCH=ON)"]
    rows = []
    for model, variant, length in (("full", "full", args.full_length),
                                   ("reformer", "reformer", args.length)):
        rows.append(ours(args, variant, length, env))
        print(json.dumps(rows[-1]), flush=True)
        for python in args.pythons:
            rows.append(pytorch(args, python, model, length, env))
            print(json.dumps(rows[-1]), flush=True)
    for python in args.pythons:
        sgemm.append(subprocess.run([python, os.path.join(ROOT, "experiments", "sgemm_rate.py"),
                                     "--threads", str(args.threads)], capture_output=True,
                                    text=True, env=env, check=True).stdout.strip())

    lines = [f"{args.layers} layers, {args.threads} threads, {args.steps} timed steps per side "
             "(median), batch 1", "",
             "| step | L | side | s/step | peak MiB | ours: time ratio | ours: memory ratio |",
             "|---|---|---|---|---|---|---|"]
    for model in ("full", "reformer"):
        group = [r for r in rows if r["model"] == model]
        mine = group[0]
        fastest = min(group[1:], key=lambda r: r["seconds_per_step"])
        for r in group:
            peak = f"{r['peak_MiB']:.0f}"
            if "tracker_MiB" in r:
                peak += f" (tracker {r['tracker_MiB']:.0f})"
            ratio = ("", "")
            if r is fastest:
                ratio = (f"{mine['seconds_per_step'] / r['seconds_per_step']:.2f}x "
                         f"({r['seconds_per_step'] / mine['seconds_per_step']:.2f}x faster)",
                         f"{mine['peak_MiB'] / r['peak_MiB']:.2f}x")
            lines.append(f"| {model} | {r['length']} | {r['side']} | {r['seconds_per_step']:.2f} | "
                         f"{peak} | {ratio[0]} | {ratio[1]} |")
    lines += [""] + [f"- {s}" for s in sgemm]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump({"rows": rows, "sgemm": sgemm, "argv": sys.argv}, f, indent=1)


if __name__ == "__main__":
    main()

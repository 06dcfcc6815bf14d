#!/usr/bin/env python3
"""Speed on this CPU for every build target, beside the PyTorch peers, from one run.

Builds the library for -march=x86-64-v3 (AVX2: every x86 machine in use today),
for the native target, and for x86-64-v4 where this CPU has AVX-512 (each in
build/isa/<target>, OpenMP, no tests), then measures, on --threads threads:

  per build   the large sgemm rate and team_multiply at the fused kernels' tile
              shapes against the same-size sgemm (bench/tile_guard); each
              attention layer (BM_AttentionLayer: projections included, d 256 as
              4 x 64, causal, forward + backward): full at 4K, LSH-2 and local at
              4K and 16K, exact at 2K, 4K and 16K; the 6-layer Reformer training
              step at 16K (`reformer memory --variants reformer`); the quick
              start's duplication step (LSH-2, L 256, batch 32, `reformer train`)
  peers       under PyPI's torch (--pypi-python) and Debian's torch 1.13
              (--debian-python): the sgemm rate, reformer-pytorch's
              LSHSelfAttention at 4K and 16K (bench/peer_layers.py), its
              reversible and non-reversible ReformerLM step at 16K
              (experiments/pytorch_step.py), and, under PyTorch 2, the fused
              scaled_dot_product_attention layer at 2K and 4K

and prints one Markdown table (also written to --out as table.md, with every
raw figure in results.json), headed by the CPU model and its vector ISA from
lscpu. Ratios are taken inside this one run; the peers' memory is their peak
resident set growth, ours the memory tracker's peak of the layer or step (plus
parameters, gradients and Adam for the step), as in docs/benchmarks.md.

Usage:
  python3 bench/cross_isa.py [--threads 2] [--targets x86-64-v3 native] [--no-peers]
      [--pypi-python /work/venv/bin/python] [--debian-python /work/venv-debian/bin/python]
      [--out runs/cross-isa] [--skip-build]
Takes about 25 minutes on 2 cores with the peers (each build about 3 minutes).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPS = os.environ.get("REFORMER_DEPS", os.path.expanduser("~/.cache/reformer-deps"))
# BM_AttentionLayer kinds (bench/bench_attention.cpp): 0 full, 1 LSH-2, 2 local, 3 exact.
LAYERS = [("full", 0, 4096), ("LSH-2", 1, 4096), ("LSH-2", 1, 16384), ("local", 2, 4096),
          ("local", 2, 16384), ("exact", 3, 2048), ("exact", 3, 4096), ("exact", 3, 16384)]


def log(msg):
    print(f"[cross_isa] {msg}", file=sys.stderr, flush=True)


def run(cmd, env=None, cwd=ROOT):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        sys.exit(f"cross_isa.py: {' '.join(cmd)} failed ({proc.returncode}):\n"
                 f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def cpu():
    info = {}
    for line in run(["lscpu"]).splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    flags = set(info.get("Flags", "").split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    model = info.get("Model name", "unknown")
    return {"model": model, "family": info.get("CPU family", "?"), "model_id": info.get("Model", "?"),
            "isa": isa, "avx512": "avx512f" in flags,
            "cores": info.get("CPU(s)", "?")}


def build(target, skip):
    folder = os.path.join(ROOT, "build", "isa", target)
    if not skip:
        log(f"building for -march={target} in {folder}")
        run(["cmake", "-S", ROOT, "-B", folder, "-G", "Ninja", f"-DKokkos_ROOT={DEPS}/openmp",
             f"-DKokkosKernels_ROOT={DEPS}/openmp", f"-DREFORMER_ARCH={target}",
             "-DREFORMER_ENABLE_TESTS=OFF", "-DREFORMER_ENABLE_BENCH=ON"])
        run(["cmake", "--build", folder, "--target", "reformer_cli", "bench_attention",
             "tile_guard"])
    return folder


def ours(folder, threads, out):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    result = {}
    guard = subprocess.run([os.path.join(folder, "bench", "tile_guard")], capture_output=True,
                           text=True, env=env)
    text = guard.stdout
    result["guard_ok"] = guard.returncode == 0
    result["target"] = re.search(r"threads; (.*); floor", text).group(1)
    result["sgemm"] = float(re.search(r"large sgemm .*: ([0-9.]+) GFLOP/s", text).group(1))
    result["tiles"] = [(m.group(1).strip(), float(m.group(2)), float(m.group(3)))
                       for m in re.finditer(r"^(.*?)\s+\d+\s+\d+\s+\d+\s+([0-9.]+) GF/s\s+([0-9.]+) GF/s",
                                            text, re.M)]
    pattern = "|".join(f"{kind}/{length}" for _, kind, length in LAYERS)
    log(f"{folder}: attention layers")
    data = json.loads(run([os.path.join(folder, "bench", "bench_attention"),
                           f"--benchmark_filter=BM_AttentionLayer/({pattern})/",
                           "--benchmark_repetitions=3", "--benchmark_format=json"], env=env))
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        kind, length = (int(x) for x in b["name"].split("/")[1:3])
        key = f"layer/{kind}/{length}"
        best = result.get(key, (float("inf"), 0))[0]
        if b["real_time"] / 1e3 < best:  # the best of 3 runs, as the peers
            result[key] = (b["real_time"] / 1e3, b["peak_MiB"])
    log(f"{folder}: 6-layer Reformer step at 16K")
    sweep = os.path.join(out, os.path.basename(folder) + "-reformer")
    run([os.path.join(folder, "bin", "reformer"), "memory", "--variants", "reformer", "--lengths",
         "16384", "--layers", "6", "--out", sweep], env=env)
    with open(os.path.join(sweep, "sweep.json")) as f:
        point = json.load(f)["points"][0]
    result["reformer_step"] = (point["seconds_per_step"],
                               max(point["measured_MiB"].values()) + point["state_MiB"])
    log(f"{folder}: duplication step")
    with tempfile.TemporaryDirectory() as run_dir:
        run([os.path.join(folder, "bin", "reformer"), "train",
             os.path.join(ROOT, "experiments", "duplication_lsh.toml"), f"run.dir={run_dir}/dup",
             "train.steps=30", "train.eval_every=1000", "train.log_every=10"], env=env)
        with open(os.path.join(run_dir, "dup", "metrics.csv")) as f:
            rows = [r.split(",") for r in f.read().splitlines()]
        header = rows[0]
        rates = [float(r[header.index("tokens_per_s")]) for r in rows[1:]
                 if r[header.index("kind")] == "train" and r[header.index("tokens_per_s")]]
        # The first window holds the warm-up; the later ones are steady.
        result["dup_step"] = 32 * 256 / (sum(rates[1:]) / len(rates[1:]))
    return result


def peer(python, args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = run([python] + args, env=env)
    return json.loads(out.strip().splitlines()[-1])


def peers(pythons, threads):
    result = {}
    for name, python in pythons:
        if not python or not os.path.exists(python):
            log(f"no {name} interpreter at {python}: its columns stay empty")
            continue
        log(f"{name}: sgemm rate, LSHSelfAttention, ReformerLM steps")
        line = run([python, os.path.join(ROOT, "experiments", "sgemm_rate.py"), "--threads",
                    str(threads)])
        side = {"sgemm": float(re.search(r"([0-9.]+) GFLOP/s", line).group(1))}
        for length in (4096, 16384):
            r = peer(python, [os.path.join(ROOT, "bench", "peer_layers.py"), "--layer", "lsh",
                              "--length", str(length), "--threads", str(threads)], threads)
            side[f"lsh/{length}"] = (r["seconds"], r["peak_MiB"])
            side["torch"] = r["torch"]
        if side["torch"].split(".")[0] != "1":
            for length in (2048, 4096):
                r = peer(python, [os.path.join(ROOT, "bench", "peer_layers.py"), "--layer", "sdpa",
                                  "--length", str(length), "--threads", str(threads)], threads)
                side[f"sdpa/{length}"] = (r["seconds"], r["peak_MiB"])
        for label, extra in (("rev", []), ("irrev", ["--irreversible"])):
            r = peer(python, [os.path.join(ROOT, "experiments", "pytorch_step.py"), "--model",
                              "reformer", "--length", "16384", "--threads", str(threads),
                              "--steps", "2"] + extra, threads)
            side[f"step/{label}"] = (r["seconds_per_step"], r["peak_rss_growth_MiB"])
        result[name] = side
    return result


def table(machine, builds, peer_results, threads):
    lines = [f"CPU: {machine['model']} (family {machine['family']}, model {machine['model_id']}), "
             f"{machine['isa']}, {machine['cores']} cores; {threads} threads; "
             f"{time.strftime('%Y-%m-%d')}", ""]
    names = list(builds)
    head = "| case | " + " | ".join(f"{n} s (MiB)" for n in names)
    peer_names = list(peer_results)
    head += "".join(f" | {p} s (MiB)" for p in peer_names) + " |"
    lines += [head, "|" + "---|" * (1 + len(names) + len(peer_names))]

    def fmt(v):
        return "-" if v is None else f"{v[0]:.3f} ({v[1]:.0f})" if isinstance(v, tuple) else f"{v:.1f}"

    def row(label, ours_key, peer_key=None):
        cells = [fmt(builds[n].get(ours_key)) for n in names]
        cells += [fmt(peer_results[p].get(peer_key)) if peer_key else "-" for p in peer_names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    lines.append("| sgemm GFLOP/s (ours: 2048^3 via ops::matmul; peers: torch.matmul) | "
                 + " | ".join(f"{builds[n]['sgemm']:.1f}" for n in names)
                 + "".join(f" | {peer_results[p]['sgemm']:.1f}" for p in peer_names) + " |")
    for i, (shape, _, _) in enumerate(builds[names[0]]["tiles"]):
        lines.append(f"| team_multiply / same-size sgemm, GFLOP/s: {shape} | "
                     + " | ".join(f"{builds[n]['tiles'][i][1]:.0f} / {builds[n]['tiles'][i][2]:.0f}"
                                  for n in names) + " |" + " - |" * len(peer_names))
    for label, kind, length in LAYERS:
        peer_key = {("LSH-2", 4096): "lsh/4096", ("LSH-2", 16384): "lsh/16384",
                    ("exact", 2048): "sdpa/2048", ("exact", 4096): "sdpa/4096"}.get((label, length))
        row(f"{label} layer, {length} (peer: {'SDPA' if label == 'exact' else 'LSHSelfAttention'})"
            if peer_key else f"{label} layer, {length}", f"layer/{kind}/{length}", peer_key)
    row("6-layer Reformer step, 16K (peer: ReformerLM reversible)", "reformer_step", "step/rev")
    row("6-layer Reformer step, 16K (peer: ReformerLM not reversible)", "reformer_step", "step/irrev")
    lines.append("| duplication step (LSH-2, L 256, batch 32) | "
                 + " | ".join(f"{builds[n]['dup_step']:.3f}" for n in names) + " |"
                 + " - |" * len(peer_names))
    lines.append("")
    # Ratios against the faster peer, per build.
    def best_peer(key):
        vals = [(peer_results[p][key], p) for p in peer_names if key in peer_results[p]]
        return min(vals, key=lambda v: v[0][0]) if vals else None
    for n in names:
        b = builds[n]
        parts = []
        for label, ours_key, key in (("LSH-2 4K", "layer/1/4096", "lsh/4096"),
                                     ("LSH-2 16K", "layer/1/16384", "lsh/16384"),
                                     ("exact 2K vs SDPA", "layer/3/2048", "sdpa/2048"),
                                     ("exact 4K vs SDPA", "layer/3/4096", "sdpa/4096"),
                                     ("Reformer step vs reversible", "reformer_step", "step/rev"),
                                     ("Reformer step vs non-reversible", "reformer_step", "step/irrev")):
            p = best_peer(key)
            if p and ours_key in b:
                parts.append(f"{label}: {p[0][0] / b[ours_key][0]:.2f}x faster, "
                             f"{b[ours_key][1] / p[0][1]:.2f}x the memory ({p[1]})")
        guard = "passes" if b["guard_ok"] else "FAILS"
        lines.append(f"- {n} ({b['target']}; guard {guard}): " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--targets", nargs="+")
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "cross-isa"))
    parser.add_argument("--skip-build", action="store_true", help="reuse build/isa/<target>")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--pypi-python", default="/work/venv/bin/python")
    parser.add_argument("--debian-python", default="/work/venv-debian/bin/python")
    args = parser.parse_args()
    machine = cpu()
    targets = args.targets or (["x86-64-v3", "native"] + (["x86-64-v4"] if machine["avx512"] else []))
    os.makedirs(args.out, exist_ok=True)
    folders = {t: build(t, args.skip_build) for t in targets}
    builds = {t: ours(folders[t], args.threads, args.out) for t in targets}
    peer_results = {} if args.no_peers else peers(
        [("PyPI torch", args.pypi_python), ("Debian torch", args.debian_python)], args.threads)
    for name, side in peer_results.items():
        side["label"] = f"{name} {side.get('torch', '')}"
    text = table(machine, builds, peer_results, args.threads)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"cpu": machine, "threads": args.threads, "builds": builds, "peers": peer_results},
                  f, indent=1)
    print(text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs the benchmark suites of a build and prints Markdown tables.

  bench/make_tables.py BUILD_DIR [--threads 2] [--quick]

Sections: op benchmarks (bench_ops), the matmul wrapper against the BLAS it
calls (bench_gemm_vs_blas), and the attention variants (bench_attention).
The output is what docs/benchmarks.md holds; rerun it to refresh that page.
"""
import argparse
import json
import os
import platform
import subprocess
import sys


def run(binary, threads, extra):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    out = subprocess.run([binary, "--benchmark_format=json", *extra], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["benchmarks"]


def ms(row):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[row["time_unit"]]
    return row["real_time"] * scale


def ops_table(rows):
    print("| benchmark | rows | d_model | time (ms) | throughput |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r.get("error_occurred"):
            continue
        parts = r["name"].split("/")
        name = parts[0]
        args = [p for p in parts[1:] if p.isdigit()]
        label = [p for p in parts[1:] if not p.isdigit() and p != "real_time"]
        rows_arg = args[0] if args else ""
        d_arg = args[1] if len(args) > 1 else ""
        if label:
            name += " " + " ".join(label)
        if "GFLOP/s" in r:
            through = f"{r['GFLOP/s']:.1f} GFLOP/s"
        elif "bytes_per_second" in r:
            through = f"{r['bytes_per_second'] / 1e9:.1f} GB/s"
        else:
            through = ""
        print(f"| {name} | {rows_arg} | {d_arg} | {ms(r):.3f} | {through} |")


def gemm_table(rows):
    by_shape = {}
    for r in rows:
        parts = r["name"].split("/")
        by_shape.setdefault((int(parts[1]), int(parts[2])), {})[parts[0]] = r
    print("| rows x d x d | wrapper GFLOP/s | direct BLAS GFLOP/s | wrapper / BLAS |")
    print("|---|---|---|---|")
    for (rows_arg, d), pair in sorted(by_shape.items()):
        w, b = pair.get("BM_GemmWrapper"), pair.get("BM_GemmDirectBlas")
        if not w or not b:
            continue
        print(f"| {rows_arg} x {d} x {d} | {w['GFLOP/s']:.1f} | {b['GFLOP/s']:.1f} | "
              f"{w['GFLOP/s'] / b['GFLOP/s'] * 100:.0f}% |")


def attention_table(rows):
    print("| variant | L | time fwd+bwd (ms) | us / token | peak MiB |")
    print("|---|---|---|---|---|")
    for r in rows:
        parts = r["name"].split("/")
        kind = parts[0].replace("BM_", "")
        length = parts[1]
        if kind.startswith("Lsh"):
            kind += f" n_hashes={parts[2]}"
        if r.get("error_occurred"):
            print(f"| {kind} | {length} | stops: {r.get('error_message', '')} | | |")
            continue
        print(f"| {kind} | {length} | {ms(r):.1f} | {r.get('us_per_token', 0):.1f} | "
              f"{r.get('peak_MiB', 0):.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--sections", default="ops,gemm,attention",
                        help="comma-separated subset of ops, gemm, attention")
    args = parser.parse_args()
    bench = os.path.join(args.build, "bench")
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"OMP_NUM_THREADS={args.threads}.\n")
    sections = args.sections.split(",")
    ops_filter = ["--benchmark_filter=/4096/256/"] if args.quick else []
    if "ops" in sections:
        print("### Ops\n")
        ops_table(run(os.path.join(bench, "bench_ops"), args.threads,
                      ops_filter + ["--benchmark_min_time=0.2"]))
    if "gemm" in sections and os.path.exists(os.path.join(bench, "bench_gemm_vs_blas")):
        print("\n### Matmul wrapper against the BLAS it calls\n")
        gemm_table(run(os.path.join(bench, "bench_gemm_vs_blas"), args.threads,
                       ["--benchmark_min_time=0.3"]))
    if "attention" in sections:
        print("\n### Attention (d_model 256 = 4 heads x 64, batch 1, causal, float)\n")
        att_filter = ["--benchmark_filter=/(1024|4096)/"] if args.quick else []
        attention_table(run(os.path.join(bench, "bench_attention"), args.threads, att_filter))
    return 0


if __name__ == "__main__":
    sys.exit(main())

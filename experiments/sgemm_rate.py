#!/usr/bin/env python3
"""The machine's sgemm rate now, [4096 x 1024] x [1024 x 1024] in float, on
--threads threads: ours (bench_ops' BM_Matmul: the host BLAS split over the
OpenMP threads) with --bench-ops, else PyTorch's (torch.matmul) in the Python
that runs this script. Prints one line, `sgemm, <who>: <rate> GFLOP/s`, so that
comparison scripts can put the rate beside the times they measured.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def ours(bench_ops, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    out = subprocess.run([bench_ops, "--benchmark_filter=BM_Matmul/4096/1024/",
                          "--benchmark_min_time=1", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True, env=env).stdout
    return "ours (bench_ops matmul)", json.loads(out)["benchmarks"][0]["GFLOP/s"]


def pytorch(threads):
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(threads)
    a, b = torch.rand(4096, 1024), torch.rand(1024, 1024)
    for _ in range(3):
        a @ b
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < 1.0:
        a @ b
        n += 1
    rate = 2 * 4096 * 1024 * 1024 * n / (time.perf_counter() - start) / 1e9
    return f"PyTorch {torch.__version__}", rate


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bench-ops", help="path of build/openmp/bench/bench_ops (ours)")
    args = parser.parse_args()
    who, rate = ours(args.bench_ops, args.threads) if args.bench_ops else pytorch(args.threads)
    print(f"sgemm, {who}: {rate:.0f} GFLOP/s", flush=True)


if __name__ == "__main__":
    sys.exit(main())

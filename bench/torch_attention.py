#!/usr/bin/env python3
"""Runs the attention cases of bench_attention in PyTorch and prints the ratios.

Same shapes (d_model 256 as 4 heads of 64, batch 1, causal, float32), same thread
count, forward + backward of the attention itself (no projections):
  - full attention, written the usual way (scores, masked_fill, softmax, matmul);
  - a straightforward LSH attention (shared QK, chunk 64, 2 * L / 64 buckets
    factorised into two powers of two as in bench_attention, look one chunk
    back, self mask -1e5, causal mask -1e9, rounds combined by their
    logsumexps), as a PyTorch user would write it.
Each case runs in its own process so that its peak memory (max RSS growth) is
its own. Usage:
  bench/torch_attention.py [--threads 2] [--ours build/openmp/bench/bench_attention]
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

CASES = [("full", 2048, 0), ("full", 4096, 0), ("lsh", 4096, 2), ("lsh", 16384, 2)]
HEADS, D_HEAD, CHUNK = 4, 64, 64


def full_attention(q, k, v):
    length = q.shape[1]
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    causal = torch.ones(length, length, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, -1e9)
    return torch.softmax(scores, dim=-1) @ v


def bucket_factors(length):
    n_buckets = 2 * max(1, length // CHUNK)
    b1 = 2
    while b1 * b1 * 2 <= n_buckets:
        b1 *= 2
    return b1, n_buckets // b1


def lsh_attention(qk, v, n_hashes, rotations):
    bh, length, d = qk.shape
    b1, b2 = bucket_factors(length)
    n_buckets = b1 * b2
    # Hash: argmax over [xR, -xR] per factor, h = h1 + b1 * h2; one bucket range per round.
    proj = torch.einsum("bld,drk->brlk", qk, rotations)
    p1, p2 = proj[..., : b1 // 2], proj[..., b1 // 2 :]
    buckets = torch.cat([p1, -p1], dim=-1).argmax(dim=-1) + b1 * torch.cat([p2, -p2], dim=-1).argmax(dim=-1)
    buckets = buckets + (torch.arange(n_hashes) * n_buckets).view(1, -1, 1)
    # Stable sort by (round, bucket, position).
    positions = torch.arange(length).view(1, 1, -1)
    keys = (buckets * length + positions).view(bh, -1)
    sorted_items = keys.argsort(dim=-1)
    undo = sorted_items.argsort(dim=-1)
    pos = sorted_items % length
    idx = pos.unsqueeze(-1).expand(-1, -1, d)
    sq = qk.gather(1, idx)
    sv = v.gather(1, idx)
    n_chunks = n_hashes * length // CHUNK
    bq = sq.view(bh, n_chunks, CHUNK, d)
    bk = bq * torch.rsqrt(bq.pow(2).mean(-1, keepdim=True) + 1e-6) / math.sqrt(d)
    bv = sv.view(bh, n_chunks, CHUNK, d)
    bpos = pos.view(bh, n_chunks, CHUNK)

    def look_one_back(x):
        return torch.cat([x, torch.roll(x, 1, dims=1)], dim=2)

    bk, bv, kpos = look_one_back(bk), look_one_back(bv), look_one_back(bpos)
    dots = bq @ bk.transpose(-1, -2)
    qpos = bpos.unsqueeze(-1)
    kp = kpos.unsqueeze(-2)
    dots = dots.masked_fill(qpos < kp, -1e9)
    dots = dots.masked_fill(qpos == kp, -1e5)
    lse = torch.logsumexp(dots, dim=-1, keepdim=True)
    bo = torch.exp(dots - lse) @ bv
    o = bo.view(bh, -1, d).gather(1, undo.unsqueeze(-1).expand(-1, -1, d))
    lse = lse.view(bh, -1).gather(1, undo)
    o = o.view(bh, n_hashes, length, d)
    w = torch.softmax(lse.view(bh, n_hashes, length, 1), dim=1)
    return (o * w).sum(dim=1)


def run_case(kind, length, n_hashes, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    shape = (HEADS, length, D_HEAD)
    q = torch.rand(shape, requires_grad=True)
    k = torch.rand(shape, requires_grad=True)
    v = torch.rand(shape, requires_grad=True)
    dout = torch.rand(shape)
    b1, b2 = bucket_factors(length)
    rotations = torch.randn(D_HEAD, max(n_hashes, 1), b1 // 2 + b2 // 2)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        out = full_attention(q, k, v) if kind == "full" else lsh_attention(q, v, n_hashes, rotations)
        out.backward(dout)
        best = min(best, time.perf_counter() - start)
        q.grad = k.grad = v.grad = None
    peak_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps({"seconds": best, "peak_MiB": peak_mib}))


def ours(binary, kind, length, n_hashes, threads):
    name = f"BM_FullAttention/{length}/" if kind == "full" else f"BM_LshAttention/{length}/{n_hashes}/"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    out = subprocess.run([binary, f"--benchmark_filter=^{name}", "--benchmark_format=json"],
                         env=env, capture_output=True, text=True, check=True).stdout
    row = json.loads(out)["benchmarks"][0]
    return row["real_time"] / 1000.0, row.get("peak_MiB", float("nan"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ours", default="build/openmp/bench/bench_attention")
    parser.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        run_case(args.case[0], int(args.case[1]), int(args.case[2]), args.threads)
        return
    print(f"| case | L | PyTorch {torch.__version__} s | PyTorch peak MiB | ours s | ours peak MiB | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for kind, length, n_hashes in CASES:
        res = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--case", kind,
                              str(length), str(n_hashes)], capture_output=True, text=True, check=True)
        torch_row = json.loads(res.stdout)
        our_s, our_mib = ours(args.ours, kind, length, n_hashes, args.threads)
        label = "full" if kind == "full" else f"LSH-{n_hashes}"
        print(f"| {label} | {length} | {torch_row['seconds']:.3f} | {torch_row['peak_MiB']:.0f} | "
              f"{our_s:.3f} | {our_mib:.0f} | {torch_row['seconds'] / our_s:.2f}x |", flush=True)


if __name__ == "__main__":
    import torch

    main()

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
its own.

--impl sdpa instead times PyTorch 2's fused torch.nn.functional.
scaled_dot_product_attention as a whole layer, the counterpart of our
BM_AttentionLayer: q, k, v and output projections (no bias, as ours), d_model 256
as 4 heads of 64, batch 1, causal, float32, forward + backward with a random dy,
at each of --lengths (default 1024 2048 4096 8192 16384). Time: best of 3, as
above. Memory, measured the same way as the cases above but with a cleaner
baseline: each length runs in a fresh process, which builds the layer, x and dy,
does one forward + backward at L = 256 (library initialisation, thread pool,
parameter gradients), then reads ru_maxrss as the baseline; peak MiB is the
growth of ru_maxrss over the 3 timed runs at L. Like BM_AttentionLayer's
peak_MiB it therefore counts y, dx, what autograd saves and the kernels'
temporaries, and not x, dy or the parameters. (ru_maxrss counts pages touched,
so it reads allocator behaviour too; glibc returns the large blocks to the system
on free, so a block freed and reallocated within a run is not counted twice.)
The "backend" column is the autograd node of the attention output, which tells
which SDPA kernel ran (ScaledDotProductFlashAttentionForCpuBackward0: the fused
flash kernel; otherwise the unfused math path). With --ours-layer, our
BM_AttentionLayer rows of the kinds in --ours-kinds (default: full and lsh, i.e.
LSH-2; also local and exact) are added where the binary has that length (full,
LSH and local: 1024, 4096 and 16384; exact: 1024 to 16384).

Usage:
  bench/torch_attention.py [--threads 2] [--ours build/openmp/bench/bench_attention]
  bench/torch_attention.py --impl sdpa [--lengths 2048 4096] [--ours-layer] [--ours-kinds exact]
  bench/torch_attention.py --impl sdpa --device cuda --ours-layer --ours <CUDA bench_attention>
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


def sdpa_layer(d_model=HEADS * D_HEAD, heads=HEADS):
    """Multi-head self-attention around F.scaled_dot_product_attention (torch is
    imported under __main__, so the class is made here)."""

    class SdpaLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w_q = torch.nn.Linear(d_model, d_model, bias=False)
            self.w_k = torch.nn.Linear(d_model, d_model, bias=False)
            self.w_v = torch.nn.Linear(d_model, d_model, bias=False)
            self.w_o = torch.nn.Linear(d_model, d_model, bias=False)
            self.last_backend = None

        def forward(self, x):
            batch, length, _ = x.shape

            def split(t):
                return t.view(batch, length, heads, -1).transpose(1, 2)

            a = torch.nn.functional.scaled_dot_product_attention(
                split(self.w_q(x)), split(self.w_k(x)), split(self.w_v(x)), is_causal=True)
            self.last_backend = type(a.grad_fn).__name__ if a.grad_fn is not None else None
            return self.w_o(a.transpose(1, 2).reshape(batch, length, d_model))

    return SdpaLayer()


def run_sdpa_case(length, threads, device="cpu"):
    """On a GPU (--device cuda) the time waits for the device, and the memory is
    the growth of torch.cuda.max_memory_allocated over the allocated bytes after
    the warm-up (the caching allocator's reserve is not counted), in float32
    without TF32."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cuda = device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    d_model = HEADS * D_HEAD
    layer = sdpa_layer(d_model, HEADS).to(device)
    x = torch.rand(1, length, d_model, requires_grad=True, device=device)
    dy = torch.rand(1, length, d_model, device=device)
    # Warm-up: library initialisation and parameter gradients (at the length
    # itself on a GPU, whose kernels are chosen per shape).
    warm = length if cuda else 256
    small = torch.rand(1, warm, d_model, requires_grad=True, device=device)
    layer(small).backward(torch.rand(1, warm, d_model, device=device))
    layer.zero_grad(set_to_none=True)
    del small
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        layer(x).backward(dy)
        if cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
        x.grad = None
        layer.zero_grad(set_to_none=True)
    if cuda:
        peak_mib = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps({"seconds": best, "peak_MiB": peak_mib, "backend": layer.last_backend}))


LAYER_KINDS = {"full": (0, "full"), "lsh": (1, "LSH-2"), "local": (2, "local"), "exact": (3, "exact")}


def ours_layer(binary, kind, length, threads):
    """BM_AttentionLayer/kind/length (0 full, 1 LSH-2, 2 local, 3 exact): seconds and peak MiB, or None."""
    name = f"BM_AttentionLayer/{kind}/{length}/"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    out = subprocess.run([binary, f"--benchmark_filter=^{name}", "--benchmark_format=json"],
                         env=env, capture_output=True, text=True, check=True).stdout
    if not out.strip():  # "Failed to match any benchmarks" (on stderr): no case at this length
        return None
    rows = json.loads(out)["benchmarks"]
    if not rows:
        return None
    return rows[0]["real_time"] / 1000.0, rows[0].get("peak_MiB", float("nan"))


def main_sdpa(args):
    kinds = [LAYER_KINDS[k] for k in args.ours_kinds] if args.ours_layer else []
    ours_cols = "".join(f" ours {label} s | ours {label} MiB |" for _, label in kinds)
    print(f"| layer | L | PyTorch {torch.__version__} s | PyTorch peak MiB | backend |{ours_cols}")
    print("|---|---|---|---|---|" + "---|---|" * len(kinds))
    for length in args.lengths:
        res = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--sdpa-case",
                              str(length), "--device", args.device], capture_output=True, text=True,
                             check=True)
        row = json.loads(res.stdout.strip().splitlines()[-1])
        line = f"| SDPA | {length} | {row['seconds']:.3f} | {row['peak_MiB']:.0f} | {row['backend']} |"
        for kind, _ in kinds:
            got = ours_layer(args.ours, kind, length, args.threads)
            line += f" {got[0]:.3f} | {got[1]:.0f} |" if got else " - | - |"
        print(line, flush=True)


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
    parser.add_argument("--impl", choices=["cases", "sdpa"], default="cases",
                        help="cases: the attention cases above against ours (default); "
                             "sdpa: the fused scaled_dot_product_attention layer")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384],
                        help="sdpa: sequence lengths")
    parser.add_argument("--ours-layer", action="store_true",
                        help="sdpa: add our BM_AttentionLayer columns (see --ours-kinds) from --ours")
    parser.add_argument("--ours-kinds", nargs="+", choices=sorted(LAYER_KINDS), default=["full", "lsh"],
                        help="sdpa with --ours-layer: which of our attention kinds to add (default: full lsh)")
    parser.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="sdpa: where PyTorch runs (cuda: the GPU; pair with --ours built for it)")
    parser.add_argument("--sdpa-case", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        run_case(args.case[0], int(args.case[1]), int(args.case[2]), args.threads)
        return
    if args.sdpa_case:
        run_sdpa_case(args.sdpa_case, args.threads, args.device)
        return
    if args.impl == "sdpa":
        main_sdpa(args)
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

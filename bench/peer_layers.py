#!/usr/bin/env python3
"""One attention layer of a PyTorch peer, timed the way bench_attention's
BM_AttentionLayer times ours: d_model 256 as 4 heads of 64, batch 1, causal,
float32, forward + backward with a random dy, projections included; the best
of 3 runs after one warm-up. Prints one JSON line.

  --layer sdpa  PyTorch 2's fused scaled_dot_product_attention with q, k, v and
                output projections (bench/torch_attention.py's SdpaLayer)
  --layer lsh   lucidrains' reformer_pytorch.LSHSelfAttention: 2 hash rounds,
                bucket_size 64 (chunks of 64 attending to themselves and one
                chunk back, L/64 buckets), shared QK, causal, no dropout

Memory: the growth of the peak resident set over its value after building the
layer and running it once at L = 256 (libraries, thread pool and parameter
gradients loaded), as in bench/torch_attention.py --impl sdpa.

With --device cuda the layer runs on the GPU (TF32 off), timed between
synchronisations, and the memory is the growth of
torch.cuda.max_memory_allocated over its value after the run at L = 256
(tests/gpu_run.sh bench).

Used by bench/cross_isa.py; run it alone as
  /work/venv/bin/python bench/peer_layers.py --layer lsh --length 4096 --threads 2
"""
import argparse
import json
import os
import resource
import sys
import time
import warnings


def build(kind):
    import torch
    if kind == "sdpa":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import torch_attention
        torch_attention.torch = torch
        return torch_attention.sdpa_layer()
    from reformer_pytorch import LSHSelfAttention
    return LSHSelfAttention(dim=256, heads=4, dim_head=64, bucket_size=64, n_hashes=2,
                            causal=True, dropout=0.0, post_attn_dropout=0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", choices=["sdpa", "lsh"], required=True)
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    if args.length % 128:
        sys.exit(f"peer_layers.py: --length {args.length} must be a multiple of 128 "
                 "(two chunks of 64)")
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    layer = build(args.layer).to(args.device)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def run(length):
        x = torch.randn(1, length, 256, device=args.device, requires_grad=True)
        dy = torch.randn(1, length, 256, device=args.device)
        sync()
        start = time.perf_counter()
        y = layer(x)
        y.backward(dy)
        sync()
        return time.perf_counter() - start

    def peak_now():
        if cuda:
            return torch.cuda.max_memory_allocated() / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    run(256)
    baseline = peak_now()
    run(args.length)  # warm-up at the length
    best = min(run(args.length) for _ in range(3))
    peak = peak_now() - baseline
    from importlib.metadata import version
    peer = "torch" if args.layer == "sdpa" else f"reformer-pytorch {version('reformer-pytorch')}"
    print(json.dumps({"layer": args.layer, "length": args.length, "seconds": best,
                      "peak_MiB": peak, "torch": torch.__version__, "peer": peer,
                      "threads": torch.get_num_threads(), "device": args.device}), flush=True)


if __name__ == "__main__":
    main()

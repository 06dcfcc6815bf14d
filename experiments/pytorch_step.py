#!/usr/bin/env python3
"""Times one training step (forward, loss, backward, Adam) of lucidrains'
reformer_pytorch.ReformerLM at one sequence length and reports its peak memory.

The PyTorch side of `experiments/pytorch_compare.py` (issue: the memory and
speed instrument). The model is the one `reformer memory` builds:
  - vocabulary 256, d_model 256, 4 heads of 64, feed-forward 4 x 256 = 1024
    (GELU), pre-LayerNorm blocks, causal, every dropout 0, axial positions with
    the same shape as ours (the factor pair of L nearest its square root);
  - --model reformer: LSH attention with 2 hashes and bucket_size 64 (chunks of
    64 positions attending to themselves and one chunk back, as ours), reversible
    blocks (reverse_thres 0; --irreversible stores activations instead),
    feed-forward in --ff-chunks slices (8, as in the issue);
  - --model full: use_full_attn=True (reformer_pytorch's full shared-QK
    attention, materialising the L x L scores), stored activations (a plain
    Transformer step), feed-forward unchunked;
  - cross-entropy of the next token over every position, Adam (lr 1e-4).

Each invocation measures one point in its own process. Time: the median of
--steps steps after one warm-up step. Memory: the growth of the process's peak
resident set (ru_maxrss) over its value after `import torch` and one tiny
autograd step (which loads the libraries), so it counts the
parameters, gradients and Adam moments, every activation autograd keeps, and the
allocator's slack; it is printed as one JSON line.

With --device cuda the model runs on the GPU: the memory is then the growth of
torch.cuda.max_memory_allocated over what was allocated before the model was
built (parameters, gradients, Adam moments and activations; not the caching
allocator's reserve), in float32 without TF32.

Usage (2 threads, as in the issue):
  /usr/bin/python3 experiments/pytorch_step.py --model reformer --length 16384
  python3 experiments/pytorch_step.py --model reformer --length 65536 --device cuda
"""
import argparse
import json
import math
import platform
import resource
import statistics
import sys
import time
import warnings


def axial_shape(length):
    """The factor pair n1 <= n2, n1 * n2 = length, nearest the square root (as ours)."""
    n1 = int(math.isqrt(length))
    while length % n1:
        n1 -= 1
    return n1, length // n1


def build_model(args):
    common = dict(num_tokens=256, dim=256, depth=args.layers, max_seq_len=args.length, heads=4,
                  dim_head=64, causal=True, lsh_dropout=0.0, ff_dropout=0.0, ff_mult=4,
                  post_attn_dropout=0.0, layer_dropout=0.0, axial_position_emb=True,
                  axial_position_shape=axial_shape(args.length))
    if args.model == "full":
        return ReformerLM(**common, use_full_attn=True, ff_chunks=1,
                          reverse_thres=args.length + 1)
    return ReformerLM(**common, bucket_size=64, n_hashes=2, ff_chunks=args.ff_chunks,
                      attn_chunks=1, reverse_thres=args.length + 1 if args.irreversible else 0)


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["reformer", "full"], default="reformer")
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up step")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ff-chunks", type=int, default=8)
    parser.add_argument("--irreversible", action="store_true")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--autocast-bf16", action="store_true",
                        help="forward and loss under torch.autocast(dtype=torch.bfloat16): "
                             "the peer of train.precision = \"bf16\"")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if args.length % 128:
        sys.exit(f"pytorch_step.py: --length {args.length} must be a multiple of 128 "
                 "(two LSH chunks of 64); use 1024, 2048, ...")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # Load the libraries a step pulls in (BLAS, autograd, Adam) before the baseline.
    warm = torch.nn.Linear(64, 64)
    torch.optim.Adam(warm.parameters()).zero_grad()
    warm(torch.ones(8, 64)).sum().backward()
    baseline = max_rss_mib()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        device_baseline = torch.cuda.memory_allocated()
    model = build_model(args).to(args.device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 256, (1, args.length), device=args.device)
    targets = torch.randint(0, 256, (1, args.length), device=args.device)

    def step():
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.autocast_bf16):
            logits = model(ids)
            loss = F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        loss.item()
        return time.perf_counter() - start

    warmup = step()
    times = [step() for _ in range(args.steps)]
    print(json.dumps({
        "model": args.model, "reversible": args.model == "reformer" and not args.irreversible,
        "autocast_bf16": args.autocast_bf16,
        "length": args.length, "layers": args.layers, "ff_chunks": args.ff_chunks,
        "seconds_per_step": statistics.median(times), "step_seconds": times,
        "warmup_seconds": warmup, "peak_rss_growth_MiB": max_rss_mib() - baseline,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "peak_device_MiB": (torch.cuda.max_memory_allocated() - device_baseline) / 2**20
        if cuda else None,
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__, "reformer_pytorch": version("reformer-pytorch"),
        "threads": torch.get_num_threads(), "python": platform.python_version(),
    }), flush=True)


if __name__ == "__main__":
    # The PyPI wheel is a CUDA build; without a GPU autograd warns once. All CPU here.
    warnings.filterwarnings("ignore")
    import torch
    import torch.nn.functional as F
    from importlib.metadata import version
    from reformer_pytorch import ReformerLM

    main()

#!/usr/bin/env python3
"""Trains lucidrains' reformer_pytorch.ReformerLM on the duplication task and
reports the wall time to reach a target accuracy on the second copy.

The PyTorch side of the duplication comparison (Reformer paper, section 5):
  - sequences `0 w 0 w` of length 256, w of 127 symbols uniform in 1..127
    (vocabulary 128, separator 0);
  - ReformerLM: 1 layer, d_model 256, feed-forward hidden 256 (ff_mult 1),
    4 heads of 64, LSH attention with 2 hashes and bucket_size 64, causal,
    learned absolute positions (absolute_position_emb=True; axial off), every
    dropout 0; batch 32, Adam with lr 2e-3 (no schedule, no clipping);
  - loss: cross-entropy of the next-token prediction over the 127 positions
    that predict the second copy only (the second separator predicts w_1, ...,
    w_126 of the second copy predicts w_127);
  - every --eval-every steps: accuracy (argmax == target over those 127
    positions) on a fixed held-out set of --eval-size sequences, with the same
    number of hashes; stop at --target, --max-seconds or --max-steps.

Notes on reformer_pytorch 1.4.4 (read from its source, not from its README):
  - ReformerLM's default position encoding is *not* absolute: with every
    *_position_emb flag off it applies rotary embeddings (FixedPositionalEmbedding
    of dim_head) to the shared qk inside attention. absolute_position_emb=True
    gives the learned nn.Embedding(max_seq_len, d_model) table added to the
    token embeddings; axial_position_emb is off by default.
  - bucket_size is the chunk length: n_buckets = L / bucket_size per round
    (4 at L = 256) and chunks of bucket_size items attend to themselves and one
    chunk back. Hash rotations are drawn anew (torch.randn) on every forward.
  - The blocks are reversible (reverse_thres=0: any length > 0 takes the
    reversible path, which recomputes each block in the backward pass);
    --irreversible stores the activations instead (same weights and maths).
  - ff_chunks defaults to 100 (the feed-forward runs on 100 slices of the
    sequence); this script uses 1 (--ff-chunks), which is the same maths.
  - The feed-forward activation is GELU (ReformerLM's default; --ff-activation).
  - Pre-LayerNorm blocks, a final LayerNorm, an untied output projection; the
    self position is masked to -5e4 (TOKEN_SELF_ATTN_VALUE) and shared-QK keys
    are L2-normalised.

Timing: `wall_seconds` runs from the first training step to the stop and includes
the evaluations; `train_seconds` sums the training steps only (data generation,
forward, backward and the Adam update). The curve holds, per evaluation,
[step, wall seconds, mean training loss over the steps since the previous
evaluation, held-out accuracy]. `cpu_seconds` is the process CPU time (user +
system, all threads) over the same span as wall_seconds, and the load average is
recorded at the end: cpu_seconds / wall_seconds well under the thread count says
the run shared its cores. On a loaded machine the wall times are not comparable
(2 OpenMP threads on 2 busy cores wait at every barrier for a time slice), and
cpu_seconds / threads is only a rough hint of an unloaded time, since waiting
threads spin for a while before they sleep.

Usage (2 threads, as in the issue):
  nice -n 5 /work/venv/bin/python experiments/duplication_reformer_pytorch.py \
      --out duplication_pytorch.json
"""
import argparse
import json
import os
import platform
import sys
import time
import warnings

SEQ_LEN, VOCAB, SEP = 256, 128, 0
HALF = SEQ_LEN // 2          # 128: separator + 127 symbols
WORD = HALF - 1              # 127 symbols per copy
# Logit positions that predict the second copy: 128 (second separator) .. 254.
PRED_FROM, PRED_TO = HALF, SEQ_LEN - 1


def make_batch(batch, generator):
    """`0 w 0 w` with w uniform in 1..VOCAB-1."""
    w = torch.randint(1, VOCAB, (batch, WORD), generator=generator)
    sep = torch.full((batch, 1), SEP, dtype=torch.long)
    return torch.cat([sep, w, sep, w], dim=1)


def second_copy_logits_targets(model, seqs):
    logits = model(seqs)[:, PRED_FROM:PRED_TO]    # [b, 127, vocab]
    targets = seqs[:, PRED_FROM + 1:]             # [b, 127]
    return logits, targets


def evaluate(model, eval_set, batch):
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    with torch.no_grad():
        for start in range(0, eval_set.shape[0], batch):
            seqs = eval_set[start:start + batch]
            logits, targets = second_copy_logits_targets(model, seqs)
            loss_sum += F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1),
                                        reduction="sum").item()
            correct += (logits.argmax(dim=-1) == targets).sum().item()
            total += targets.numel()
    model.train()
    return correct / total, loss_sum / total


def build_model(args):
    activation = {"gelu": nn.GELU, "relu": nn.ReLU}[args.ff_activation]
    return ReformerLM(
        num_tokens=VOCAB,
        dim=256,
        depth=1,
        max_seq_len=SEQ_LEN,
        heads=4,
        dim_head=64,
        bucket_size=64,
        n_hashes=2,
        ff_chunks=args.ff_chunks,
        attn_chunks=1,
        causal=True,
        lsh_dropout=0.0,
        ff_dropout=0.0,
        ff_mult=1,
        ff_activation=activation,
        post_attn_dropout=0.0,
        layer_dropout=0.0,
        # Reversible unless --irreversible (then no length takes the reversible path).
        reverse_thres=SEQ_LEN if args.irreversible else 0,
        absolute_position_emb=True,
        axial_position_emb=False,
        fixed_position_emb=False,
        use_full_attn=False,
        full_attn_thres=0,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=0.95, help="held-out accuracy to stop at")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="wall-time limit")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=10, help="steps between evaluations")
    parser.add_argument("--eval-size", type=int, default=256, help="held-out sequences")
    parser.add_argument("--eval-batch", type=int, default=32,
                        help="sequences per evaluation forward (larger is slower per sequence on CPU)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ff-chunks", type=int, default=1, help="ReformerLM ff_chunks (library default 100)")
    parser.add_argument("--ff-activation", choices=["gelu", "relu"], default="gelu")
    parser.add_argument("--irreversible", action="store_true",
                        help="store activations instead of the reversible recompute")
    parser.add_argument("--out", default=None, help="JSON result path")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # parameters, and the hash rotations drawn in each forward
    train_gen = torch.Generator().manual_seed(args.seed)
    eval_gen = torch.Generator().manual_seed(args.seed + 1_000_003)
    eval_set = make_batch(args.eval_size, eval_gen)

    model = build_model(args)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    n_params = sum(p.numel() for p in model.parameters())

    config = {
        "seq_len": SEQ_LEN, "vocab": VOCAB, "layers": 1, "d_model": 256, "ff_hidden": 256,
        "heads": 4, "dim_head": 64, "attention": "lsh", "n_hashes": 2, "bucket_size": 64,
        "n_buckets_per_round": SEQ_LEN // 64, "causal": True, "positions": "learned absolute",
        "reversible": not args.irreversible, "ff_activation": args.ff_activation,
        "ff_chunks": args.ff_chunks, "dropout": 0.0, "batch": args.batch, "optimizer": "Adam",
        "lr": args.lr, "eval_every": args.eval_every, "eval_size": args.eval_size,
        "target": args.target, "max_seconds": args.max_seconds, "max_steps": args.max_steps,
        "seed": args.seed, "parameters": n_params,
        "loss": "cross-entropy over the 127 positions predicting the second copy",
    }
    print(f"torch {torch.__version__}, reformer_pytorch {reformer_version}, "
          f"{torch.get_num_threads()} threads, {n_params} parameters", flush=True)

    curve = []
    step = 0
    train_seconds = 0.0
    loss_sum, loss_count = 0.0, 0
    accuracy, eval_loss = 0.0, float("nan")
    stop_reason = None
    start = time.perf_counter()
    cpu_start = time.process_time()
    while True:
        t0 = time.perf_counter()
        seqs = make_batch(args.batch, train_gen)
        logits, targets = second_copy_logits_targets(model, seqs)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()
        train_seconds += time.perf_counter() - t0
        step += 1
        loss_sum += loss_value
        loss_count += 1

        at_limit = (args.max_steps is not None and step >= args.max_steps) or \
            time.perf_counter() - start >= args.max_seconds
        if step % args.eval_every == 0 or at_limit:
            accuracy, eval_loss = evaluate(model, eval_set, args.eval_batch)
            wall = time.perf_counter() - start
            train_loss = loss_sum / loss_count
            loss_sum, loss_count = 0.0, 0
            curve.append([step, round(wall, 3), round(train_loss, 5), round(accuracy, 5)])
            cpu = time.process_time() - cpu_start
            print(f"step {step:5d}  wall {wall:8.1f} s  train {train_seconds:8.1f} s  cpu {cpu:8.1f} s  "
                  f"loss {train_loss:.4f}  eval loss {eval_loss:.4f}  acc {accuracy:.4f}", flush=True)
            if accuracy >= args.target:
                stop_reason = "target"
            elif args.max_steps is not None and step >= args.max_steps:
                stop_reason = "max_steps"
            elif wall >= args.max_seconds:
                stop_reason = "max_seconds"
            if stop_reason:
                break
    wall_seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start

    result = {
        "reached_target": stop_reason == "target",
        "stop_reason": stop_reason,
        "steps": step,
        "wall_seconds": wall_seconds,
        "train_seconds": train_seconds,
        "eval_seconds": wall_seconds - train_seconds,
        "cpu_seconds": cpu_seconds,
        "load_average_at_end": os.getloadavg(),
        "final_accuracy": accuracy,
        "final_eval_loss": eval_loss,
        "curve_columns": ["step", "wall_seconds", "mean_train_loss_since_last_eval", "accuracy"],
        "curve": curve,
        "torch_version": torch.__version__,
        "reformer_pytorch_version": reformer_version,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "argv": sys.argv,
        "config": config,
    }
    print(f"{stop_reason}: accuracy {accuracy:.4f} after {step} steps, {wall_seconds:.1f} s wall "
          f"({train_seconds:.1f} s training, {cpu_seconds:.1f} s CPU)", flush=True)
    if args.out:
        # One line per curve point.
        text = json.dumps({k: v for k, v in result.items() if k != "curve"}, indent=1)
        rows = ",\n  ".join(json.dumps(row) for row in curve)
        text = text[:-2] + f',\n "curve": [\n  {rows}\n ]\n}}\n'
        json.loads(text)
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    # The PyPI wheel is a CUDA build; on a machine with an old driver and no GPU
    # autograd warns once about CUDA initialisation. Everything here is CPU.
    warnings.filterwarnings("ignore", message="CUDA initialization")
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from importlib.metadata import version
    from reformer_pytorch import ReformerLM

    reformer_version = version("reformer-pytorch")
    main()

#!/usr/bin/env python3
"""Times one training step (forward, loss, backward, Adam) of PyTorch's
nn.TransformerEncoder classifier at Long Range Arena's byte-level text
classification sizes and reports its peak memory (issue 48: the LRA efficiency
table).

This is the model a user would pick instead of our classifier: a stock
`torch.nn.TransformerEncoder`, sized as LRA's text task. Where each number
comes from (google-research/long-range-arena at cd31e5c, and Tay et al., "Long
Range Arena: A Benchmark for Efficient Transformers", ICLR 2021, arXiv
2011.04006):
  - vocabulary 257: the text task encodes bytes with
    tfds.deprecated.text.ByteTextEncoder (text_classification/input_pipeline.py),
    whose ids are byte + 1 with 0 for padding, vocab_size 2**8 + 1 = 257; the
    input ids here are drawn from 1..256 and 0 marks padding;
  - d_model 256, 4 heads, feed-forward 1024, 4 layers, batch 32:
    text_classification/configs/base_tc_config.py (emb_dim = qkv_dim = 256,
    num_heads 4, mlp_dim 1024, num_layers 4, batch_size 32), which
    configs/transformer_base.py uses unchanged. The paper's appendix A.1.2
    instead describes 512 hidden, 8 heads, FFN 2048, 6 layers for this task;
    which of the two sized Table 2 is not stated. Use --layers to change depth;
  - batch 32 is also the efficiency benchmark's: Sec. 3.4 and the caption of
    Table 2 ("a consistent batch size of 32 across all models", 4x4 TPU V3
    chips, memory per TPU device). That batch was split over the TPU devices,
    so the per-device batch was smaller; --batch takes any size;
  - lengths 1K, 2K, 3K, 4K: Table 2's columns (--length; the released config's
    max_length is 1000 for the "1K" run, the paper does not say 1000 or 1024);
  - pre-LayerNorm blocks and a final LayerNorm (norm_first=True here):
    models/transformer/transformer.py (TransformerBlock applies LayerNorm before
    attention and before the MLP; TransformerEncoder ends with encoder_norm);
  - GELU in the feed-forward: models/layers/common_layers.py (MlpBlock uses
    nn.gelu);
  - fixed sinusoidal positions (not learned): TransformerEncoder's
    learn_pos_emb defaults to False and the text train.py does not set it, so
    AddPositionEmbs uses sinusoidal_init (sin on even, cos on odd features);
  - dropout 0 everywhere (timing only; LRA trains with 0.1).
Deliberate differences from LRA's text model, as issue 48 asks: mean pooling
over the non-padding positions and one linear layer to 2 classes (LRA prepends
a [CLS] token and uses a Dense(mlp_dim)-ReLU-Dense(2) head, classifier_head);
PyTorch's attention projections carry biases (LRA's SelfAttention has
bias=False); Adam at a constant lr 1e-4 (LRA: 0.05 with warm-up, rsqrt decay,
weight decay 0.1). None of these changes the cost by more than a sliver.

Attention masks (--fast-path): by default the encoder is built with
enable_nested_tensor=False and called with a src_key_padding_mask of all-valid
rows, the way a padded batch is fed; attention then runs with a mask. With
--fast-path it is built with enable_nested_tensor=True and called without a
mask, so scaled_dot_product_attention may take its fused kernel. (PyTorch's
nested-tensor fast path itself only runs in inference and is disabled with
norm_first=True, so in a training step the difference is the mask.)

Each invocation measures one point in its own process. Time: the median of
--steps steps after one warm-up step. Memory: the growth of the process's peak
resident set (ru_maxrss) over its value after `import torch` and one tiny
autograd step (which loads the libraries), so it counts the parameters,
gradients and Adam moments, every activation autograd keeps, and the
allocator's slack; printed in bytes in one JSON line, as
experiments/pytorch_step.py does.

--pairs is LRA's Retrieval model as our two-tower classifier builds it
(models/classifier.hpp, documents = 2): each example is two documents of
--length bytes, both encoded by the one encoder (a batch of 2 x --batch
sequences), mean-pooled into u and v, and a linear head on [u, v, u * v,
u - v]. LRA's matching config sizes it (lra_benchmarks/matching/configs/
base_match_config.py): --d-model 128 --heads 4 --d-ff 512 --layers 4, length
4000.

Usage (2 threads, as in the issue):
  /work/venv/bin/python experiments/lra_pytorch.py --length 1024
  /work/venv/bin/python experiments/lra_pytorch.py --length 4096 --batch 8 --fast-path
  /work/venv/bin/python experiments/lra_pytorch.py --pairs --length 4000 --batch 1 \
      --d-model 128 --heads 4 --d-ff 512 --fast-path
"""
import argparse
import json
import math
import resource
import statistics
import sys
import time
import warnings

# The PyPI wheel is a CUDA build; without a GPU it warns once, and
# TransformerEncoder warns that norm_first disables nested tensors. All CPU here.
warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB = 257  # ByteTextEncoder: bytes 0..255 as ids 1..256, 0 = padding
CLASSES = 2


def max_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def sinusoidal_table(length, dim):
    """LRA's sinusoidal_init: sin on even features, cos on odd ones, (1, L, d)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * -(math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table[None]


class Classifier(torch.nn.Module):
    def __init__(self, length, layers, fast_path, d_model=256, heads=4, d_ff=1024, pairs=False):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, d_model, padding_idx=0)
        torch.nn.init.normal_(self.embed.weight, std=1.0)  # LRA's Embed init
        self.register_buffer("positions", sinusoidal_table(length, d_model), persistent=False)
        block = torch.nn.TransformerEncoderLayer(
            d_model=d_model, nhead=heads, dim_feedforward=d_ff, dropout=0.0,
            activation="gelu", batch_first=True, norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(
            block, num_layers=layers, norm=torch.nn.LayerNorm(d_model),
            enable_nested_tensor=fast_path)
        # Pairs: the head reads [u, v, u * v, u - v] (4 d_model).
        self.head = torch.nn.Linear(4 * d_model if pairs else d_model, CLASSES)
        self.fast_path = fast_path
        self.pairs = pairs

    def forward(self, ids):
        valid = ids != 0
        x = self.embed(ids) + self.positions[:, :ids.shape[1]]
        if self.fast_path:
            x = self.encoder(x)
        else:
            x = self.encoder(x, src_key_padding_mask=~valid)
        weights = valid.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp_min(1.0)
        if self.pairs:  # rows 2b and 2b + 1 are the documents of example b
            u, v = pooled[0::2], pooled[1::2]
            pooled = torch.cat([u, v, u * v, u - v], dim=-1)
        return self.head(pooled)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1024,
                        help="sequence length (LRA Table 2: 1024, 2048, 3072, 4096)")
    parser.add_argument("--batch", type=int, default=32,
                        help="sequences a step (LRA's efficiency benchmark: 32)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--pairs", action="store_true",
                        help="LRA's Retrieval two-tower model: two documents an example")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fast-path", action="store_true",
                        help="enable_nested_tensor=True and no src_key_padding_mask "
                             "(default: a mask of all-valid rows, as a padded batch)")
    args = parser.parse_args()
    if args.length < 1 or args.batch < 1 or args.layers < 1 or args.steps < 1:
        sys.exit("lra_pytorch.py: --length, --batch, --layers and --steps must be positive")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # Load the libraries a step pulls in (BLAS, autograd, Adam) before the baseline.
    warm = torch.nn.Linear(64, 64)
    torch.optim.Adam(warm.parameters()).zero_grad()
    warm(torch.ones(8, 64)).sum().backward()
    baseline = max_rss_bytes()

    model = Classifier(args.length, args.layers, args.fast_path, args.d_model, args.heads,
                       args.d_ff, args.pairs)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    documents = 2 if args.pairs else 1
    ids = torch.randint(1, VOCAB, (args.batch * documents, args.length))  # all valid: no padding
    labels = torch.randint(0, CLASSES, (args.batch,))

    def step():
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(ids), labels)
        loss.backward()
        optimizer.step()
        loss.item()
        return time.perf_counter() - start

    step()  # warm-up
    times = [step() for _ in range(args.steps)]
    print(json.dumps({
        "model": "torch_transformer_encoder", "length": args.length, "batch": args.batch,
        "documents": documents, "d_model": args.d_model,
        "layers": args.layers, "seconds_per_step": statistics.median(times),
        "peak_bytes": max_rss_bytes() - baseline, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "fast_path": args.fast_path, "step_seconds": times,
        "parameters": sum(p.numel() for p in model.parameters()),
    }), flush=True)


if __name__ == "__main__":
    main()

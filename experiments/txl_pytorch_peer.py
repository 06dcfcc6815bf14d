#!/usr/bin/env python3
"""Hugging Face's Transformer-XL (TransfoXLLMHeadModel, PyTorch) at the size of
experiments/txl_cpu.toml, timed as our `reformer train` / `reformer eval` run it:
training steps (forward, backward, Adam) on batch x tgt_len bytes over a memory,
and evaluation with a memory. Prints tokens/s, one line each.

  /work/venv/bin/python experiments/txl_pytorch_peer.py [--threads 2] [--steps 40]

The model: 4 post-LN layers, d_model 128, 4 heads of 32, d_inner 512, vocabulary
256 with a plain softmax (no adaptive cutoffs), mem_len 64, tgt_len 64, batch 16,
dropout 0.1, untied output (our config's defaults). Random bytes: the speed does
not depend on the text.
"""
import argparse
import time
import warnings

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tgt-len", type=int, default=64)
    parser.add_argument("--mem-len", type=int, default=64)
    parser.add_argument("--eval-mem-len", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    # transformers 4.46's deprecated Transformer-XL calls tensor.type_as(dtype=...),
    # which torch 2 refuses; the intent is a cast to that dtype.
    type_as = torch.Tensor.type_as

    def patched_type_as(self, other=None, dtype=None):
        return self.to(dtype) if other is None else type_as(self, other)

    torch.Tensor.type_as = patched_type_as
    from transformers import TransfoXLConfig, TransfoXLLMHeadModel

    config = TransfoXLConfig(vocab_size=256, cutoffs=[], d_model=128, d_embed=128, n_head=4,
                             d_head=32, d_inner=512, div_val=1, pre_lnorm=False, n_layer=4,
                             mem_len=args.mem_len, clamp_len=-1, same_length=False,
                             dropout=0.1, dropatt=0.0, untie_r=True, adaptive=False,
                             tie_word_embeddings=False)
    model = TransfoXLLMHeadModel(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    b, L = args.batch, args.tgt_len
    data = torch.randint(0, 256, (b, (args.steps + 12) * L + 1))

    def segment(i):
        return data[:, i * L:(i + 1) * L], data[:, i * L + 1:(i + 1) * L + 1]

    model.train()
    mems = None
    for i in range(args.steps + 5):
        if i == 5:
            start = time.perf_counter()
        x, y = segment(i)
        out = model(input_ids=x, labels=y, mems=mems)
        mems = out.mems
        loss = out.losses.mean() if out.losses is not None else out.loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
    seconds = time.perf_counter() - start
    print(f"hf transfo-xl train: {args.steps * b * L / seconds:.0f} tokens/s "
          f"({seconds / args.steps * 1000:.1f} ms/step, torch {torch.__version__}, "
          f"{args.threads} threads)")

    model.eval()
    model.reset_memory_length(args.eval_mem_len)
    mems = None
    with torch.no_grad():
        for i in range(args.steps + 5):
            if i == 5:
                start = time.perf_counter()
            x, y = segment(i)
            out = model(input_ids=x, labels=y, mems=mems)
            mems = out.mems
    seconds = time.perf_counter() - start
    print(f"hf transfo-xl eval (mem_len {args.eval_mem_len}): "
          f"{args.steps * b * L / seconds:.0f} tokens/s")


if __name__ == "__main__":
    main()

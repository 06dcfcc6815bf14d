#!/usr/bin/env python3
"""Builds the committed test fixtures of the Hugging Face importer.

Needs PyTorch and transformers 4.46.3 (the /work/venv of the development
machine, not the CI machine); run once, the output is committed:

    /work/venv/bin/python experiments/hf_import/make_fixture.py

For each fixture it builds a tiny Hugging Face ``ReformerModelWithLMHead`` in
double precision with random weights (a fixed torch seed), saves it with
``save_pretrained(folder, safe_serialization=True)`` and records, in
``expected.h5`` next to it, given tokens and the logits and loss HF computes for
them. HF draws its LSH rotations with ``torch.randn`` on every call; here every
LSH layer gets instead the rotations this project draws for the same layer
under a fixed call key (the ``torch.randn`` of HF's hashing is replaced during
that call, the hashing itself is HF's), so that ``ReformerLM<double>`` run with
that key must reproduce the logits (tests/hf_import/test_hf_import.cpp).

expected.h5: tokens [batch, length] int64, logits [batch, length, vocab]
float64, loss (scalar float64, HF's shifted next-token cross-entropy), and the
rotations/<layer> (the rotations each LSH layer hashed with, [heads, d_head,
n_hashes, width]), and the root attributes key_seed, key_stream (uint64: the ModelCall key),
transformers_version, torch_version.
"""

import argparse
import json
import math
import os
import shutil
import sys

import h5py
import numpy as np
import torch
import transformers
from transformers import ReformerConfig, ReformerModelWithLMHead

# ---------------------------------------------------------------------------
# The project's counter-based RNG, mirrored from include/reformer/core/random.hpp
# (mix64, stream_id, random_bits, random_uniform, random_normal). Keep the two in
# step: a change there changes every LSH rotation and breaks the fixtures.
# ---------------------------------------------------------------------------
MASK = (1 << 64) - 1


def mix64(x):
    """SplitMix64 finaliser (random.hpp mix64)."""
    x &= MASK
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK
    x ^= x >> 31
    return x


def stream_id(a, b=0, c=0):
    """random.hpp stream_id(a, b, c)."""
    inner = mix64((a + 0x9E3779B97F4A7C15) & MASK) ^ b
    return mix64((mix64(inner) + ((0x632BE59BD9B4E019 * c) & MASK)) & MASK)


def random_bits(seed, stream, index):
    s = mix64(seed ^ 0xD1B54A32D192ED03) ^ mix64((stream + 0x8CB92BA72F3D8DD7) & MASK)
    return mix64((s + ((0x9E3779B97F4A7C15 * (index + 1)) & MASK)) & MASK)


def random_uniform(seed, stream, index):
    return float(random_bits(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0)


def random_normal(seed, stream, index):
    """Box-Muller from the uniforms at 2*index and 2*index+1 (random.hpp)."""
    u1 = 1.0 - random_uniform(seed, stream, 2 * index)
    u2 = random_uniform(seed, stream, 2 * index + 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


# Stream constants of the model's call tree (keep in step with the C++):
K_LAYERS = 2  # src/models/reformer_lm.cpp, enum Stream: kLayers
K_ATTENTION = 1  # src/layers/blocks.cpp, enum Stream: kAttention
K_ROTATIONS = 1  # src/attention/attention_layer.cpp, enum Stream: kRotations


def layer_rotations(seed, stream, layer, shape):
    """The rotations lsh_random_rotations draws for `layer` of a ReformerLM
    called with key {seed, stream}: ReformerLM::block_call gives the block
    {seed, stream_id(stream, kLayers, layer)}, the block's attention call
    {seed, stream_id(block, kAttention)}, and AttentionLayer::run draws
    lsh_random_rotations(sub_key(call, kRotations)), element i of the flat
    [heads, d_head, n_hashes, width] array being random_normal(key, i)."""
    block = stream_id(stream, K_LAYERS, layer)
    attention = stream_id(block, K_ATTENTION)
    rotations = stream_id(attention, K_ROTATIONS)
    n = int(np.prod(shape))
    flat = np.array([random_normal(seed, rotations, i) for i in range(n)], dtype=np.float64)
    return flat.reshape(shape)


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------
FIXTURES = {
    # Four layers alternating local and LSH, axial positions, factored buckets,
    # two hash rounds, chunked feed-forward, exact GELU, heads * d_head (16)
    # different from hidden_size (24), layer_norm_eps 1e-12 (HF's default).
    "hf_reformer_tiny": dict(
        attn_layers=["local", "lsh", "local", "lsh"],
        vocab_size=37,
        hidden_size=24,
        feed_forward_size=40,
        num_attention_heads=2,
        attention_head_size=8,
        axial_pos_embds=True,
        axial_pos_shape=[4, 8],
        axial_pos_embds_dim=[8, 16],
        max_position_embeddings=32,
        lsh_attn_chunk_length=8,
        local_attn_chunk_length=8,
        lsh_num_chunks_before=1,
        local_num_chunks_before=1,
        num_buckets=[2, 4],
        num_hashes=2,
        chunk_size_feed_forward=8,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        lsh_attention_probs_dropout_prob=0.0,
        local_attention_probs_dropout_prob=0.05,
    ),
    # Two layers, LSH first, learned positions, one bucket count, one hash
    # round, ReLU, no feed-forward chunking.
    "hf_reformer_tiny_learned": dict(
        attn_layers=["lsh", "local"],
        vocab_size=29,
        hidden_size=16,
        feed_forward_size=24,
        num_attention_heads=2,
        attention_head_size=8,
        axial_pos_embds=False,
        max_position_embeddings=32,
        lsh_attn_chunk_length=4,
        local_attn_chunk_length=8,
        num_buckets=4,
        num_hashes=1,
        chunk_size_feed_forward=0,
        hidden_act="relu",
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.0,
        lsh_attention_probs_dropout_prob=0.0,
        local_attention_probs_dropout_prob=0.0,
    ),
}

KEY_SEED = 20200113  # the ModelCall key the C++ test runs with
KEY_STREAM = 7
BATCH = 2


def randomise(model, generator):
    """Weights of a usable scale (HF's own init, N(0, 0.02), makes every
    attention nearly uniform): matrices N(0, 1/fan_in), LayerNorm gains
    1 + N(0, 0.1^2), biases and shifts N(0, 0.1^2), embeddings N(0, 1)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64)
            if "layer_norm.weight" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias") or "layer_norm.bias" in name:
                p.copy_(0.1 * noise)
            elif "embeddings" in name:
                p.copy_(noise)
            else:  # nn.Linear weight [out, in]
                p.copy_(noise / math.sqrt(p.shape[-1]))


def inject_rotations(model, config, seed, stream, record):
    """Every LSH layer hashes with this project's rotations for its index."""
    for layer_id, layer in enumerate(model.reformer.encoder.layers):
        attention = layer.attention.self_attention
        if config.attn_layers[layer_id] != "lsh":
            continue
        original = attention._hash_vectors

        def hashed(*args, _original=original, _layer=layer_id, **kwargs):
            real_randn = torch.randn

            def our_randn(shape, **options):
                rotations = layer_rotations(seed, stream, _layer, tuple(shape))
                record[_layer] = rotations
                return torch.from_numpy(rotations).to(dtype=options.get("dtype", torch.float64))

            torch.randn = our_randn
            try:
                return _original(*args, **kwargs)
            finally:
                torch.randn = real_randn

        attention._hash_vectors = hashed


def build(name, overrides, root):
    folder = os.path.join(root, name)
    settings = dict(FIXTURES[name])
    settings.update(overrides)
    config = ReformerConfig(is_decoder=True, tie_word_embeddings=False, **settings)
    torch.manual_seed(12345)
    model = ReformerModelWithLMHead(config).double()
    randomise(model, torch.Generator().manual_seed(2020))
    model.eval()

    if os.path.exists(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder, safe_serialization=True)
    # generation_config.json says nothing the importer reads.
    extra = os.path.join(folder, "generation_config.json")
    if os.path.exists(extra):
        os.remove(extra)

    length = (
        int(np.prod(config.axial_pos_shape))
        if config.axial_pos_embds
        else config.max_position_embeddings
    )
    rng = np.random.default_rng(17)
    # Ids from 1: the C++ test marks the target after the last position with 0
    # and ignores it, giving HF's shifted loss.
    tokens = rng.integers(1, config.vocab_size, size=(BATCH, length), dtype=np.int64)

    used = {}  # layer -> the rotations HF hashed with
    inject_rotations(model, config, KEY_SEED, KEY_STREAM, used)
    ids = torch.from_numpy(tokens)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    logits = out.logits.numpy()
    assert logits.dtype == np.float64 and logits.shape == (BATCH, length, config.vocab_size)

    with h5py.File(os.path.join(folder, "expected.h5"), "w") as f:
        f.create_dataset("tokens", data=tokens)
        f.create_dataset("logits", data=logits)
        f.create_dataset("loss", data=np.float64(out.loss.item()))
        for layer, rotations in sorted(used.items()):
            f.create_dataset(f"rotations/{layer}", data=rotations)
        f.attrs["key_seed"] = np.uint64(KEY_SEED)
        f.attrs["key_stream"] = np.uint64(KEY_STREAM)
        f.attrs["transformers_version"] = transformers.__version__
        f.attrs["torch_version"] = str(torch.__version__)
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"{folder}: {length} tokens x {BATCH}, loss {out.loss.item():.6f}, {size} bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument(
        "--out",
        default=os.path.join(here, "..", "..", "tests", "fixtures"),
        help="folder to write the fixtures into (default: tests/fixtures)",
    )
    parser.add_argument("--only", choices=sorted(FIXTURES), help="build one fixture")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="override a ReformerConfig setting (e.g. layer_norm_eps=1e-5), for experiments",
    )
    args = parser.parse_args()
    if transformers.__version__ != "4.46.3":
        print(f"warning: transformers {transformers.__version__}, the fixtures were made with 4.46.3",
              file=sys.stderr)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    for name in [args.only] if args.only else sorted(FIXTURES):
        build(name, overrides, os.path.abspath(args.out))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Imports a Hugging Face Reformer language model into a run folder of this project.

    python3 experiments/hf_import/import_hf_reformer.py HF_FOLDER OUT_FOLDER [options]

HF_FOLDER is what ``save_pretrained`` writes for a ``ReformerModelWithLMHead``:
config.json and model.safetensors (or sharded model-0000x-of-0000y.safetensors
with model.safetensors.index.json). OUT_FOLDER becomes a run folder that
``reformer eval OUT_FOLDER`` and ``reformer generate OUT_FOLDER`` read:

    OUT_FOLDER/config.toml                    the run config (TOML), also stored in
    OUT_FOLDER/checkpoints/step_00000000.h5   the checkpoint (weights, no optimizer
                                              state unless --optimizer-state)

Needs only numpy and h5py (Debian's python3-numpy and python3-h5py);
safetensors.numpy is used when it is installed, otherwise a reader of the
documented safetensors layout built in here. A PyTorch pickle
(pytorch_model.bin) cannot be read without torch: convert it first with
``save_pretrained(..., safe_serialization=True)``.

What the project cannot express is refused with one line on stderr naming the
config key and its value (or the tensor and its shape), and exit status 2:
look-ahead chunks, hash_seed, a non-causal model with local layers, more than
two axial axes, activations other than relu and (exact) gelu, num_buckets left
unset, more than two bucket factors, tied word embeddings, head sizes above 128,
and weights whose names or shapes do not match the config (docs/import.md).

The name mapping (HF -> this project; every matrix transposed, since HF's
nn.Linear stores [out, in] and this project [in, out]):
    reformer.embeddings.word_embeddings.weight            embed.table
    reformer.embeddings.position_embeddings.weights.0/1   pos.axial_1/2 (squeezed)
    reformer.embeddings.position_embeddings.embedding.weight  pos.table
    reformer.encoder.layers.<i>.attention.layer_norm.*    layers.<i>.attn_norm.gamma/beta
    ....attention.self_attention.query_key.weight (LSH)   layers.<i>.attn.w_qk
    ....attention.self_attention.query/key/value.weight   layers.<i>.attn.w_q/w_k/w_v
    ....attention.output.dense.weight                     layers.<i>.attn.w_o
    ....feed_forward.layer_norm.*                         layers.<i>.ff.norm.gamma/beta
    ....feed_forward.dense.dense.weight/bias              layers.<i>.ff.w1/b1
    ....feed_forward.output.dense.weight/bias             layers.<i>.ff.w2/b2
    reformer.encoder.layer_norm.*                         out.norm.gamma/beta
    lm_head.decoder.weight, lm_head.bias                  out.w, out.b

The checkpoint is written here with h5py exactly as src/io/checkpoint.cpp
writes one (format version 2, including its meta_checksum, ported below); the
test in the test command (tests/hf_import) loads it with the C++ loader, so a
change of the format on either side fails there.
"""

import argparse
import json
import math
import os
import struct
import sys

import h5py
import numpy as np

FORMAT_VERSION = 2  # src/io/checkpoint.hpp kCheckpointFormatVersion
MAX_HEAD_DIM = 128  # include/reformer/attention/masks.hpp kMaxHeadDim (LSH and local kernels)
MAX_HASHES = 64  # src/attention/lsh.cpp kMaxHashes
EXACT_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_python": "gelu"}

# Hugging Face's ReformerConfig defaults (transformers 4.46.3), for keys a
# config.json may leave out.
HF_DEFAULTS = {
    "attention_head_size": 64,
    "attn_layers": ["local", "lsh", "local", "lsh", "local", "lsh"],
    "axial_pos_embds": True,
    "axial_pos_shape": [64, 64],
    "axial_pos_embds_dim": [64, 192],
    "chunk_size_feed_forward": 0,
    "feed_forward_size": 512,
    "hash_seed": None,
    "hidden_act": "relu",
    "hidden_dropout_prob": 0.05,
    "hidden_size": 256,
    "is_decoder": False,
    "layer_norm_eps": 1e-12,
    "local_num_chunks_before": 1,
    "local_num_chunks_after": 0,
    "local_attention_probs_dropout_prob": 0.05,
    "local_attn_chunk_length": 64,
    "lsh_attn_chunk_length": 64,
    "lsh_attention_probs_dropout_prob": 0.0,
    "lsh_num_chunks_before": 1,
    "lsh_num_chunks_after": 0,
    "max_position_embeddings": 4096,
    "num_attention_heads": 12,
    "num_buckets": None,
    "num_hashes": 1,
    "tie_word_embeddings": False,
    "vocab_size": 320,
}


class Refusal(Exception):
    """Something the importer cannot or will not convert; one line for stderr."""


# ---------------------------------------------------------------------------
# Reading the weights
# ---------------------------------------------------------------------------
_SAFETENSORS_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": None,  # bfloat16: the upper half of a float32, converted below
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def read_safetensors_builtin(path):
    """A .safetensors file by its documented layout: an 8-byte little-endian
    header size N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin,
    end]}, "__metadata__": {...}}, then the raw little-endian data, offsets
    counted from the end of the header."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise Refusal(f"{path}: {len(blob)} bytes, too short for a safetensors file")
    (size,) = struct.unpack("<Q", blob[:8])
    if 8 + size > len(blob):
        raise Refusal(f"{path}: header of {size} bytes runs past the end of the file "
                      f"({len(blob)} bytes); the file is truncated or not safetensors")
    try:
        header = json.loads(blob[8:8 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Refusal(f"{path}: the safetensors header is not JSON ({e})")
    data = memoryview(blob)[8 + size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype_name = info.get("dtype")
        shape = [int(s) for s in info.get("shape", [])]
        begin, end = (int(x) for x in info.get("data_offsets", [0, 0]))
        if dtype_name not in _SAFETENSORS_DTYPES:
            raise Refusal(f"{path}: tensor {name} has dtype {dtype_name}, which this importer "
                          f"does not read (F64, F32, F16, BF16 and integers)")
        if not 0 <= begin <= end <= len(data):
            raise Refusal(f"{path}: tensor {name} has data_offsets [{begin}, {end}] outside "
                          f"the {len(data)} data bytes")
        count = int(np.prod(shape)) if shape else 1
        if dtype_name == "BF16":
            if end - begin != 2 * count:
                raise Refusal(f"{path}: tensor {name} {shape} BF16 needs {2 * count} bytes, "
                              f"has {end - begin}")
            half = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32)
            array = (half << 16).view(np.float32).reshape(shape)
        else:
            dtype = _SAFETENSORS_DTYPES[dtype_name]
            if end - begin != dtype.itemsize * count:
                raise Refusal(f"{path}: tensor {name} {shape} {dtype_name} needs "
                              f"{dtype.itemsize * count} bytes, has {end - begin}")
            array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).copy()
        tensors[name] = array
    return tensors


def read_safetensors(path):
    """safetensors.numpy when installed (it does not read BF16), else the
    built-in reader."""
    try:
        from safetensors.numpy import load_file
    except ImportError:
        return read_safetensors_builtin(path)
    try:
        return load_file(path)
    except Exception:  # BF16, or anything it rejects: the built-in reader says what
        return read_safetensors_builtin(path)


def load_weights(folder):
    """Every tensor of the folder's safetensors file(s), by name."""
    single = os.path.join(folder, "model.safetensors")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(single):
        return read_safetensors(single)
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map", {})
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            path = os.path.join(folder, shard)
            if not os.path.isfile(path):
                raise Refusal(f"{index} names the shard {shard}, which is not in {folder}")
            tensors.update(read_safetensors(path))
        return tensors
    for name in ("pytorch_model.bin", "pytorch_model.bin.index.json"):
        if os.path.exists(os.path.join(folder, name)):
            raise Refusal(
                f"{folder} holds {name}, a PyTorch pickle that cannot be read without torch; "
                "convert it where torch and transformers are installed: "
                "ReformerModelWithLMHead.from_pretrained(folder)"
                ".save_pretrained(new_folder, safe_serialization=True), then import new_folder")
    for name in ("tf_model.h5", "flax_model.msgpack"):
        if os.path.exists(os.path.join(folder, name)):
            raise Refusal(
                f"{folder} holds only {name}; load it with transformers and save it with "
                "save_pretrained(new_folder, safe_serialization=True), then import new_folder")
    raise Refusal(f"{folder} has no model.safetensors (nor model.safetensors.index.json); "
                  "save the model with save_pretrained(folder, safe_serialization=True)")


# ---------------------------------------------------------------------------
# The config
# ---------------------------------------------------------------------------
def read_hf_config(folder):
    if not os.path.isdir(folder):
        raise Refusal(f"{folder} is not a folder; give the folder save_pretrained wrote")
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise Refusal(f"{folder} has no config.json; give the folder save_pretrained wrote "
                      "(config.json and model.safetensors)")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except ValueError as e:
        raise Refusal(f"{path} is not valid JSON ({e})")
    if not isinstance(raw, dict):
        raise Refusal(f"{path} holds a JSON {type(raw).__name__}, not an object")
    return raw


def hf_automatic_buckets(length, chunk, max_positions):
    """What Hugging Face sets num_buckets to when it is unset and the first
    input has `length` tokens: the power of two at most 2 * length / chunk,
    split into two factors above 2 * max(sqrt(max_positions / chunk), chunk)."""
    exponent = (2 * (length // chunk)).bit_length() - 1
    limit = 2 * max(int((max_positions // chunk) ** 0.5), chunk)
    if 2 ** exponent > limit:
        return [2 ** (exponent // 2), 2 ** (exponent - exponent // 2)]
    return 2 ** exponent


def lcm(a, b):
    return a * b // math.gcd(a, b)


class HfConfig:
    """config.json with Hugging Face's defaults for missing keys; every
    refusal names the key and its value."""

    def __init__(self, raw, path):
        self.raw = raw
        self.path = path

    def has(self, key):
        return key in self.raw

    def get(self, key):
        return self.raw.get(key, HF_DEFAULTS.get(key))

    def refuse(self, key, why):
        value = json.dumps(self.get(key))
        raise Refusal(f"{self.path}: {key} = {value}: {why}")

    def integer(self, key, minimum=1):
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.refuse(key, f"must be an integer >= {minimum}")
        return value

    def rate(self, key):
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            self.refuse(key, "must be a number in [0, 1)")
        return float(value)

    def int_list(self, key, minimum=1):
        value = self.get(key)
        if (not isinstance(value, list) or not value or
                any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in value)):
            self.refuse(key, f"must be a non-empty list of integers >= {minimum}")
        return value


def convert_config(raw, path):
    """The model section of this project's config, and notes for the user."""
    c = HfConfig(raw, path)
    model_type = raw.get("model_type")
    if model_type is not None and model_type != "reformer":
        c.refuse("model_type", "this importer reads Hugging Face Reformer models only")
    layers = c.get("attn_layers")
    if not isinstance(layers, list) or not layers or any(k not in ("local", "lsh") for k in layers):
        c.refuse("attn_layers", 'must be a non-empty list of "local" and "lsh"')
    uses_lsh, uses_local = "lsh" in layers, "local" in layers
    if c.has("num_hidden_layers") and c.get("num_hidden_layers") != len(layers):
        c.refuse("num_hidden_layers", f"differs from the {len(layers)} entries of attn_layers")

    d_model = c.integer("hidden_size")
    heads = c.integer("num_attention_heads")
    d_head = c.integer("attention_head_size")
    if d_head > MAX_HEAD_DIM:
        c.refuse("attention_head_size",
                 f"this project's LSH and local attention support head sizes up to {MAX_HEAD_DIM}")
    causal = c.get("is_decoder")
    if not isinstance(causal, bool):
        c.refuse("is_decoder", "must be true or false")
    if not causal and uses_local:
        c.refuse("is_decoder", "a non-causal model with local layers: Hugging Face's local "
                 "attention wraps around (the first chunk sees the last one) when not causal, "
                 "this project's does not")
    activation = c.get("hidden_act")
    if not isinstance(activation, str) or activation not in EXACT_ACTIVATIONS:
        c.refuse("hidden_act", "this project has relu and the exact (erf) gelu only "
                 "(Hugging Face names them relu, gelu and gelu_python)")
    if c.get("tie_word_embeddings") not in (False, None):
        c.refuse("tie_word_embeddings", "Hugging Face's Reformer LM head is [vocab_size, "
                 "2 * hidden_size] and cannot be tied to the [vocab_size, hidden_size] word "
                 "embeddings (its forward pass fails); there is no such model to import")
    eps = c.get("layer_norm_eps")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        c.refuse("layer_norm_eps", "must be a positive number")

    model = {
        "type": "reformer",
        "vocab": c.integer("vocab_size"),
        "d_model": d_model,
        "d_ff": c.integer("feed_forward_size"),
        "heads": heads,
        "d_head": d_head,
        "layers": len(layers),
        "attention": list(layers),
        "causal": causal,
        "qk": "auto",  # LSH shares the query/key projection, local does not (as HF)
        "reversible": True,
        "ff_chunk": c.integer("chunk_size_feed_forward", minimum=0),
        "ff_activation": EXACT_ACTIVATIONS[activation],
        "dropout": c.rate("hidden_dropout_prob"),
        "tie_embeddings": False,
        "layer_norm_eps": float(eps),
    }

    max_positions = c.integer("max_position_embeddings")
    axial = c.get("axial_pos_embds")
    if not isinstance(axial, bool):
        c.refuse("axial_pos_embds", "must be true or false")
    if axial:
        shape = c.int_list("axial_pos_shape")
        dims = c.int_list("axial_pos_embds_dim")
        if len(shape) > 2:
            c.refuse("axial_pos_shape", "more than two axial axes; this project's axial "
                     "positions have two")
        if len(dims) != len(shape):
            c.refuse("axial_pos_embds_dim", f"has {len(dims)} entries but axial_pos_shape has "
                     f"{len(shape)}")
        if sum(dims) != d_model:
            c.refuse("axial_pos_embds_dim", f"must sum to hidden_size = {d_model}")
        if len(shape) == 2:
            model.update(positions="axial", max_length=shape[0] * shape[1],
                         axial_shape=list(shape), axial_dims=list(dims))
        else:  # one axis: a plain table of learned positions
            model.update(positions="learned", max_length=shape[0])
        longest = min(max_positions, int(np.prod(shape)))
    else:
        model.update(positions="learned", max_length=max_positions)
        longest = max_positions

    # Attention settings of the kinds the model uses.
    lsh, local = {}, {}
    chunk = 1
    if uses_lsh:
        if c.get("lsh_num_chunks_after") != 0:
            c.refuse("lsh_num_chunks_after", "look-ahead chunks: this project's LSH chunks "
                     "attend only to themselves and the chunks before")
        if c.get("hash_seed") is not None:
            c.refuse("hash_seed", "Hugging Face reseeds torch's generator for every hashing "
                     "with it; this project's rotations come from its own counter-based "
                     "generator (core/random.hpp) and cannot reproduce torch's")
        buckets = c.get("num_buckets")
        if buckets is None:
            chunk_length = c.integer("lsh_attn_chunk_length")
            guess = hf_automatic_buckets(longest, chunk_length, max_positions)
            c.refuse("num_buckets", "unset: Hugging Face then picks the bucket count from "
                     "the length of the first input it sees (for a sequence of "
                     f"{longest}: {json.dumps(guess)}); set it in config.json to the value "
                     "the model was trained with")
        factors = [buckets] if isinstance(buckets, int) and not isinstance(buckets, bool) else buckets
        if (not isinstance(factors, list) or not factors or
                any(isinstance(f, bool) or not isinstance(f, int) or f < 2 or f % 2 for f in factors)):
            c.refuse("num_buckets", "must be an even integer >= 2 or a list of them")
        if len(factors) > 2:
            c.refuse("num_buckets", f"{len(factors)} bucket factors; this project hashes "
                     "with one or two")
        if c.integer("num_hashes") > MAX_HASHES:
            c.refuse("num_hashes", f"this project's LSH attention hashes at most {MAX_HASHES} "
                     "rounds")
        lsh = {
            "chunk": c.integer("lsh_attn_chunk_length"),
            "n_hashes": c.integer("num_hashes"),
            "n_buckets": list(factors),
            "n_before": c.integer("lsh_num_chunks_before", minimum=0),
            "attention_dropout": c.rate("lsh_attention_probs_dropout_prob"),
        }
        chunk = lcm(chunk, lsh["chunk"])
    if uses_local:
        if c.get("local_num_chunks_after") != 0:
            c.refuse("local_num_chunks_after", "look-ahead chunks: this project's local "
                     "chunks attend only to themselves and the chunks before")
        local = {
            "chunk": c.integer("local_attn_chunk_length"),
            "n_before": c.integer("local_num_chunks_before", minimum=0),
            "attention_dropout": c.rate("local_attention_probs_dropout_prob"),
        }
        chunk = lcm(chunk, local["chunk"])
    if longest < chunk:
        c.refuse("max_position_embeddings", f"the longest sequence ({longest}) is shorter "
                 f"than one chunk ({chunk}); this project needs a multiple of the chunk lengths")
    length = longest // chunk * chunk
    return model, lsh, local, length


# ---------------------------------------------------------------------------
# The weights
# ---------------------------------------------------------------------------
class WeightMap:
    """Takes HF tensors by name, checks their shapes, and records this
    project's parameters in its registration order (src/models/reformer_lm.cpp)."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.used = set()
        self.params = []  # (name, array)

    def take(self, hf_name, shape, fallback=None):
        name = hf_name
        if name not in self.tensors and fallback is not None and fallback in self.tensors:
            name = fallback
        if name not in self.tensors:
            raise Refusal(f"tensor {hf_name} is missing (expected shape {list(shape)}); the "
                          "folder must hold a ReformerModelWithLMHead of this config.json")
        array = self.tensors[name]
        if list(array.shape) != list(shape):
            raise Refusal(f"tensor {name} has shape {list(array.shape)} but the config says "
                          f"{list(shape)}")
        if array.dtype.kind != "f":
            raise Refusal(f"tensor {name} has dtype {array.dtype}, not floating point")
        self.used.add(name)
        return array

    def add(self, ours, array):
        self.params.append((ours, np.ascontiguousarray(array)))


def map_weights(model, tensors):
    d, vocab, f = model["d_model"], model["vocab"], model["d_ff"]
    inner = model["heads"] * model["d_head"]
    w = WeightMap(tensors)
    emb = "reformer.embeddings."
    w.add("embed.table", w.take(emb + "word_embeddings.weight", [vocab, d]))
    if model["positions"] == "axial":
        (n1, n2), (d1, d2) = model["axial_shape"], model["axial_dims"]
        a1 = w.take(emb + "position_embeddings.weights.0", [n1, 1, d1])
        a2 = w.take(emb + "position_embeddings.weights.1", [1, n2, d2])
        w.add("pos.axial_1", a1.reshape(n1, d1))
        w.add("pos.axial_2", a2.reshape(n2, d2))
    elif emb + "position_embeddings.weights.0" in tensors:  # one axial axis
        n = model["max_length"]
        w.add("pos.table", w.take(emb + "position_embeddings.weights.0", [n, d]))
    else:
        w.add("pos.table", w.take(emb + "position_embeddings.embedding.weight",
                                  [model["max_length"], d]))
    for i, kind in enumerate(model["attention"]):
        hf = f"reformer.encoder.layers.{i}."
        ours = f"layers.{i}."
        att = hf + "attention.self_attention."
        w.add(ours + "attn_norm.gamma", w.take(hf + "attention.layer_norm.weight", [d]))
        w.add(ours + "attn_norm.beta", w.take(hf + "attention.layer_norm.bias", [d]))
        if kind == "lsh":
            w.add(ours + "attn.w_qk", w.take(att + "query_key.weight", [inner, d]).T)
        else:
            w.add(ours + "attn.w_q", w.take(att + "query.weight", [inner, d]).T)
            w.add(ours + "attn.w_k", w.take(att + "key.weight", [inner, d]).T)
        w.add(ours + "attn.w_v", w.take(att + "value.weight", [inner, d]).T)
        w.add(ours + "attn.w_o", w.take(hf + "attention.output.dense.weight", [d, inner]).T)
        ff = hf + "feed_forward."
        w.add(ours + "ff.norm.gamma", w.take(ff + "layer_norm.weight", [d]))
        w.add(ours + "ff.norm.beta", w.take(ff + "layer_norm.bias", [d]))
        w.add(ours + "ff.w1", w.take(ff + "dense.dense.weight", [f, d]).T)
        w.add(ours + "ff.b1", w.take(ff + "dense.dense.bias", [f]))
        w.add(ours + "ff.w2", w.take(ff + "output.dense.weight", [d, f]).T)
        w.add(ours + "ff.b2", w.take(ff + "output.dense.bias", [d]))
    w.add("out.norm.gamma", w.take("reformer.encoder.layer_norm.weight", [2 * d]))
    w.add("out.norm.beta", w.take("reformer.encoder.layer_norm.bias", [2 * d]))
    w.add("out.w", w.take("lm_head.decoder.weight", [vocab, 2 * d]).T)
    # lm_head.bias and lm_head.decoder.bias are one parameter; files hold either.
    w.add("out.b", w.take("lm_head.bias", [vocab], fallback="lm_head.decoder.bias"))
    leftover = sorted(set(tensors) - w.used - {"lm_head.decoder.bias", "lm_head.bias"})
    if leftover:
        extra = leftover[0]
        raise Refusal(f"tensor {extra} (shape {list(tensors[extra].shape)}) is not part of a "
                      f"Reformer LM of this config.json ({len(leftover)} such tensors); the "
                      "folder must hold a ReformerModelWithLMHead with the layers of attn_layers")
    return w.params


# ---------------------------------------------------------------------------
# The run config (TOML)
# ---------------------------------------------------------------------------
def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(ch in text for ch in ".en") else text + ".0"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def toml_text(sections, header):
    lines = [f"# {line}" if line else "#" for line in header] + [""]
    for section, values in sections.items():
        if not values:
            continue
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {toml_value(value)}" for key, value in values.items())
        lines.append("")
    return "\n".join(lines)


def parse_setting(item):
    """--set section.key=value: the value as JSON when it parses, else a bare string."""
    key, sep, text = item.partition("=")
    section, dot, name = key.strip().rpartition(".")
    if not sep or not dot or not name:
        raise Refusal(f"--set {item}: expected section.key=value (e.g. train.batch=2)")
    if section.split(".")[0] not in ("run", "data", "train"):
        raise Refusal(f"--set {item}: only run.*, data.* and train.* keys can be set; the "
                      "model.* keys come from config.json (override them on the reformer "
                      "command line instead)")
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    return section, name, value


# ---------------------------------------------------------------------------
# The checkpoint (src/io/checkpoint.cpp)
# ---------------------------------------------------------------------------
def meta_checksum(step, data_position, seed, dtype, library_version, skipped_batches,
                  optimizer_steps, config):
    """FNV-1a (64 bit) over the metadata as "key=value" lines, a port of
    meta_checksum in src/io/checkpoint.cpp (keep the two in step)."""
    text = (f"format_version={FORMAT_VERSION}\nstep={step}\ndata_position={data_position}"
            f"\nseed={seed}\ndtype={dtype}\nlibrary_version={library_version}"
            f"\nskipped_batches={skipped_batches}\noptimizer_steps={optimizer_steps}"
            f"\nconfig={config}")
    value = 14695981039346656037
    for byte in text.encode("utf-8"):
        value = ((value ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return value


def fixed_string(text):
    """A fixed-length, NUL-padded UTF-8 string (src/io/hdf5.cpp utf8_string_type)."""
    data = text.encode("utf-8") or b"\0"
    return np.array(data, dtype=h5py.string_dtype("utf-8", len(data)))


def write_floats(group, name, array):
    """A chunked dataset with a Fletcher-32 checksum, chunks of at most 16 MiB
    filled from the last dimension (src/io/hdf5.cpp write_floats)."""
    chunk, inner = [], array.dtype.itemsize
    for extent in reversed(array.shape):
        c = min(extent, max(1, (16 << 20) // inner))
        chunk.insert(0, max(1, c))
        inner *= c
    group.create_dataset(name, data=array, chunks=tuple(chunk), fletcher32=True)


def write_checkpoint(path, params, config_text, dtype, seed, library_version, optimizer):
    np_type = np.float64 if dtype == "double" else np.float32
    optimizer_steps = 0 if optimizer else -1
    temporary = f"{path}.tmp.{os.getpid()}"
    try:
        with h5py.File(temporary, "w", libver=("v110", "v110"), track_order=True) as f:
            f.attrs.create("format_version", FORMAT_VERSION, dtype=np.int64)
            f.attrs.create("step", 0, dtype=np.int64)
            f.attrs.create("data_position", 0, dtype=np.uint64)
            f.attrs.create("seed", seed, dtype=np.uint64)
            f.attrs["dtype"] = fixed_string(dtype)
            f.attrs["library_version"] = fixed_string(library_version)
            f.attrs.create("skipped_batches", 0, dtype=np.int64)
            f.create_dataset("config", data=fixed_string(config_text))
            checksum = meta_checksum(0, 0, seed, dtype, library_version, 0, optimizer_steps,
                                     config_text)
            f.attrs.create("meta_checksum", checksum, dtype=np.uint64)
            group = f.create_group("parameters", track_order=True)
            for name, array in params:
                write_floats(group, name, array.astype(np_type))
            if optimizer:  # Adam before its first step: zero moments
                opt = f.create_group("optimizer", track_order=True)
                opt.attrs.create("steps", 0, dtype=np.int64)
                for moments in ("m", "v"):
                    g = opt.create_group(moments, track_order=True)
                    for name, array in params:
                        write_floats(g, name, np.zeros(array.shape, dtype=np_type))
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def write_text(path, text):
    temporary = f"{path}.tmp.{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


# ---------------------------------------------------------------------------
def run(args):
    folder = args.hf_folder.rstrip("/") or "/"
    raw = read_hf_config(folder)
    model, lsh, local, length = convert_config(raw, os.path.join(folder, "config.json"))
    tensors = load_weights(folder)
    params = map_weights(model, tensors)
    stored = {p.dtype for _, p in params}
    dtype = args.dtype or ("double" if stored == {np.dtype(np.float64)} else "float")

    out = os.path.abspath(args.out_folder)
    checkpoint = os.path.join(out, "checkpoints", "step_00000000.h5")
    if os.path.exists(checkpoint) and not args.force:
        raise Refusal(f"{checkpoint} exists; choose another OUT_FOLDER or pass --force")

    data = {"task": "duplication", "length": length, "vocab": model["vocab"], "seed": 1}
    if args.bytes:
        offset = args.id_offset
        if offset < 0 or 256 + offset > model["vocab"]:
            what = f"--id-offset {offset}: byte ids 0..255 shifted by it" if offset else \
                "--bytes: byte ids 0..255"
            raise Refusal(f"{what} must fit vocab_size = {model['vocab']}")
        data = {"task": "bytes", "path": args.bytes, "length": length, "vocab": 256 + offset,
                "seed": 1}
        if offset:
            data["id_offset"] = offset
    elif args.id_offset:
        raise Refusal("--id-offset applies to byte-level models only; give --bytes CORPUS too")
    if data["task"] == "duplication" and (length < 4 or length % 2):
        data["task"] = "copy"  # the duplication task needs an even length >= 4
    sections = {
        "run": {"dir": out, "name": os.path.basename(os.path.abspath(folder))},
        "model": model,
        "model.lsh": lsh,
        "model.local": local,
        "data": data,
        "train": {"batch": 1, "dtype": dtype, "seed": 1},
    }
    for item in args.set:
        section, name, value = parse_setting(item)
        sections.setdefault(section, {})[name] = value
    version = raw.get("transformers_version", "unknown")
    header = [
        f"Imported from the Hugging Face Reformer in {os.path.abspath(folder)}",
        f"(transformers {version}) by experiments/hf_import/import_hf_reformer.py.",
        "The model keys come from its config.json; [data] is a placeholder task unless",
        "--bytes was given: point data.* at your own data (docs/import.md).",
    ]
    config_text = toml_text(sections, header)
    library_version = f"import_hf_reformer.py (transformers {version})"
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    write_checkpoint(checkpoint, params, config_text, dtype, sections["train"].get("seed", 1),
                     library_version, args.optimizer_state)
    write_text(os.path.join(out, "config.toml"), config_text)
    count = sum(p.size for _, p in params)
    print(f"{checkpoint}: {len(params)} tensors, {count} parameters ({dtype}), "
          f"{model['layers']} layers {model['attention']}, sequences up to {length}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Import a Hugging Face Reformer LM (save_pretrained folder) into a run "
        "folder that `reformer eval` and `reformer generate` read.")
    parser.add_argument("hf_folder", help="folder with config.json and model.safetensors")
    parser.add_argument("out_folder", help="run folder to write (config.toml, checkpoints/)")
    parser.add_argument("--dtype", choices=["float", "double"],
                        help="parameter type (default: double for float64 weights, else float)")
    parser.add_argument("--bytes", metavar="CORPUS",
                        help="a byte-level model: data.task = bytes on this file")
    parser.add_argument("--id-offset", type=int, default=0, metavar="N",
                        help="with --bytes: token id = byte + N (Hugging Face's enwik8 model: 2)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="a run.*, data.* or train.* setting of the written config")
    parser.add_argument("--optimizer-state", action="store_true",
                        help="also write Adam's state before its first step (zero moments), so "
                        "that `reformer train OUT_FOLDER/config.toml --resume` fine-tunes")
    parser.add_argument("--force", action="store_true", help="replace an existing import")
    args = parser.parse_args(argv)
    try:
        run(args)
    except Refusal as e:
        print(f"import_hf_reformer: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

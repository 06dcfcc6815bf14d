#!/usr/bin/env python3
"""Tests of experiments/hf_import/import_hf_reformer.py that need no torch and no
build: every refusal (run as a program on edited copies of the committed
fixture: exit status 2 and one line on stderr naming the key or tensor), the
built-in safetensors reader, and the layout of the checkpoint it writes.
The numbers of an import are checked by tests/hf_import/test_hf_import.cpp.

    /usr/bin/python3 tests/hf_import/test_import_hf_reformer.py
"""

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL_DIR = os.path.join(ROOT, "experiments", "hf_import")
IMPORTER = os.path.join(TOOL_DIR, "import_hf_reformer.py")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "hf_reformer_tiny")
sys.path.insert(0, TOOL_DIR)
import import_hf_reformer as imp  # noqa: E402

HAVE_SAFETENSORS = importlib.util.find_spec("safetensors") is not None


def write_safetensors(path, tensors, dtypes=None):
    """A .safetensors file (8-byte header size, JSON header, raw data); BF16
    tensors are given as float32 and truncated."""
    dtypes = dtypes or {}
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, array in tensors.items():
        kind = dtypes.get(name, {"float64": "F64", "float32": "F32", "float16": "F16"}
                          [str(array.dtype)])
        if kind == "BF16":
            data = (np.asarray(array, dtype="<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": kind, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in chunks:
            f.write(data)


class ImporterCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hf_import_test_")
        self.hf = os.path.join(self.tmp, "hf")
        shutil.copytree(FIXTURE, self.hf)
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_importer(self, *args, folder=None):
        command = [sys.executable, IMPORTER, folder or self.hf, self.out, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    def edit_config(self, **changes):
        path = os.path.join(self.hf, "config.json")
        with open(path) as f:
            config = json.load(f)
        config.update(changes)
        with open(path, "w") as f:
            json.dump(config, f)

    def weights(self):
        return imp.read_safetensors_builtin(os.path.join(self.hf, "model.safetensors"))

    def refused(self, *needles, folder=None, args=()):
        result = self.run_importer(*args, folder=folder)
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        for needle in needles:
            self.assertIn(needle, lines[0])
        self.assertFalse(os.path.exists(os.path.join(self.out, "checkpoints")), "wrote anyway")
        return lines[0]


class Refusals(ImporterCase):
    def test_folder_without_config_json(self):
        os.remove(os.path.join(self.hf, "config.json"))
        self.refused(self.hf, "has no config.json")

    def test_missing_folder(self):
        missing = os.path.join(self.tmp, "nowhere")
        self.refused(missing, "is not a folder", folder=missing)

    def test_lsh_look_ahead(self):
        self.edit_config(lsh_num_chunks_after=1)
        self.refused("lsh_num_chunks_after = 1", "look-ahead")

    def test_local_look_ahead(self):
        self.edit_config(local_num_chunks_after=2)
        self.refused("local_num_chunks_after = 2", "look-ahead")

    def test_hash_seed(self):
        self.edit_config(hash_seed=42)
        self.refused("hash_seed = 42")

    def test_three_axial_axes(self):
        self.edit_config(axial_pos_shape=[2, 2, 8], axial_pos_embds_dim=[8, 8, 8])
        self.refused("axial_pos_shape = [2, 2, 8]", "more than two axial axes")

    def test_non_causal_with_local_layers(self):
        self.edit_config(is_decoder=False)
        self.refused("is_decoder = false", "local")

    def test_other_activation(self):
        self.edit_config(hidden_act="gelu_new")
        self.refused('hidden_act = "gelu_new"')

    def test_num_buckets_unset(self):
        self.edit_config(num_buckets=None)
        # HF's own choice for the fixture's 32 tokens in chunks of 8 is 8 buckets.
        self.refused("num_buckets = null", "for a sequence of 32: 8")

    def test_three_bucket_factors(self):
        self.edit_config(num_buckets=[2, 2, 2])
        self.refused("num_buckets = [2, 2, 2]", "3 bucket factors")

    def test_too_many_hash_rounds(self):
        self.edit_config(num_hashes=65)
        self.refused("num_hashes = 65", "at most 64")

    def test_tied_embeddings(self):
        self.edit_config(tie_word_embeddings=True)
        self.refused("tie_word_embeddings = true")

    def test_head_size_above_the_kernels(self):
        self.edit_config(attention_head_size=256)
        self.refused("attention_head_size = 256", "128")

    def test_other_model_type(self):
        self.edit_config(model_type="bert")
        self.refused('model_type = "bert"')

    def test_unknown_attention_kind(self):
        self.edit_config(attn_layers=["local", "full"])
        self.refused('attn_layers = ["local", "full"]')

    def test_tensor_of_the_wrong_shape(self):
        tensors = self.weights()
        name = "reformer.encoder.layers.1.attention.self_attention.query_key.weight"
        tensors[name] = np.ascontiguousarray(tensors[name].T)  # [24, 16] instead of [16, 24]
        write_safetensors(os.path.join(self.hf, "model.safetensors"), tensors)
        self.refused(f"tensor {name} has shape [24, 16]", "config says [16, 24]")

    def test_weights_of_another_width(self):
        self.edit_config(hidden_size=32, axial_pos_embds_dim=[16, 16])
        self.refused("tensor reformer.embeddings.word_embeddings.weight has shape [37, 24]",
                     "[37, 32]")

    def test_missing_tensor(self):
        tensors = self.weights()
        del tensors["lm_head.decoder.weight"]
        write_safetensors(os.path.join(self.hf, "model.safetensors"), tensors)
        self.refused("tensor lm_head.decoder.weight is missing", "[37, 48]")

    def test_tensor_the_config_does_not_have(self):
        self.edit_config(attn_layers=["local", "lsh", "local"], num_hidden_layers=3)
        self.refused("tensor reformer.encoder.layers.3.", "not part of a Reformer LM")

    def test_pytorch_pickle(self):
        os.remove(os.path.join(self.hf, "model.safetensors"))
        with open(os.path.join(self.hf, "pytorch_model.bin"), "wb") as f:
            f.write(b"PK\x03\x04 not really")
        self.refused("pytorch_model.bin", "safe_serialization=True")

    def test_no_weights(self):
        os.remove(os.path.join(self.hf, "model.safetensors"))
        self.refused("has no model.safetensors")

    def test_truncated_safetensors(self):
        path = os.path.join(self.hf, "model.safetensors")
        with open(path, "rb") as f:
            blob = f.read()
        with open(path, "wb") as f:
            f.write(blob[:4000])
        self.refused("model.safetensors")

    def test_existing_import_is_kept(self):
        self.assertEqual(self.run_importer().returncode, 0)
        result = self.run_importer()
        self.assertEqual(result.returncode, 2)
        self.assertIn("--force", result.stderr)

    def test_model_keys_cannot_be_set(self):
        self.refused("--set model.d_model=8", "only run.*, data.* and train.*",
                     args=("--set", "model.d_model=8"))

    def test_bytes_must_fit_the_vocabulary(self):
        self.refused("--bytes", "vocab_size = 37", args=("--bytes", "x"))
        self.refused("--id-offset 2", "vocab_size = 37", args=("--bytes", "x", "--id-offset", "2"))

    def test_num_hidden_layers_must_match(self):
        self.edit_config(num_hidden_layers=3)
        self.refused("num_hidden_layers = 3", "4 entries of attn_layers")


class Reading(ImporterCase):
    def test_builtin_reader_reads_the_fixture(self):
        tensors = self.weights()
        self.assertEqual(tensors["lm_head.decoder.weight"].shape, (37, 48))
        self.assertEqual(tensors["lm_head.decoder.weight"].dtype, np.float64)
        if HAVE_SAFETENSORS:
            from safetensors.numpy import load_file
            reference = load_file(os.path.join(self.hf, "model.safetensors"))
            self.assertEqual(sorted(reference), sorted(tensors))
            for name, array in reference.items():
                np.testing.assert_array_equal(array, tensors[name])

    def test_builtin_reader_half_types(self):
        values = np.array([[1.0, -2.5], [0.15625, 3e4]], dtype=np.float32)
        path = os.path.join(self.tmp, "half.safetensors")
        write_safetensors(path, {"b": values, "h": values.astype(np.float16)},
                          dtypes={"b": "BF16"})
        tensors = imp.read_safetensors_builtin(path)
        np.testing.assert_array_equal(tensors["h"], values.astype(np.float16))
        self.assertEqual(tensors["b"].dtype, np.float32)
        np.testing.assert_allclose(tensors["b"], values, rtol=2 ** -7)

    def test_sharded_weights(self):
        tensors = self.weights()
        names = sorted(tensors)
        shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
                  "model-00002-of-00002.safetensors": names[len(names) // 2:]}
        os.remove(os.path.join(self.hf, "model.safetensors"))
        weight_map = {}
        for shard, members in shards.items():
            write_safetensors(os.path.join(self.hf, shard), {n: tensors[n] for n in members})
            weight_map.update({n: shard for n in members})
        with open(os.path.join(self.hf, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        loaded = imp.load_weights(self.hf)
        self.assertEqual(sorted(loaded), names)
        self.assertEqual(self.run_importer().returncode, 0)


class Checkpoint(ImporterCase):
    def test_layout_mapping_and_checksum(self):
        result = self.run_importer("--set", "data.path=corpus.txt", "--set", "train.batch=2")
        self.assertEqual(result.returncode, 0, result.stderr)
        tensors = self.weights()
        path = os.path.join(self.out, "checkpoints", "step_00000000.h5")
        with h5py.File(path, "r") as f:
            attrs = f.attrs
            self.assertEqual(int(attrs["format_version"]), imp.FORMAT_VERSION)
            self.assertEqual(attrs["dtype"], b"double")
            config = f["config"][()].decode("utf-8")
            checksum = imp.meta_checksum(
                int(attrs["step"]), int(attrs["data_position"]), int(attrs["seed"]),
                attrs["dtype"].decode(), attrs["library_version"].decode(),
                int(attrs["skipped_batches"]), -1, config)
            self.assertEqual(int(attrs["meta_checksum"]), checksum)
            self.assertNotIn("optimizer", f)
            p = f["parameters"]
            self.assertEqual(list(p)[:3], ["embed.table", "pos.axial_1", "pos.axial_2"])
            self.assertEqual(len(p), 53)
            for name in p:
                self.assertTrue(p[name].fletcher32, name)
            np.testing.assert_array_equal(p["out.w"][()], tensors["lm_head.decoder.weight"].T)
            np.testing.assert_array_equal(
                p["layers.1.attn.w_qk"][()],
                tensors["reformer.encoder.layers.1.attention.self_attention.query_key.weight"].T)
            np.testing.assert_array_equal(
                p["layers.2.ff.w1"][()],
                tensors["reformer.encoder.layers.2.feed_forward.dense.dense.weight"].T)
            np.testing.assert_array_equal(
                p["pos.axial_2"][()],
                tensors["reformer.embeddings.position_embeddings.weights.1"][0])
            self.assertEqual(p["layers.0.attn.w_q"].shape, (24, 16))
            self.assertEqual(p["layers.0.attn.w_o"].shape, (16, 24))
        with open(os.path.join(self.out, "config.toml")) as f:
            self.assertEqual(f.read(), config)
        for line in ("layer_norm_eps = 1e-12", 'ff_activation = "gelu"', "n_buckets = [2, 4]",
                     'task = "duplication"', 'path = "corpus.txt"', "batch = 2",
                     'attention = ["local", "lsh", "local", "lsh"]'):
            self.assertIn(line, config)

    def test_optimizer_state_and_float(self):
        result = self.run_importer("--optimizer-state", "--dtype", "float")
        self.assertEqual(result.returncode, 0, result.stderr)
        with h5py.File(os.path.join(self.out, "checkpoints", "step_00000000.h5"), "r") as f:
            self.assertEqual(f.attrs["dtype"], b"float")
            self.assertEqual(int(f["optimizer"].attrs["steps"]), 0)
            self.assertEqual(f["parameters/out.w"].dtype, np.float32)
            self.assertEqual(float(np.abs(f["optimizer/v/out.w"][()]).max()), 0.0)
            self.assertEqual(sorted(f["optimizer/m"]), sorted(f["parameters"]))
            config = f["config"][()].decode("utf-8")
            checksum = imp.meta_checksum(0, 0, 1, "float", f.attrs["library_version"].decode(),
                                         0, 0, config)
            self.assertEqual(int(f.attrs["meta_checksum"]), checksum)

    def test_checksum_is_fnv1a(self):
        # FNV-1a 64 of "format_version=2\nstep=0\n..." computed independently.
        text = ("format_version=2\nstep=3\ndata_position=4\nseed=5\ndtype=float\n"
                "library_version=v\nskipped_batches=0\noptimizer_steps=3\nconfig=é")
        value = 0xCBF29CE484222325
        for byte in text.encode("utf-8"):
            value = ((value ^ byte) * 0x100000001B3) % (1 << 64)
        self.assertEqual(imp.meta_checksum(3, 4, 5, "float", "v", 0, 3, "é"), value)


if __name__ == "__main__":
    unittest.main(verbosity=2)

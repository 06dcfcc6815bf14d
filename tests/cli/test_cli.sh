#!/usr/bin/env bash
# Checks the `reformer` program's user-facing behaviour: help, version, info,
# exit code 2 with a clear message for unknown subcommands and options, and
# `reformer memory`.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
expect help 0 "info" -- --help
expect version 0 "0." -- --version
expect info 0 "memory tracker" -- info
expect info_backend 0 "Kokkos" -- info
expect info_blas 0 "host BLAS" -- info
# The kernel settings read from the environment: named in `info`; a bad value is
# an error that names the variable, the value and the choices.
REFORMER_TILE_LOOPS=elements expect info_tile_loops 0 "tile loops         elements" -- info
REFORMER_TILE_LOOPS=columns expect bad_tile_loops 2 \
  "REFORMER_TILE_LOOPS is 'columns' but must be 'rows' or 'elements'" -- info
REFORMER_ROW_KERNELS=lanes expect info_row_kernels 0 "row kernels        lanes" -- info
REFORMER_ROW_KERNELS=warps expect bad_row_kernels 2 \
  "REFORMER_ROW_KERNELS is 'warps' but must be 'threads' or 'lanes'" -- info
REFORMER_EXACT_TILES=gpu-wide expect info_exact_tiles 0 \
  "exact tiles        gpu-wide: forward 32 x 32 (4 x 4 blocks" -- info
REFORMER_EXACT_TILES=wide expect bad_exact_tiles 2 \
  "REFORMER_EXACT_TILES is 'wide' but must be 'cpu', 'gpu' or 'gpu-wide'" -- info
REFORMER_CHUNKED_KERNEL=streamed expect info_chunked_shape 0 "chunked attention  streamed" -- info
REFORMER_CHUNKED_KERNEL=half expect bad_chunked_shape 2 \
  "REFORMER_CHUNKED_KERNEL is 'half' but must be 'whole' or 'streamed'" -- info
REFORMER_CHUNK_PRODUCTS=batched REFORMER_CHUNK_SLICE_MIB=8 expect info_chunk_products 0 \
  "chunk products     batched (strided-batched products, slices of at most 8.00 MiB)" -- info
REFORMER_CHUNK_PRODUCTS=cublas expect bad_chunk_products 2 \
  "REFORMER_CHUNK_PRODUCTS is 'cublas' but must be 'fused' or 'batched'" -- info
REFORMER_CHUNK_PRODUCTS=batched REFORMER_CHUNK_SLICE_MIB=-2 expect bad_chunk_slice 2 \
  "REFORMER_CHUNK_SLICE_MIB is '-2' but must be a positive number of MiB" -- info
REFORMER_EXACT_PRODUCTS=batched REFORMER_CHUNK_SLICE_MIB=8 expect info_exact_products 0 \
  "exact products     batched (strided-batched products on slices of query rows, at most 8.00 MiB" \
  -- info
expect info_exact_products_default 0 "exact products     fused" -- info
REFORMER_EXACT_PRODUCTS=vendor expect bad_exact_products 2 \
  "REFORMER_EXACT_PRODUCTS is 'vendor' but must be 'fused' or 'batched'" -- info
REFORMER_STEP_PRODUCTS=fused expect info_step_products 0 \
  "step products      fused (a decoding step of up to 16 rows" -- info
expect info_step_products_default 0 "step products      vendor" -- info
REFORMER_STEP_PRODUCTS=batched expect bad_step_products 2 \
  "REFORMER_STEP_PRODUCTS is 'batched' but must be 'vendor' or 'fused'" -- info
expect no_subcommand 2 "subcommand" --
expect unknown_subcommand 2 "bogus" -- bogus
expect unknown_option 2 "--frobnicate" -- --frobnicate info
expect bad_threads 2 "threads" -- --threads -3 info
# reformer memory: bad input exits with 2 naming it; a tiny sweep writes one CSV
# row per point with measured and predicted peaks, and skips a point over the budget.
expect memory_bad_variant 2 "unknown variant 'lsh-3'" -- memory --variants lsh-3
expect memory_not_model_key 2 "train.steps" -- memory train.steps=3
expect memory_bad_length 2 "100" -- memory --variants lsh-2 --lengths 100
# A length that a variant's chunks do not fit names the variant and the sweep's fixes.
expect memory_length_names_variant 2 "memory sweep (local, --lengths 64): " -- \
  memory --variants lsh-2,local --lengths 64
expect memory_length_sweep_fix 2 "or --variants without local" -- \
  memory --variants local --lengths 64
expect memory_zero_length 2 "every length must be positive" -- memory --lengths 0
expect memory_bad_layers 2 "--layers has -1" -- memory --layers 2,-1
expect memory_bad_batch 2 "--batch has 0" -- memory --batch 0
expect memory_bad_tokens 2 "--tokens 100 is not a whole number of length 4096" -- \
  memory --tokens 100 --lengths 4096
expect memory_bad_budget 2 "'-3' is not a positive number of GiB" -- memory --budget-gib -3
expect memory_unknown_option 2 "--bogus" -- memory --bogus
out=$(mktemp -d)
small="model.d_model=32 model.heads=2 model.d_head=16 model.d_ff=64 model.vocab=32"
# --out names a folder: a file there is refused before any work.
touch "$out/afile"
expect memory_out_is_file 2 "--out \"$out/afile\" is a file" -- \
  memory --variants exact --lengths 64 --steps 0 --out "$out/afile"
# A folder that cannot be made (below a file) is refused by name, before any work.
expect memory_out_cannot_be_made 2 "--out \"$out/afile/sub\" cannot be made" -- \
  memory --variants exact --lengths 64 --steps 0 --out "$out/afile/sub"
# shellcheck disable=SC2086
expect memory_sweep 0 "[2/2]" -- memory --variants lsh-2,exact --lengths 256 --steps 1 \
  --out "$out" $small
rows=$(grep -c '^lsh-2,256,2,1,ran\|^exact,256,2,1,ran' "$out/sweep.csv")
[ "$rows" -eq 2 ] && pass memory_csv || fail "memory_csv: $rows rows ran in $out/sweep.csv"
# The JSON parses, and the plot script's tables read the CSV's columns.
if command -v python3 >/dev/null; then
  python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))["points"]; assert len(p) == 2 and all(x["ran"] and x["measured_MiB"]["backward"] > 0 and x["launches_per_step"] > 0 for x in p), p' \
    "$out/sweep.json" && pass memory_json || fail "memory_json: $out/sweep.json"
  table=$(python3 "$(dirname "${BASH_SOURCE[0]}")/../../experiments/plot_memory.py" --markdown \
    --lengths "$out" 2>&1)
  grep -q '^| lsh-2 | 256 | 2 | 1 | [0-9.]* | [0-9.]* | [01]\.[0-9][0-9] |' <<<"$table" &&
    pass memory_markdown || fail "memory_markdown: $table"
fi
# --explain: the chunks and what was live at the peak, by label; Kokkos' own
# unlabeled scratch by what it is.
explained=$("$bin" --threads 2 memory --model classifier --variants exact-rev --lengths 256 \
  --steps 0 --explain --out "$out/explain" model.d_model=32 model.heads=2 model.d_head=16 \
  model.d_ff=64 2>&1)
# On OpenMP the threads' team scratch is among the largest at this size.
openmp=0
"$bin" info | grep -q "execution space *OpenMP" && openmp=1
if grep -q "chunks: feed-forward" <<<"$explained" &&
  grep -q "at the peak: .*parameters [0-9.]* MiB (1)" <<<"$explained" &&
  ! grep -qF "[unlabeled]" <<<"$explained" &&
  { [ $openmp -eq 0 ] || grep -q "at the peak: .*Kokkos thread scratch [0-9.]* MiB" <<<"$explained"; }; then
  pass memory_explain
else
  fail "memory_explain: $explained"
fi
# shellcheck disable=SC2086
expect memory_budget 0 "skipped: predicted" -- memory --variants full --lengths 4096 \
  --budget-gib 0.001 --out "$out" $small
grep -q '^full,4096,2,1,skipped,.*exceeds the budget of 1.02 MiB' "$out/sweep.csv" &&
  pass memory_budget_csv || fail "memory_budget_csv: $(tail -1 "$out/sweep.csv")"
# The encoder-decoder's sweep (--model transformer): its own base model, the
# same variants, model.seq2seq.* overrides; an unknown model is named.
# An override of a key that every point sets itself (the depth, the length,
# the variant's attention, rounds, reversibility and chunks) is refused by name.
expect memory_override_rounds 2 "'model.lsh.n_hashes=8' would have no effect: the variant lsh-2" -- \
  memory --variants lsh-2 model.lsh.n_hashes=8
expect memory_override_chunk 2 "the variant full (unchunked) sets model.ff_chunk" -- \
  memory --variants full model.ff_chunk=32
# When only some variants set the key, the others take it and a note names the rest.
# shellcheck disable=SC2086
expect memory_override_note 0 "note: the override 'model.ff_chunk=32' does not apply to the points of full, which set model.ff_chunk themselves" -- \
  memory --variants full,reformer --lengths 64 --steps 0 --out "$out/note" $small model.ff_chunk=32
expect memory_override_table 2 "the variant lsh-2 sets model.lsh.n_hashes" -- \
  memory --variants lsh-2 'model.lsh={n_hashes=8}'
expect memory_override_unread 2 "sets model.layers, which model.type = \"transformer\" (the encoder-decoder) does not read" -- \
  memory --model transformer model.layers=6
expect memory_override_depth 2 "--layers sets model.seq2seq.encoder_layers" -- \
  memory --model transformer --variants full model.seq2seq.encoder_layers=1
expect memory_override_mem_len 2 "the variant xl-mem0 (xl-mem0: 0" -- \
  memory --model transformer_xl --variants xl-mem0 "model.xl.mem_len = 16"
# --dtype double: the points are labelled float64 (activations and all), the
# JSON names the dtype.
expect memory_double 0 "float64" -- memory --variants exact --lengths 64 --steps 0 --dtype double \
  --out "$out/double"
grep -q '^exact,64,2,1,ran,.*,float64,' "$out/double/sweep.csv" &&
  grep -q '"dtype": "double"' "$out/double/sweep.json" && pass memory_double_files ||
  fail "memory_double_files: $(cat "$out/double/sweep.csv")"
expect memory_bad_model 2 "--model is 'gru'" -- memory --model gru
expect memory_seq2seq_key 2 "model.seq2seq.decoder_attention is lsh" -- memory --model transformer \
  model.seq2seq.decoder_attention=lsh
# shellcheck disable=SC2086
expect memory_seq2seq 0 "[2/2]" -- memory --model transformer --variants full-rev,reformer \
  --lengths 256 --steps 1 --out "$out" $small model.seq2seq.share_embeddings=true
grep -q '"model": "transformer"' "$out/sweep.json" && grep -q '^reformer,256,2,1,ran' "$out/sweep.csv" &&
  pass memory_seq2seq_csv || fail "memory_seq2seq_csv: $(cat "$out/sweep.csv")"
rm -rf "$out"
[ "$failures" -eq 0 ]

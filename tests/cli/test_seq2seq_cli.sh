#!/usr/bin/env bash
# The encoder-decoder through the `reformer` program: train the copy task from a
# config, eval (loss, token accuracy, exact-match rate), generate (greedy and
# beam, a source as text), and every bad input of the model with a message
# naming the value.
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
export OMP_NUM_THREADS=2

cat >"$work/copy.toml" <<TOML
[run]
dir = "$work/run"
[model]
type = "transformer"
d_model = 32
d_ff = 64
heads = 2
d_head = 16
positions = "sinusoidal"
max_length = 10
dropout = 0.0
[model.seq2seq]
encoder_layers = 1
decoder_layers = 1
[data]
task = "seq2seq_copy"
length = 8
vocab = 8
[train]
steps = 40
batch = 16
learning_rate = 1.0
schedule = "noam"
warmup_steps = 20
eval_every = 20
eval_batches = 2
log_every = 10
TOML

expect train 0 "trained 40 steps" -- train "$work/copy.toml"
expect eval 0 "exact match" -- eval "$work/run" --batches 2
expect generate_default 0 "expected:" -- generate "$work/run"
expect generate_text 0 "source:    3 4 5" -- generate "$work/run" --prompt "3 4 5"
expect generate_beam 0 "generated:" -- generate "$work/run" --prompt "7 6 5" --beam 3
expect resume 0 "resumed from" -- train "$work/copy.toml" train.steps=60 --resume
# The last line counts this invocation's steps and says where it resumed.
expect resume_counts_its_steps 0 "trained 10 steps in" -- train "$work/copy.toml" train.steps=70 \
  --resume
expect resume_names_its_steps 0 "(steps 71 to 80, resumed after step 70)" -- \
  train "$work/copy.toml" train.steps=80 --resume
expect resume_past_the_end 0 "(the run had reached step 80)" -- train "$work/copy.toml" \
  train.steps=80 --resume
# The reversible two-stream form: trains, evaluates, decodes with caches and
# beams; its checkpoint is not the one-stream model's (same names, other function).
expect train_reversible 0 "trained 40 steps" -- train "$work/copy.toml" \
  "run.dir=\"$work/rev\"" model.seq2seq.reversible=true
expect eval_reversible 0 "exact match" -- eval "$work/rev" --batches 2
expect generate_reversible 0 "generated:" -- generate "$work/rev" --prompt "7 6 5" --beam 2
expect reversible_mismatch 2 "model.seq2seq.reversible" -- eval "$work/rev" \
  model.seq2seq.reversible=false

# Bad input: each names the value and the rule.
expect source_too_long 2 "the source has 8 symbols but must have between 1 and data.length - 1 = 7" \
  -- generate "$work/run" --prompt "3 4 5 6 7 3 4 5"
expect source_not_ids 2 "'x' is not a token id" -- generate "$work/run" --prompt "3 x"
expect beam_zero 2 "--beam" -- generate "$work/run" --beam 0
expect beam_sampled 2 "temperature 1, top_k 0 and top_p 1 given but the encoder-decoder decodes greedily, or by beam" -- \
  generate "$work/run" --beam 2 --temperature 1
expect seq2seq_stop 2 "1 stop id(s) given but the encoder-decoder" -- generate "$work/run" --stop 2
expect seq2seq_no_cache 2 "--no-cache given but the encoder-decoder" -- generate "$work/run" --no-cache
expect seq2seq_seed 2 "seed 4 given but the encoder-decoder" -- generate "$work/run" --beam 2 --seed 4
expect vocabulary_mismatch 2 "src_embed.table" -- eval "$work/run" data.vocab=12
expect vocabulary_mismatch_names_override 2 "The overrides changed data.vocab" -- \
  eval "$work/run" data.vocab=12
expect length_beyond_model 2 "data.length is 12 but model.max_length is 10" -- \
  train "$work/copy.toml" "run.dir=\"$work/other\"" data.length=12
# Chunks that do not divide the padded sources and targets are refused with the
# config, before the run folder exists (it was the first step's error).
expect seq2seq_local_chunk 2 "data.length = 8 does not fit the model: the target length 8 is not a multiple of model.local.chunk = 3 (the decoder uses local attention); use a length of 9" -- \
  train "$work/copy.toml" "run.dir=\"$work/chunk\"" model.seq2seq.decoder_attention=local \
  model.local.chunk=3
expect seq2seq_lsh_chunk 2 "the source length 8 is not a multiple of model.lsh.chunk = 3" -- \
  train "$work/copy.toml" "run.dir=\"$work/chunk\"" model.seq2seq.encoder_attention=lsh \
  model.lsh.chunk=3
[ ! -e "$work/chunk" ] && pass seq2seq_chunk_no_folder || fail "seq2seq_chunk_no_folder: $work/chunk"
expect lm_task 2 "data.task is copy" -- train "$work/copy.toml" 'data.task="copy"'
printf 'a b\tb a\nno tab here\nc\td\n' >"$work/notab.tsv"
expect pair_line_without_tab 2 "line 2 has no tab" -- train "$work/copy.toml" \
  "run.dir=\"$work/p\"" 'data.task="parallel"' "data.path=\"$work/notab.tsv\""
: >"$work/empty.tsv"
expect pair_file_empty 2 "is empty" -- train "$work/copy.toml" "run.dir=\"$work/p\"" \
  'data.task="parallel"' "data.path=\"$work/empty.tsv\""
expect pair_file_missing 2 "No such file" -- train "$work/copy.toml" "run.dir=\"$work/p\"" \
  'data.task="parallel"' "data.path=\"$work/none.tsv\""
[ ! -e "$work/p" ] && pass "nothing_written_on_bad_pairs" || fail "nothing_written_on_bad_pairs"
[ "$failures" -eq 0 ]

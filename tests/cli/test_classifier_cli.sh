#!/usr/bin/env bash
# The classifier (model.type = "classifier") through the `reformer` program:
# train on a generated task and on Retrieval-style pairs of documents from
# files, eval (loss and accuracy per example, not per token), resume, and the
# refusals that name the value: generate, documents that are not the task's.
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
export OMP_NUM_THREADS=2

cat >"$work/ends.toml" <<TOML
[run]
dir = "$work/run"
[model]
type = "classifier"
vocab = 8
d_model = 32
d_ff = 64
heads = 2
d_head = 16
layers = 1
attention = ["full"]
causal = false
positions = "sinusoidal"
max_length = 16
dropout = 0.1
[data]
task = "matching_ends"
length = 16
vocab = 8
[train]
steps = 20
batch = 8
learning_rate = 0.003
eval_every = 10
eval_batches = 2
log_every = 10
checkpoint_every = 10
TOML

# A classifier scores one label an example: its evaluation lines count
# examples (2 batches of 8) and give bits per example.
expect train 0 "trained 20 steps" -- train "$work/ends.toml"
expect train_eval_line 0 "bits/example" -- train "$work/ends.toml" "run.dir=\"$work/b\""
expect train_eval_counts_examples 0 "(16 examples," -- train "$work/ends.toml" "run.dir=\"$work/c\""
expect eval 0 "(16 examples): loss" -- eval "$work/run" --batches 2
expect eval_bits_per_example 0 "bits/example" -- eval "$work/run" --batches 2
expect eval_rate_in_examples 0 "examples/s)" -- eval "$work/run" --batches 2 --split test
out=$("$bin" eval "$work/run" --batches 2 2>&1)
if grep -q "token" <<<"$out"; then
  echo "$out"
  fail "eval_names_no_tokens"
else
  pass "eval_names_no_tokens"
fi
expect resume 0 "resumed from" -- train "$work/ends.toml" train.steps=30 --resume
expect generate_refused 2 "labels whole sequences and generates no tokens" -- generate "$work/run"
expect documents_not_the_tasks 2 "model.classifier.documents" -- train "$work/ends.toml" \
  "run.dir=\"$work/d\"" model.classifier.documents=2
[ ! -e "$work/d" ] && pass "nothing_written_on_bad_documents" || fail "nothing_written_on_bad_documents"

# Retrieval: LRA's three files of pairs (label, two ids, two texts); each
# example is two documents, and still one label.
for split in train eval test; do
  : >"$work/aan.$split.tsv"
  for i in 0 1 2 3 4 5 6 7; do
    printf '%d\tid%d\tid%db\tabcab%d\tcabba%d\n' $((i % 2)) "$i" "$i" "$i" "$i" >>"$work/aan.$split.tsv"
  done
done
expect retrieval_train 0 "trained 4 steps" -- train "$work/ends.toml" "run.dir=\"$work/r\"" \
  'data.task="retrieval"' "data.path=\"$work/aan\"" model.vocab=257 data.vocab=257 \
  train.steps=4 train.eval_every=4 train.checkpoint_every=4
expect retrieval_eval 0 "(8 examples): loss" -- eval "$work/r" --batches 1 --split test
# A missing data file exits with 2 in eval as in train, naming the file.
expect retrieval_eval_missing_files 2 "missing.train.tsv" -- eval "$work/r" --batches 1 \
  "data.path=\"$work/missing\""
# The text task's classes are its largest label + 1: a label of 999,999,999
# (a typo for 1) would make a head of 10^9 rows, refused by the memory check
# before any allocation (it used to be killed for memory), naming the cause.
printf '0\tgood film\n1\tbad film\n999999999\tfine film\n0\tdull film\n' >"$work/labels.tsv"
expect text_label_head_refused 1 "the model's state alone does not fit" -- train "$work/ends.toml" \
  "run.dir=\"$work/t\"" 'data.task="text"' "data.path=\"$work/labels.tsv\"" model.vocab=257 \
  data.vocab=257
[ ! -e "$work/t" ] && pass "nothing_written_on_a_huge_head" || fail "nothing_written_on_a_huge_head"
[ "$failures" -eq 0 ]

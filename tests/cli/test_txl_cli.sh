#!/usr/bin/env bash
# Transformer-XL through the `reformer` program: train on a text file, resume,
# evaluate a whole split with the training's memory, without one, with a
# longer one and by recomputing the context, `reformer memory` for its
# variants, `reformer generate` (cached equals rerunning), and bad input named
# by value and rule.
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
export OMP_NUM_THREADS=2

for i in $(seq 1 400); do
  echo "in the beginning the model read a segment and kept its memory of line $i."
done >"$work/text.txt"
cat >"$work/xl.toml" <<TOML
[run]
dir = "$work/run"
[model]
type = "transformer_xl"
vocab = 256
d_model = 32
d_ff = 64
heads = 2
d_head = 16
layers = 2
dropout = 0.1
[model.xl]
mem_len = 16
[data]
task = "bytes"
path = "$work/text.txt"
length = 16
vocab = 256
[train]
steps = 30
batch = 4
accumulate = 2
learning_rate = 0.003
eval_every = 15
eval_batches = 4
log_every = 10
checkpoint_every = 10
TOML

# The run's line describes the text it streams (its splits' sizes), not the
# random windows that the language model's bytes task draws from it.
expect train 0 "bytes; Transformer-XL: 8 streams of segments of 16, mem_len 16" -- train "$work/xl.toml"
expect resume 0 "resumed from" -- train "$work/xl.toml" train.steps=40 --resume
expect eval_whole_split 0 "bits/token" -- eval "$work/run" --batches 0
expect eval_no_memory 0 "bits/token" -- eval "$work/run" --batches 0 eval.mem_len=0
expect eval_longer_memory 0 "tokens/s" -- eval "$work/run" --batches 0 eval.mem_len=48 \
  eval.clamp_len=31 eval.same_length=on eval.tgt_len=8
# A stream's segments are scored at most once (they would wrap around).
expect eval_past_the_split 2 "but the valid split holds" -- eval "$work/run" --batches 100000
expect eval_recompute 0 "bits/token" -- eval "$work/run" --batches 5 eval.recompute=true
expect memory_variants 0 "xl-mem4x" -- memory --model transformer_xl --lengths 64 --steps 0 \
  --out "$work/memory" model.d_model=32 model.d_ff=64 model.heads=2 model.d_head=16
grep -q "^xl,64,2,1,ran" "$work/memory/sweep.csv" && pass "memory_csv" || fail "memory_csv"

# Generation through segments of 16 with the memory: cached and rerunning
# the segment give the same tokens (greedy), across segment boundaries.
expect generate 0 "cached)" -- generate "$work/run" --prompt "in the beginning" --tokens 40
cached=$("$bin" generate "$work/run" --prompt "in the beginning" --tokens 40 2>&1 | grep '^generated:')
rerun=$("$bin" generate "$work/run" --prompt "in the beginning" --tokens 40 --no-cache 2>&1 |
  grep '^generated:')
[ -n "$cached" ] && [ "$cached" = "$rerun" ] && pass "generate_cache_equals_rerun" ||
  fail "generate_cache_equals_rerun: '$cached' vs '$rerun'"
expect generate_default_prompt 0 "matches the expected continuation" -- generate "$work/run"
expect generate_sampled 0 "generated:" -- generate "$work/run" --prompt "the model" \
  --prompt "its memory" --tokens 20 --temperature 0.8 --top-k 10 --seed 3 eval.tgt_len=8

# Bad input: each names the value and the rule.
expect generate_bad_stop 2 "stop id 300 is outside the vocabulary [0, 256)" -- generate \
  "$work/run" --stop 300
# A stream has no length limit: tokens whose ids alone exceed the host's free
# memory are refused before any work, not met by an allocation failure.
expect generate_tokens_beyond_memory 1 "ask for fewer tokens (--tokens)" -- generate \
  "$work/run" --prompt "in" --tokens 1099511627776
expect synthetic_task 2 "data.task is copy" -- train "$work/xl.toml" "run.dir=\"$work/x\"" \
  'data.task="copy"' data.vocab=10
expect negative_memory 2 "eval.mem_len is -3" -- eval "$work/run" eval.mem_len=-3
expect unknown_xl_key 2 "model.xl.memory" -- train "$work/xl.toml" "run.dir=\"$work/x\"" \
  model.xl.memory=3
expect eval_on_reformer 2 "[eval]" -- train "$work/xl.toml" "run.dir=\"$work/x\"" \
  'model.type="reformer"' eval.mem_len=4
expect too_many_streams 2 "fewer streams" -- train "$work/xl.toml" "run.dir=\"$work/x\"" \
  train.batch=200
expect memory_bad_variant 2 "xl-mem0, xl or xl-mem4x" -- memory --model transformer_xl \
  --variants lsh-2 --lengths 64
[ ! -e "$work/x" ] && pass "nothing_written_on_bad_input" || fail "nothing_written_on_bad_input"
[ "$failures" -eq 0 ]

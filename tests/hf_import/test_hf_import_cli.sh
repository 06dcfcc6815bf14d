#!/usr/bin/env bash
# The three commands of docs/import.md on an imported Hugging Face model (ctest's
# hf_import step has run experiments/hf_import/import_hf_reformer.py on the
# committed fixtures): `reformer eval` and `reformer generate` on the run folder,
# fine-tuning an import written with --optimizer-state (`reformer train
# <folder>/config.toml --resume`), and a warm start from one written without it
# (`reformer train <folder>/config.toml run.dir=... --init-from <folder>`).
#   test_hf_import_cli.sh <reformer> <python3> <folder of the imports>
set -u
bin=$1 python=$2 imported=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$root/tests/cli/expect.sh"
run=$imported/hf_reformer_tiny
expect hf_eval 0 "step_00000000.h5 on valid" -- eval "$run" --batches 2
expect hf_eval_learned 0 "loss" -- eval "$imported/hf_reformer_tiny_learned" --batches 1
expect hf_generate 0 "generated:" -- generate "$run" --prompt "5 6 7 8" --tokens 6
generated=$("$bin" generate "$run" --prompt "5 6 7 8" --tokens 6 2>&1 | sed -n 's/^generated: *//p')
[ "$(wc -w <<<"$generated")" -eq 6 ] && pass hf_generate_count ||
  fail "hf_generate_count: '$generated' is not 6 ids"
# The imported function is the model's: eval and generate refuse to change it.
expect hf_function_key 2 "model.ff_activation" -- eval "$run" model.ff_activation=relu
expect hf_prompt_out_of_vocab 2 "outside the vocabulary" -- generate "$run" --prompt "36 37"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if "$python" "$root/experiments/hf_import/import_hf_reformer.py" \
  "$root/tests/fixtures/hf_reformer_tiny" "$work/tuned" --optimizer-state \
  --set train.steps=2 --set train.log_every=1 >"$work/import.log" 2>&1; then
  pass hf_import_optimizer_state
else
  cat "$work/import.log"
  fail hf_import_optimizer_state
fi
expect hf_fine_tune 0 "resumed from" -- train "$work/tuned/config.toml" --resume
[ -f "$work/tuned/checkpoints/step_00000002.h5" ] && pass hf_fine_tune_checkpoint ||
  fail "hf_fine_tune_checkpoint: no step_00000002.h5 in $work/tuned/checkpoints"
# Without --optimizer-state there is nothing to resume: the message says so.
if "$python" "$root/experiments/hf_import/import_hf_reformer.py" \
  "$root/tests/fixtures/hf_reformer_tiny" "$work/plain" --set train.steps=2 >"$work/plain.log" 2>&1; then
  expect hf_resume_without_optimizer 2 "no optimizer state" -- train "$work/plain/config.toml" \
    --resume
  grep -q -- "--optimizer-state" <<<"$("$bin" train "$work/plain/config.toml" --resume 2>&1)" &&
    pass hf_resume_names_the_fix || fail hf_resume_names_the_fix
  # A warm start takes the weights of an import without optimizer state.
  expect hf_init_from 0 "initialized from $work/plain/checkpoints/step_00000000.h5" -- \
    train "$work/plain/config.toml" "run.dir=\"$work/warm\"" --init-from "$work/plain"
  [ -f "$work/warm/checkpoints/step_00000002.h5" ] && pass hf_init_from_checkpoint ||
    fail "hf_init_from_checkpoint: no step_00000002.h5 in $work/warm/checkpoints"
else
  cat "$work/plain.log"
  fail hf_import_plain
fi
[ "$failures" -eq 0 ]

#!/usr/bin/env bash
# Learning in bf16 against float32 (issue 34), each pair in one invocation:
#  1. the duplication quick start (experiments/duplication_lsh.toml) to 99%
#     validation accuracy on the second copy: the step it gets there in each
#     precision (evaluations every 25 steps);
#  2. a byte LM on the King James Bible (experiments/char_lm.toml with LSH
#     layers, Debian's bible-kjv text): the validation loss after the same
#     steps, over the whole validation split;
#  3. the encoder-decoder's copy task (experiments/copy_transformer.toml,
#     seeds 1-3): the step greedy decoding first reproduces 99% of the
#     evaluated pairs exactly, in each precision (checks every 100 steps);
#  4. Transformer-XL on the King James Bible (experiments/txl_cpu.toml, memories
#     carried from segment to segment, in bf16 too): the validation loss after
#     the same steps, over 64 batches of streams.
# Prints one table row per run; the runs stay in OUT_DIR. PARTS picks the
# parts (default "dup kjv copy xl").
#
#   experiments/bf16_learning.sh [BUILD_DIR] [OUT_DIR]   (defaults build/openmp, runs/bf16_learning)
set -euo pipefail
build=${1:-build/openmp}
out=${2:-runs/bf16_learning}
reformer="$build/bin/reformer"
threads=${THREADS:-2}
steps_kjv=${KJV_STEPS:-600}
steps_xl=${XL_STEPS:-1000}
parts=" ${PARTS:-dup kjv copy xl} "
part() { [[ "$parts" == *" $1 "* ]]; }
mkdir -p data "$out"
if [ ! -s data/kjv.txt ]; then
  command -v bible >/dev/null || { echo "bf16_learning.sh: install Debian's bible-kjv (apt-get install bible-kjv)" >&2; exit 1; }
  bible "gen1:1-rev22:21" > data/kjv.txt
fi
lscpu | grep -E "Model name" | head -1
"$reformer" info | grep -i "bf16\|vector" || true

# The step of the first evaluation at or above 0.99 accuracy (metrics.csv).
reached() { awk -F, '$2 == "eval" && $5 >= 0.99 { print $1; exit }' "$1/metrics.csv"; }
last_eval() { awk -F, '$2 == "eval" { loss = $3; acc = $5 } END { print loss, acc }' "$1/metrics.csv"; }

echo "| run | precision | steps | result | wall s |"
echo "|---|---|---|---|---|"
part dup && for p in float32 bf16; do
  run="$out/duplication_$p"
  rm -rf "$run"
  t0=$(date +%s.%N)
  "$reformer" --threads "$threads" train experiments/duplication_lsh.toml run.dir="\"$run\"" \
    train.precision="\"$p\"" train.steps=1500 train.target_accuracy=0.99 > "$run.log"
  t1=$(date +%s.%N)
  echo "| duplication to 99% | $p | $(reached "$run") | eval loss, accuracy $(last_eval "$run") | $(echo "$t1 - $t0" | bc) |"
done
# One KJV run of CONFIG for STEPS steps in precision P (more overrides after),
# then its validation loss over 64 batches: a table row titled TITLE.
kjv_row() {
  local title=$1 name=$2 config=$3 steps=$4 p=$5
  shift 5
  local run="$out/${name}_$p" t0 t1 valid
  rm -rf "$run"
  t0=$(date +%s.%N)
  "$reformer" --threads "$threads" train "$config" run.dir="\"$run\"" data.path="\"data/kjv.txt\"" \
    train.precision="\"$p\"" train.steps="$steps" train.eval_every=0 "$@" > "$run.log"
  t1=$(date +%s.%N)
  valid=$("$reformer" --threads "$threads" eval "$run" --split valid --batches 64 | sed 's/.*tokens)://')
  echo "| $title | $p | $steps | valid (64 batches): $valid | $(echo "$t1 - $t0" | bc) |"
}
part kjv && for p in float32 bf16; do
  kjv_row "KJV byte LM" kjv experiments/char_lm.toml "$steps_kjv" "$p" 'model.attention=["lsh"]'
done
# The step of the first evaluation whose exact-match rate reaches 0.99.
exact() { grep -o "eval step [0-9]*:.*exact match [0-9.]*" "$1" | awk '{ if ($NF >= 0.99) { print $3; exit } }' | tr -d :; }
part copy && for seed in 1 2 3; do
  for p in float32 bf16; do
    run="$out/copy_${p}_$seed"
    rm -rf "$run"
    "$reformer" --threads "$threads" train experiments/copy_transformer.toml run.dir="\"$run\"" \
      train.precision="\"$p\"" train.seed=$seed data.seed=$seed train.eval_every=100 \
      train.target_accuracy=0.99 > "$run.log"
    echo "| encoder-decoder copy to 99% exact, seed $seed | $p | $(exact "$run.log") | | |"
  done
done
part xl && for p in float32 bf16; do
  kjv_row "Transformer-XL on the KJV" txl experiments/txl_cpu.toml "$steps_xl" "$p"
done

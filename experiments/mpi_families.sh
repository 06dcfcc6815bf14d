#!/usr/bin/env bash
# Every model family data-parallel on this machine (docs/distributed.md, "Every
# family"): the step time of one small run per family on 1 process (1 thread),
# on 2 processes (mpirun, loopback, 1 thread each) and on 1 process with 2
# OpenMP threads. The step time is that of the last logged window (after the
# first steps, without evaluation): tokens per step / tokens per second.
#
#   experiments/mpi_families.sh [BUILD_DIR] [STEPS]     (defaults build/openmp, 40)
# The text: README.md and docs/*.md joined (any text of 200 KB or more works).
set -euo pipefail
build=${1:-build/openmp}
steps=${2:-40}
reformer="$build/bin/reformer"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_PROC_BIND=false OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
lscpu | grep -E "Model name" | head -1
cat README.md docs/*.md >"$out/text.txt"
window=$((steps / 2))

common=(train.steps=$steps train.log_every=$window train.eval_every=0 train.checkpoint_every=0
  train.eval_batches=1)
# tokens per step: batch x data.length. model.dropout=0.0 keeps the runs of
# docs/distributed.md's table (timed so); experiments/mpi_dropout.sh checks 1
# against 2 processes with the configs' dropout.
lm=(4096 experiments/char_lm.toml data.path="$out/text.txt" model.dropout=0.0 train.batch=8)
seq2seq=(768 experiments/copy_transformer.toml train.batch=64 train.target_accuracy=0)
xl=(512 experiments/txl_cpu.toml data.path="$out/text.txt" model.dropout=0.0 train.batch=8)

# run <family> <name> <processes> <threads> <tokens per step> <config and overrides...>
run() {
  local family=$1 name=$2 np=$3 threads=$4 tokens=$5
  shift 5
  local args=(train "$@" "run.dir=\"$out/$family-$name\"" "${common[@]}")
  local log
  if [ "$np" -eq 1 ]; then
    log=$(OMP_NUM_THREADS=$threads "$reformer" --threads "$threads" "${args[@]}")
  else
    log=$(OMP_NUM_THREADS=$threads mpirun --oversubscribe -np "$np" "$reformer" --threads \
      "$threads" "${args[@]}")
  fi
  # The last window: its tokens/s and the step's loss.
  local last rate loss
  last=$(echo "$log" | grep -E "^step $steps/")
  rate=$(echo "$last" | sed -E 's/.* ([0-9]+) tok\/s.*/\1/')
  loss=$(echo "$last" | awk '{print $4}')
  awk -v f="$family" -v n="$name" -v r="$rate" -v t="$tokens" -v l="$loss" -v s="$steps" \
    'BEGIN { printf "%-8s %-15s %8d tok/s  %8.1f ms/step  loss at step %d: %s\n", f, n, r, 1e3 * t / r, s, l }'
  echo "$log" | grep -E "^gradient allreduce|parameters \(" | sed -E 's/^run [^:]*: .*; ([0-9]+ tensors, [0-9]+ parameters).*/\1/; s/^/    /'
}

for family in lm seq2seq xl; do
  unset -n config 2>/dev/null || true
  declare -n config=$family
  run "$family" "1proc-1thread" 1 1 "${config[@]}"
  run "$family" "2proc-1thread" 2 1 "${config[@]}"
  run "$family" "1proc-2threads" 1 2 "${config[@]}"
done

#!/usr/bin/env bash
# Data parallelism with dropout on (docs/distributed.md, "Dropout"): the shipped
# configs of every family train STEPS steps on 1 process and on 2 processes
# (mpirun, loopback, 1 thread each), and the script prints each step's loss of
# both runs (from metrics.csv) and the largest relative difference. Dropout
# masks are drawn by the global row, so the two runs agree to rounding.
#   char_lm.toml           dropout 0.1 as shipped
#   copy_transformer.toml  with model.dropout=0.1 model.attention_dropout=0.1
#                          (it ships without)
#   txl_cpu.toml           dropout 0.1 as shipped (16 streams, 8 per process)
#
#   experiments/mpi_dropout.sh [BUILD_DIR] [STEPS]     (defaults build/openmp, 20)
# The text: README.md and docs/*.md joined.
set -euo pipefail
build=${1:-build/openmp}
steps=${2:-20}
reformer="$build/bin/reformer"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cat README.md docs/*.md >"$out/text.txt"

common=(train.steps=$steps train.log_every=1 train.eval_every=0 train.eval_batches=1
  train.checkpoint_every=0)
lm=(experiments/char_lm.toml data.path="$out/text.txt")
seq2seq=(experiments/copy_transformer.toml model.dropout=0.1 model.attention_dropout=0.1
  train.target_accuracy=0)
xl=(experiments/txl_cpu.toml data.path="$out/text.txt")

for family in lm seq2seq xl; do
  unset -n config 2>/dev/null || true
  declare -n config=$family
  args=(train "${config[@]}" "${common[@]}")
  "$reformer" --threads 1 "${args[@]}" "run.dir=\"$out/$family-1\"" >/dev/null
  mpirun --oversubscribe -np 2 "$reformer" --threads 1 "${args[@]}" "run.dir=\"$out/$family-2\"" \
    >/dev/null
  echo "$family (${config[0]}):"
  python3 - "$out/$family-1/metrics.csv" "$out/$family-2/metrics.csv" <<'PY'
import csv, sys
def losses(path):
    with open(path) as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f) if r["kind"] == "train"}
one, two = losses(sys.argv[1]), losses(sys.argv[2])
worst = 0.0
for step in sorted(one):
    worst = max(worst, abs(two[step] - one[step]) / abs(one[step]))
    print(f"  step {step:3d}  1 process {one[step]:.6f}  2 processes {two[step]:.6f}")
print(f"  largest relative difference over {len(one)} steps: {worst:.1e}")
PY
done

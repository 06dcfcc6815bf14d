#!/usr/bin/env bash
# The duplication task (0 w 0 w, length 256, |w| = 127, 1 layer, d_model = d_ff =
# 256, 4 heads, batch 32, Adam lr 2e-3) trained to a held-out accuracy on the
# second copy, by this project (LSH with 2 hashes, and full attention) and by
# lucidrains' reformer-pytorch (LSH, 2 hashes), one after the other in one
# invocation, on the same thread count. Prints one line per run with the steps
# and wall seconds to the target (each side evaluates every 25 steps), then the
# machine's sgemm rate measured by both sides.
#   experiments/duplication_compare.sh [TARGET] [THREADS] [OUT_DIR]
# Needs build/openmp (quickstart) and a Python with torch and reformer-pytorch
# (PYTHON, default /work/venv/bin/python; the project itself never needs them).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${1:-0.95}
threads=${2:-2}
out=${3:-$root/runs/duplication-compare-$(date +%Y%m%d-%H%M%S)}
python=${PYTHON:-/work/venv/bin/python}
bin=${REFORMER_BIN:-$root/build/openmp/bin/reformer}
mkdir -p "$out"
export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
summary() {  # summary <name> <log>: steps and seconds from our trainer's log
  local steps seconds
  steps=$(sed -n 's/^reached target accuracy .* at step \([0-9]*\)$/\1/p' "$2")
  seconds=$(sed -n 's/^trained [0-9]* steps in \([0-9.]*\) s.*/\1/p' "$2")
  echo "$1: ${steps:-not reached} steps, ${seconds} s (log $2)"
}
for attention in lsh full; do
  "$bin" train "$root/experiments/duplication_$attention.toml" run.dir="\"$out/$attention\"" \
    train.target_accuracy="$target" train.steps=2000 train.eval_every=25 train.log_every=25 \
    >"$out/$attention.log" 2>&1
  summary "reformer-kokkos $attention" "$out/$attention.log"
done
"$python" "$root/experiments/duplication_reformer_pytorch.py" --target "$target" \
  --threads "$threads" --eval-every 25 --max-seconds 1200 --out "$out/pytorch.json" \
  >"$out/pytorch.log" 2>&1
"$python" - "$out/pytorch.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("reformer-pytorch lsh: %s steps, %.1f s (torch %s)" % (
    r["steps"] if r["reached_target"] else "not reached", r["wall_seconds"], r["torch_version"]))
PY
# The machine's sgemm rate in this run, beside the times above: ours and PyTorch's.
bench_ops=$(dirname "$bin")/../bench/bench_ops
[ -x "$bench_ops" ] && "$python" "$root/experiments/sgemm_rate.py" --threads "$threads" --bench-ops "$bench_ops"
"$python" "$root/experiments/sgemm_rate.py" --threads "$threads"

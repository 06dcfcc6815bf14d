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
# The machine's sgemm rate in this run, beside the times above: our matmul (the
# host BLAS split over the OpenMP threads) and PyTorch's, [4096 x 1024] x [1024 x 1024].
bench_ops=$(dirname "$bin")/../bench/bench_ops
if [ -x "$bench_ops" ]; then
  "$bench_ops" --benchmark_filter='BM_Matmul/4096/1024/' --benchmark_min_time=1 \
    --benchmark_format=json 2>/dev/null | "$python" -c '
import json, sys
b = json.load(sys.stdin)["benchmarks"][0]
print("sgemm, ours (build/openmp matmul): %.0f GFLOP/s" % b["GFLOP/s"])'
fi
"$python" - "$threads" <<'PY'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.rand(4096, 1024), torch.rand(1024, 1024)
for _ in range(3): a @ b
n, start = 0, time.perf_counter()
while time.perf_counter() - start < 1.0:
    a @ b
    n += 1
print("sgemm, PyTorch %s: %.0f GFLOP/s" % (torch.__version__, 2 * 4096 * 1024 * 1024 * n / (time.perf_counter() - start) / 1e9))
PY

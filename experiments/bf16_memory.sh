#!/usr/bin/env bash
# bf16 against float32 for the issue's 6-layer Reformer (the `reformer memory`
# base model: d_model 256, d_ff 1024, LSH-2 with chunks of 64, reversible,
# chunked feed-forward and loss), each pair of points in one invocation
# (`--precision float32,bf16`), on a quiet machine:
#   r16k, r64k  step peak, prediction and time per step at 16,384 and 65,536 tokens;
#   r512k       bf16 at 524,288 tokens with the whole process's peak resident
#               set (GNU time, KiB, in maxrss_kib beside sweep.csv).
# Prints the CPU model, the vector ISA and the machine's sgemm rate first.
#   experiments/bf16_memory.sh [THREADS] [OUT_DIR] [BUDGET_GIB]
# REFORMER_BIN picks the binary (another ISA's build, e.g. -march=x86-64-v3);
# SKIP_512K=1 leaves out the 524,288-token point.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
threads=${1:-2}
out=${2:-$root/runs/bf16-memory-$(date +%Y%m%d-%H%M%S)}
budget=${3:-14}
bin=${REFORMER_BIN:-$root/build/openmp/bin/reformer}
export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
mkdir -p "$out"
lscpu | grep -E "Model name" | head -1
"$bin" info | grep -E "vector unit|bf16 dot" || true
python3 "$root/experiments/sgemm_rate.py" --threads "$threads" \
  --bench-ops "$(dirname "$bin")/../bench/bench_ops" 2>/dev/null || true
"$bin" --threads "$threads" memory --budget-gib "$budget" --variants reformer --lengths 16384 \
  --layers 6 --steps 3 --precision float32,bf16 --out "$out/r16k"
"$bin" --threads "$threads" memory --budget-gib "$budget" --variants reformer --lengths 65536 \
  --layers 6 --steps 1 --precision float32,bf16 --out "$out/r64k"
if [ "${SKIP_512K:-0}" != 1 ]; then
  mkdir -p "$out/r512k"
  /usr/bin/time -f %M -o "$out/r512k/maxrss_kib" "$bin" --threads "$threads" memory \
    --budget-gib "$budget" --variants reformer --lengths 524288 --layers 6 --steps 0 \
    --precision bf16 --out "$out/r512k"
  echo "524,288 tokens, bf16: whole-process max RSS $(cat "$out/r512k/maxrss_kib") KiB"
fi

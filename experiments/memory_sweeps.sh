#!/usr/bin/env bash
# Every measurement of docs/memory.md, one after the other on a quiet machine:
#   len     every variant at 1K..64K (2 layers, batch 1)
#   tokens  full and LSH-1/2/4/8 at 32768 tokens per batch, 1024 x 32 ... 32768 x 1
#           (the paper's Figure 5)
#   layers  full, full-rev, lsh-2, exact-rev and the Reformer at 4096 positions,
#           1 to 12 layers
#   r64k    the issue's 6-layer Reformer (the base model: d_ff 1024) at 65,536 tokens
#   r512k   the same at 524,288 tokens (the paper's Crime-and-Punishment length)
# then the plots (OUT_DIR/memory_{length,tokens,layers}.png, copied by hand to
# docs/) and the one-run PyTorch comparison (experiments/pytorch_compare.py; its
# two Python interpreters are made as its docstring says). The r64k and r512k
# runs also record the whole process's peak resident set (GNU time, KiB) in
# maxrss_kib beside their sweep.csv.
#   experiments/memory_sweeps.sh [THREADS] [OUT_DIR] [BUDGET_GIB]
# Steps: each point runs a warm-up step and the measured step; --steps 0 times
# the measured step (points of a minute and more), the tokens sweep times 2 more.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
threads=${1:-2}
out=${2:-$root/runs/memory-sweeps-$(date +%Y%m%d-%H%M%S)}
budget=${3:-14}
bin=${REFORMER_BIN:-$root/build/openmp/bin/reformer}
export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
mkdir -p "$out"
memory() { "$bin" memory --budget-gib "$budget" "$@"; }
memory --lengths 1024 2048 4096 8192 16384 32768 65536 --layers 2 --steps 0 --out "$out/len"
memory --variants full lsh-1 lsh-2 lsh-4 lsh-8 --tokens 32768 \
  --lengths 1024 2048 4096 8192 16384 32768 --layers 2 --steps 2 --out "$out/tokens"
memory --variants full full-rev lsh-2 exact-rev reformer --lengths 4096 --layers 1 2 4 8 12 \
  --steps 0 --out "$out/layers"
rss() {  # rss <dir> <command...>: runs it, its peak resident set to <dir>/maxrss_kib
  local dir=$1
  shift
  mkdir -p "$dir"
  /usr/bin/time -f %M -o "$dir/maxrss_kib" "$@"
}
rss "$out/r64k" "$bin" memory --budget-gib "$budget" --variants reformer --lengths 65536 \
  --layers 6 --steps 1 --out "$out/r64k"
rss "$out/r512k" "$bin" memory --budget-gib "$budget" --variants reformer --lengths 524288 \
  --layers 6 --steps 0 --out "$out/r512k"
# The encoder-decoder (docs/memory.md, "The encoder-decoder").
"$bin" memory --model transformer --budget-gib "$budget" --lengths 1024,4096,16384 --steps 1 \
  --out "$out/seq2seq_len"
"$bin" memory --model transformer --budget-gib "$budget" \
  --variants full,full-rev,exact,exact-rev,reformer --lengths 4096 --layers 2,4,6 --steps 0 \
  --out "$out/seq2seq_layers"
/usr/bin/python3 "$root/experiments/plot_memory.py" --lengths "$out/len" --tokens "$out/tokens" \
  --layers "$out/layers" --out-prefix "$out/memory"
/usr/bin/python3 "$root/experiments/pytorch_compare.py" --threads "$threads" --reformer "$bin" \
  --budget-gib "$budget" --out "$out/pytorch"

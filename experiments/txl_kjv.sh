#!/usr/bin/env bash
# Transformer-XL on the King James Bible (4.3 MB of English text from Debian's
# bible-kjv-text package): trains experiments/txl_cpu.toml (about 11 minutes
# on 2 cores), then evaluates the whole validation and test splits with the
# training's memory (64), without recurrence (mem_len 0) and with longer
# memories, and times evaluation with a memory against recomputing the same
# context for every segment (eval.recompute, the Transformer-XL paper's
# comparison). Prints the tables of docs/transformer_xl.md.
#
#   experiments/txl_kjv.sh [BUILD_DIR] [OUT_DIR]     (defaults build/openmp, runs/txl_kjv)
#
# The corpus: `apt-get install bible-kjv`, then the script writes
# data/kjv.txt with `bible gen1:1-rev22:21` (every verse, 4,298,239 bytes).
set -euo pipefail
build=${1:-build/openmp}
out=${2:-runs/txl_kjv}
reformer="$build/bin/reformer"
threads=${THREADS:-2}
mkdir -p data "$out"
if [ ! -s data/kjv.txt ]; then
  command -v bible >/dev/null || { echo "txl_kjv.sh: install Debian's bible-kjv (apt-get install bible-kjv)" >&2; exit 1; }
  bible "gen1:1-rev22:21" > data/kjv.txt
fi
lscpu | grep -E "Model name|Flags" | sed 's/\(Flags:\).*\(avx512f\).*/\1 ... \2 .../' | head -2
python3 experiments/sgemm_rate.py --threads "$threads" --bench-ops "$build/bench/bench_ops" 2>/dev/null || true

run="$out/run"
if [ ! -d "$run/checkpoints" ]; then
  /usr/bin/time -f "training wall time %e s" \
    "$reformer" --threads "$threads" train experiments/txl_cpu.toml \
      data.path=data/kjv.txt run.dir="$run" | tee "$out/train.log"
fi

ev() { "$reformer" --threads "$threads" eval "$run" --batches 0 "$@" | sed 's/.*tokens)://'; }
echo "## bits per character (whole splits; training: tgt_len 64, mem_len 64)"
for split in valid test; do
  for tgt in 64 16; do
    for mem in 0 64 128 256 512; do
      [ $tgt = 16 ] && [ $mem = 512 ] && continue
      echo "$split tgt_len=$tgt mem_len=$mem: $(ev --split $split eval.tgt_len=$tgt eval.mem_len=$mem)"
    done
    # The paper's evaluation settings: distances clamped at the longest one
    # seen in training, every query over the same number of keys.
    echo "$split tgt_len=$tgt mem_len=128 clamp_len=127 same_length: $(ev --split $split \
      eval.tgt_len=$tgt eval.mem_len=128 eval.clamp_len=127 eval.same_length=on)"
  done
done | tee "$out/bpc.txt"

echo "## evaluation speed: memory against recomputing the context (50 segments of 16 streams)"
for mem in 64 256 512; do
  for recompute in false true; do
    line=$("$reformer" --threads "$threads" eval "$run" --batches 50 eval.mem_len=$mem eval.recompute=$recompute)
    echo "mem_len=$mem recompute=$recompute: ${line##*:}"
  done
done | tee "$out/speed.txt"

echo "## training and evaluation speed against Hugging Face's Transformer-XL (PyTorch), same size"
rm -rf "$out/speed_run"
"$reformer" --threads "$threads" train experiments/txl_cpu.toml data.path=data/kjv.txt \
  run.dir="$out/speed_run" train.steps=100 train.log_every=100 train.eval_every=0 | grep "^step 100"
"$reformer" --threads "$threads" eval "$out/speed_run" --batches 50 | sed 's/.*(/ours eval (mem_len 64): (/'
PYTHON=${PYTHON:-/work/venv/bin/python}
"$PYTHON" experiments/txl_pytorch_peer.py --threads "$threads" --steps 60 || echo "(no PyPI torch + transformers in $PYTHON)"

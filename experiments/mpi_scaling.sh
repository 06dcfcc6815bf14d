#!/usr/bin/env bash
# Data-parallel training on this machine (docs/distributed.md): the same run
# on 1 process and on 2 processes (mpirun, loopback), one OpenMP thread each,
# with the gradient sums overlapped with the reversible backward and without.
# Prints tokens/s and the allreduce time per step, and the model's gradient
# size for the paper-scale projection.
#
#   experiments/mpi_scaling.sh [BUILD_DIR] [STEPS]     (defaults build/openmp, 30)
# The text: data/kjv.txt (experiments/txl_kjv.sh writes it; any text file of
# 100 KB or more works).
set -euo pipefail
build=${1:-build/openmp}
steps=${2:-30}
reformer="$build/bin/reformer"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
lscpu | grep -E "Model name" | head -1
lscpu | grep -qw avx512f && echo "ISA: AVX-512" || echo "ISA: AVX2 (no AVX-512)"
python3 experiments/sgemm_rate.py --threads 1 --bench-ops "$build/bench/bench_ops" 2>/dev/null || true
"$reformer" info | grep -E "MPI|host vector"

# The model: the paper's enwik8 Reformer shape at a CPU size: 6 reversible
# layers alternating local and LSH attention, d_model 256, 4 heads of 64,
# d_ff 1024, length 4096, global batch 4 (2 sequences per process on 2).
run() {  # run <name> <processes> <overrides...>
  local name=$1 np=$2
  shift 2
  local args=(train experiments/char_lm.toml "run.dir=\"$out/$name\"" data.path=data/kjv.txt
    model.layers=6 model.d_model=256 model.d_ff=1024 model.heads=4 model.d_head=64
    'model.attention=["local","lsh"]' model.max_length=4096 data.length=4096 model.dropout=0.0
    train.batch=4 train.steps=$steps train.log_every=$steps train.eval_every=0
    train.checkpoint_every=0 train.eval_batches=1 "$@")
  if [ "$np" -eq 1 ]; then
    "$reformer" --threads 1 "${args[@]}"
  else
    mpirun --oversubscribe -np "$np" "$reformer" --threads 1 "${args[@]}"
  fi | grep -E "^run |^step $steps/|gradient allreduce|trained" | sed "s/^/$name: /"
}
run one 1
run two-overlap 2 train.overlap_allreduce=true
run two-after 2 train.overlap_allreduce=false

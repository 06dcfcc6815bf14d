#!/usr/bin/env bash
# Before/after timing of the attention kernels in one run: builds bench_attention
# at another git revision of this repository (default: the parent of the first
# commit of the layer-API change, 0e2cd42) in a temporary worktree and runs the
# cases both builds share, alternating builds, at the given thread counts.
#   bench/compare_revisions.sh [REV] [THREADS...]     (default: 0e2cd42, 2 1)
# Needs the OpenMP build of this tree in build/openmp (tests/run_all.sh or the
# quickstart makes it). Prints Google Benchmark tables; bench/make_tables.py is
# not needed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rev=${1:-0e2cd42}
shift || true
threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(2 1)
deps=${REFORMER_DEPS:-$HOME/.cache/reformer-deps}
old=${TMPDIR:-/tmp}/reformer-rev-$rev
if [ ! -x "$old/build/bench/bench_attention" ]; then
  git -C "$root" worktree add --detach "$old" "$rev" >/dev/null 2>&1 || true
  cmake -S "$old" -B "$old/build" -G Ninja -DKokkos_ROOT="$deps/openmp" \
    -DKokkosKernels_ROOT="$deps/openmp" -DREFORMER_ENABLE_TESTS=OFF >/dev/null
  cmake --build "$old/build" --target bench_attention >/dev/null
fi
new=$root/build/openmp/bench/bench_attention
shared='BM_(Lsh|Local)Attention/(4096|16384)(/2)?/it|BM_FullAttention/4096/it|BM_LshHashAndSort/(16384|65536)/2/it'
for t in "${threads[@]}"; do
  for side in before after; do
    bin=$old/build/bench/bench_attention
    [ $side = after ] && bin=$new
    echo "=== $side ($rev vs $(git -C "$root" rev-parse --short HEAD)), OMP_NUM_THREADS=$t"
    OMP_NUM_THREADS=$t OMP_PROC_BIND=false "$bin" --benchmark_filter="$shared" 2>/dev/null |
      grep -E '^BM_'
  done
  echo "=== after only, OMP_NUM_THREADS=$t"
  OMP_NUM_THREADS=$t OMP_PROC_BIND=false "$new" \
    --benchmark_filter='BM_AttentionLayer/./(4096|16384)/it|BM_LshSort/65536/it' 2>/dev/null | grep -E '^BM_'
done

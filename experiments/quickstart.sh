#!/usr/bin/env bash
# The main job on the OpenMP backend: installs only what it needs, builds, then
# runs `reformer info` and a short benchmark of the ops and attention variants
# (REFORMER_QUICK_OPS / REFORMER_QUICK_ATTENTION change the benchmark filters).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${REFORMER_BUILD:-$root/build}/openmp
DEPS=${REFORMER_DEPS:-$HOME/.cache/reformer-deps}
"$root/cmake/install-deps.sh" openmp >/dev/null
mkdir -p "$(dirname "$build")"
cmake -S "$root" -B "$build" -G Ninja -DKokkos_ROOT="$DEPS/openmp" \
  -DKokkosKernels_ROOT="$DEPS/openmp" -DREFORMER_ENABLE_TESTS=OFF >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)"
"$build/bin/reformer" info
# A short benchmark: the core ops at 4K positions x d_model 256, then the three
# attention variants forward + backward at 4K positions (full at 2K).
"$build/bench/bench_ops" --benchmark_filter="${REFORMER_QUICK_OPS:-/4096/256/}" \
  --benchmark_min_time=0.05
"$build/bench/bench_attention" \
  --benchmark_filter="${REFORMER_QUICK_ATTENTION:-FullAttention/2048/|LshAttention/4096/2/|LocalAttention/4096/}"

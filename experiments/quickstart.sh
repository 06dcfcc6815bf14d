#!/usr/bin/env bash
# The main job on the OpenMP backend: installs only what it needs, builds, runs
# `reformer info`, then trains the paper's duplication task (0 w 0 w, length
# 256, one LSH layer) sized for a CPU, evaluates the checkpoint and prints a
# generated sample: the model copies the first half of a sequence it has not
# seen. The run folder is runs/quickstart-<time> (REFORMER_RUN changes it);
# QUICKSTART_CONFIG picks another config (default experiments/duplication_lsh.toml).
# REFORMER_ARCH picks the CPU target (default native; x86-64-v3 runs on every x86
# machine with AVX2, as a binary built for another machine would).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${REFORMER_BUILD:-$root/build}/openmp
DEPS=${REFORMER_DEPS:-$HOME/.cache/reformer-deps}
"$root/cmake/install-deps.sh" openmp >/dev/null
mkdir -p "$(dirname "$build")"
cmake -S "$root" -B "$build" -G Ninja -DKokkos_ROOT="$DEPS/openmp" \
  -DKokkosKernels_ROOT="$DEPS/openmp" -DREFORMER_ENABLE_TESTS=OFF \
  -DREFORMER_ARCH="${REFORMER_ARCH:-native}" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)"
"$build/bin/reformer" info
run=${REFORMER_RUN:-$root/runs/quickstart-$(date +%Y%m%d-%H%M%S)}
config=${QUICKSTART_CONFIG:-$root/experiments/duplication_lsh.toml}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} OMP_PROC_BIND=${OMP_PROC_BIND:-false}
# Stops once the validation accuracy on the second copy reaches 99%.
"$build/bin/reformer" train "$config" run.dir="\"$run\"" train.target_accuracy=0.99
"$build/bin/reformer" eval "$run" --batches 8
"$build/bin/reformer" generate "$run"

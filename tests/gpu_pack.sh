#!/usr/bin/env bash
# Builds the test and benchmark binaries and the `reformer` program for an
# NVIDIA Hopper GPU (sm_90: H100, H200) with CUDA 11.8 and packs them, with the
# shared libraries they need beyond the C and C++ runtimes, into
# .gpu/pkg.tar.xz (about 20 MB), for a machine that has a GPU driver but no
# CUDA 11 or HDF5 libraries (the lent GPU machine: see tests/gpu_run.sh).
#
#   tests/gpu_pack.sh          # about 45 min on 2 cores (nvcc), 10 min on 16
#
# Kokkos 3.4 aborts when the kernels' compute capability has another major
# number than the device's, so everything, Kokkos included, is compiled for
# sm_90 (cmake/install-deps.sh cuda-hopper: Kokkos Kernels' own gemm, since
# cuBLAS 11 is 600 MB).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${REFORMER_DEPS:-$HOME/.cache/reformer-deps}
build=${REFORMER_BUILD:-$root/build}/cuda-hopper
mkdir -p "$(dirname "$build")"
"$root/cmake/install-deps.sh" cuda-hopper
export PATH=/usr/bin:$PATH NVCC_WRAPPER_DEFAULT_COMPILER=g++-11
# The compiler cache of tests/run_all.sh: a rebuild after a small change
# recompiles only what changed, also from another clone.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR=$DEPS/ccache CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-12G}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja "${launcher[@]}" -DCMAKE_CXX_COMPILER="$DEPS/nvcc_wrapper_sm90" \
  -DCMAKE_C_COMPILER=gcc-11 -DKokkos_ROOT="$DEPS/cuda-hopper" \
  -DKokkosKernels_ROOT="$DEPS/cuda-hopper" -DREFORMER_ENABLE_TESTS=ON -DREFORMER_ENABLE_BENCH=ON \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
# PACK_BINARIES names a subset (e.g. "test_attention bench_attention reformer")
# for a short lease or a slow build machine; gpu_run.sh runs what is there.
all_binaries="tests/test_core tests/test_ops tests/test_attention tests/test_layers tests/test_models
  tests/test_train tests/test_data tests/test_io tests/test_config tests/op_fingerprint
  bench/bench_attention bench/bench_model bench/bench_decode bench/bench_ops bin/reformer"
binaries=()
for exe in $all_binaries; do
  if [ -z "${PACK_BINARIES:-}" ] || [[ " $PACK_BINARIES " == *" ${exe##*/} "* ]]; then
    binaries+=("$exe")
  fi
done
[ ${#binaries[@]} -gt 0 ] || { echo "gpu_pack.sh: PACK_BINARIES names none of: $all_binaries" >&2; exit 2; }
targets=()
for exe in "${binaries[@]}"; do
  name=${exe##*/}
  [ "$name" = reformer ] && name=reformer_cli  # bin/reformer's target
  targets+=("$name")
done
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" -- -k 0
pack=$(mktemp -d)
mkdir -p "$pack/pkg/bin" "$pack/pkg/lib"
for exe in "${binaries[@]}"; do
  cp "$build/$exe" "$pack/pkg/bin/"
done
strip "$pack"/pkg/bin/*
# Every library the binaries load except the C and C++ runtimes, which the
# GPU machine has (newer).
for exe in "$pack"/pkg/bin/*; do ldd "$exe" | awk '{print $3}' | grep '^/' || true; done | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s)\.so' |
  while read -r lib; do cp -L "$lib" "$pack/pkg/lib/"; done
# What the binaries were built from: tests/gpu_run.sh compares the code hash
# with the tree it runs in (the commit is for people; the hash also covers
# uncommitted changes).
{
  echo "code $("$root/tests/code_hash.sh")"
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ)"
} >"$pack/pkg/SOURCE"
mkdir -p "$root/.gpu"
tar -C "$pack" -cJf "$root/.gpu/pkg.tar.xz" pkg
rm -rf "$pack"
grep -qx '/.gpu/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$root/.git/info/exclude"
ls -la "$root/.gpu/pkg.tar.xz"

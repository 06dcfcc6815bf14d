#!/usr/bin/env bash
# Provides Kokkos + Kokkos Kernels (and the other libraries the project needs) for
# each requested backend, in a cache prefix outside the work tree. Re-running it is
# cheap: installed packages and finished builds are detected and reused.
#
#   cmake/install-deps.sh [serial] [openmp] [cuda] [cuda-hopper] [hip] [aarch64] [testing]   (default: openmp)
#
# Backends:
#   serial  Debian's libtrilinos-kokkos-dev / libtrilinos-kokkos-kernels-dev (3.4.01)
#   openmp  Kokkos + Kokkos Kernels 3.4.01 built from Debian's trilinos source package
#   cuda    same sources, Debian non-free nvidia-cuda-toolkit 11.8, g++-11 host, sm_80
#   cuda-hopper  the same CUDA 11.8 toolchain for sm_90 (H100, H200), with Kokkos
#           Kernels' own gemm instead of cuBLAS: binaries that can be copied to a
#           machine that has a GPU driver but no CUDA 11 libraries (only the
#           0.7 MB libcudart.so.11.0 travels with them). Kokkos 3.4 refuses to run
#           kernels whose compute capability's major number differs from the
#           device's, so sm_80 code (or its PTX) cannot serve a Hopper GPU.
#   hip     same sources, Debian hipcc 5.2, gfx908
#   aarch64 same sources cross-compiled for 64-bit Arm (OpenMP, no BLAS TPL) with
#           Debian's g++-aarch64-linux-gnu, plus GoogleTest cross-compiled from
#           /usr/src/googletest, and qemu-user to run the tests; no arm64
#           (multiarch) packages. Toolchain file: cmake/toolchain-aarch64.cmake
#   testing GoogleTest, Open MPI, python3 with numpy and h5py, procps, ccache:
#           what only the test suite uses (the checkpoint tests read a file with
#           the system python3's h5py; tests/run_all.sh keeps a compiler cache)
# A user with their own Kokkos 4.x passes -DKokkos_ROOT=... -DKokkosKernels_ROOT=...
# to CMake and does not need this script.
#
# Environment: REFORMER_DEPS (cache prefix, default ~/.cache/reformer-deps).
# Prints, for every backend, the CMake prefix path to use on the last lines.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEPS=${REFORMER_DEPS:-$HOME/.cache/reformer-deps}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$DEPS"
backends=("$@")
[ ${#backends[@]} -eq 0 ] && backends=(openmp)

log() { printf '[install-deps] %s\n' "$*" >&2; }
die() { printf '[install-deps] error: %s\n' "$*" >&2; exit 1; }

for b in "${backends[@]}"; do
  case "$b" in serial | openmp | cuda | cuda-hopper | hip | aarch64 | testing) ;;
  *) die "unknown backend '$b' (expected serial, openmp, cuda, cuda-hopper, hip, aarch64 or testing)" ;;
  esac
done

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
apt_updated=0
apt_update() {
  [ $apt_updated -eq 1 ] && return 0
  log "apt-get update"
  $SUDO apt-get update -qq >&2
  apt_updated=1
}
# Installs the Debian packages that are not installed yet.
apt_need() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_update
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >"$DEPS/apt.log" 2>&1 || { tail -n 30 "$DEPS/apt.log" >&2; die "apt-get install failed"; }
}
# Adds an apt source file once (for deb-src or the non-free component).
apt_source() {
  local name=$1 types=$2 components=$3 file=/etc/apt/sources.list.d/$1.sources
  [ -f "$file" ] && return 0
  log "adding apt source $file ($types: $components)"
  printf 'Types: %s\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: %s\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$types" "$components" | $SUDO tee "$file" >/dev/null
  apt_updated=0
}

# Libraries every build uses.
apt_need cmake ninja-build g++ pkg-config libhdf5-dev libpng-dev libbenchmark-dev libopenblas-dev \
  libcli11-dev libtomlplusplus-dev python3

# Unpacks packages/kokkos and packages/kokkos-kernels from Debian's trilinos source.
SRC=$DEPS/src/kokkos-3.4.01
kokkos_sources() {
  [ -f "$SRC/.complete" ] && return 0
  apt_source reformer-deb-src deb-src main
  apt_update
  mkdir -p "$DEPS/src/download"
  log "downloading Debian's trilinos source package"
  (cd "$DEPS/src/download" && apt-get source --download-only -qq trilinos 2>&1 | grep -v unsandboxed >&2 || true)
  local tarball
  tarball=$(ls "$DEPS"/src/download/trilinos_*.orig.tar.* | head -n 1)
  rm -rf "$SRC" && mkdir -p "$SRC"
  log "unpacking Kokkos and Kokkos Kernels from $(basename "$tarball")"
  tar -xf "$tarball" -C "$SRC" --strip-components=2 --wildcards \
    '*/packages/kokkos/*' '*/packages/kokkos-kernels/*'
  [ -f "$SRC/kokkos/CMakeLists.txt" ] || die "kokkos sources missing in $tarball"
  touch "$SRC/.complete"
}

# Kokkos Kernels with every explicit instantiation off: the project instantiates
# the few kernels it uses from the headers, so the library builds in seconds.
KK_NO_ETI=(
  -DKokkosKernels_INST_FLOAT=OFF -DKokkosKernels_INST_DOUBLE=OFF
  -DKokkosKernels_INST_COMPLEX_FLOAT=OFF -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF
  -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_ORDINAL_INT64_T=OFF
  -DKokkosKernels_INST_OFFSET_INT=OFF -DKokkosKernels_INST_OFFSET_SIZE_T=OFF
  -DKokkosKernels_INST_LAYOUTLEFT=OFF -DKokkosKernels_INST_LAYOUTRIGHT=OFF
  -DKokkosKernels_INST_EXECSPACE_SERIAL=OFF -DKokkosKernels_INST_EXECSPACE_OPENMP=OFF
  -DKokkosKernels_INST_EXECSPACE_CUDA=OFF -DKokkosKernels_INST_MEMSPACE_CUDASPACE=OFF
  -DKokkosKernels_INST_MEMSPACE_CUDAUVMSPACE=OFF -DKokkosKernels_INST_EXECSPACE_HIP=OFF
  -DKokkosKernels_INST_MEMSPACE_HIPSPACE=OFF -DKokkosKernels_INST_MEMSPACE_HOSTSPACE=OFF
  -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF
)

# build_kokkos <backend> <kokkos cmake args...> -- <kernels cmake args...>
build_kokkos() {
  local backend=$1
  shift
  local prefix=$DEPS/$backend
  if [ -f "$prefix/.complete" ]; then
    log "$backend: reusing $prefix"
    return 0
  fi
  kokkos_sources
  local kargs=() kkargs=() seen=0
  for a in "$@"; do
    if [ "$a" = "--" ]; then seen=1; elif [ $seen -eq 0 ]; then kargs+=("$a"); else kkargs+=("$a"); fi
  done
  local build=$DEPS/build/$backend
  rm -rf "$build" "$prefix"
  mkdir -p "$build"
  log "$backend: building Kokkos 3.4.01 into $prefix"
  cmake -S "$SRC/kokkos" -B "$build/kokkos" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_CXX_STANDARD=17 -DKokkos_ENABLE_SERIAL=ON \
    "${kargs[@]}" >"$build.kokkos.log" 2>&1 || { tail -n 40 "$build.kokkos.log" >&2; die "$backend: Kokkos configure failed"; }
  cmake --build "$build/kokkos" -j "$JOBS" >>"$build.kokkos.log" 2>&1 &&
    cmake --install "$build/kokkos" >>"$build.kokkos.log" 2>&1 ||
    { tail -n 40 "$build.kokkos.log" >&2; die "$backend: Kokkos build failed (log: $build.kokkos.log)"; }
  log "$backend: building Kokkos Kernels 3.4.01 (no explicit instantiation)"
  cmake -S "$SRC/kokkos-kernels" -B "$build/kernels" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DKokkos_ROOT="$prefix" "${KK_NO_ETI[@]}" \
    "${kkargs[@]}" >"$build.kernels.log" 2>&1 || { tail -n 40 "$build.kernels.log" >&2; die "$backend: Kokkos Kernels configure failed"; }
  cmake --build "$build/kernels" -j "$JOBS" >>"$build.kernels.log" 2>&1 &&
    cmake --install "$build/kernels" >>"$build.kernels.log" 2>&1 ||
    { tail -n 40 "$build.kernels.log" >&2; die "$backend: Kokkos Kernels build failed (log: $build.kernels.log)"; }
  rm -rf "$build"
  touch "$prefix/.complete"
}

for b in "${backends[@]}"; do
  case "$b" in
  testing)
    # Open MPI: the data-parallel tests run two processes with mpirun. Tools the
    # tests and tests/run_all.sh call: python3 (with numpy and h5py: the
    # checkpoint, importer and CLI tests, tests/harness), pgrep and pkill (procps:
    # the kill and signal tests), timeout (coreutils), mount (tmpfs for the
    # full-disk test), ccache (the compiler cache kept in $REFORMER_DEPS/ccache).
    apt_need libgtest-dev libgmock-dev python3 python3-numpy python3-h5py libopenmpi-dev \
      openmpi-bin procps coreutils mount ccache
    ;;
  serial)
    apt_need libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev
    echo "serial=/usr"
    ;;
  openmp)
    build_kokkos openmp -DKokkos_ENABLE_OPENMP=ON -- -DKokkosKernels_ENABLE_TPL_BLAS=ON
    echo "openmp=$DEPS/openmp"
    ;;
  cuda | cuda-hopper)
    apt_source reformer-non-free deb "contrib non-free"
    apt_need nvidia-cuda-toolkit g++-11
    # The hard-coded default architecture of 3.4's nvcc_wrapper (sm_35) is rejected
    # by CUDA 11.8; a patched copy defaults to sm_80 and uses g++-11 as host compiler.
    kokkos_sources
    # Some images link a newer CUDA's headers into /usr/local/include, which the host
    # compiler searches before /usr/include; a folder of links to the 11.8 headers,
    # passed with -I, puts the toolkit's own headers first.
    shadow=$DEPS/cuda-11.8-include
    if [ ! -d "$shadow" ]; then
      mkdir -p "$shadow.tmp"
      for h in /usr/local/include/*; do
        name=$(basename "$h")
        [ -e "/usr/include/$name" ] && [ -L "$h" ] && readlink "$h" | grep -q cuda &&
          ln -s "/usr/include/$name" "$shadow.tmp/$name"
      done
      mv "$shadow.tmp" "$shadow"
    fi
    wrapper=$DEPS/nvcc_wrapper
    if [ ! -x "$wrapper" ]; then
      sed -e 's/^default_arch="sm_35"/default_arch="sm_80"/' \
        -e "2i set -- -I$shadow \"\$@\"" "$SRC/kokkos/bin/nvcc_wrapper" >"$wrapper.tmp"
      grep -q 'default_arch="sm_80"' "$wrapper.tmp" || die "could not patch nvcc_wrapper's default arch"
      chmod +x "$wrapper.tmp" && mv "$wrapper.tmp" "$wrapper"
    fi
    if [ "$b" = cuda ]; then
      PATH=/usr/bin:$PATH NVCC_WRAPPER_DEFAULT_COMPILER=g++-11 build_kokkos cuda \
        -DCMAKE_CXX_COMPILER="$wrapper" -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON \
        -DKokkos_ARCH_AMPERE80=ON -- -DCMAKE_CXX_COMPILER="$wrapper" -DKokkosKernels_ENABLE_TPL_CUBLAS=ON
      echo "cuda=$DEPS/cuda"
    else
      # Kokkos 3.4 has no Hopper option: it is configured for Ampere (the
      # closest tuning) and this wrapper turns its -arch=sm_80 into sm_90.
      hopper=$DEPS/nvcc_wrapper_sm90
      if [ ! -x "$hopper" ]; then
        sed -e 's/^default_arch="sm_80"/default_arch="sm_90"/' \
          -e '3i set -- "${@/#-arch=sm_80/-arch=sm_90}"' "$wrapper" >"$hopper.tmp"
        grep -q 'default_arch="sm_90"' "$hopper.tmp" || die "could not patch nvcc_wrapper for sm_90"
        chmod +x "$hopper.tmp" && mv "$hopper.tmp" "$hopper"
      fi
      PATH=/usr/bin:$PATH NVCC_WRAPPER_DEFAULT_COMPILER=g++-11 build_kokkos cuda-hopper \
        -DCMAKE_CXX_COMPILER="$hopper" -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON \
        -DKokkos_ARCH_AMPERE80=ON -- -DCMAKE_CXX_COMPILER="$hopper" -DKokkosKernels_ENABLE_TPL_CUBLAS=OFF
      echo "cuda-hopper=$DEPS/cuda-hopper"
    fi
    ;;
  hip)
    apt_need hipcc libamdhip64-dev rocm-device-libs
    build_kokkos hip -DCMAKE_CXX_COMPILER=hipcc -DKokkos_ENABLE_HIP=ON -DKokkos_ARCH_VEGA908=ON \
      -- -DCMAKE_CXX_COMPILER=hipcc
    echo "hip=$DEPS/hip"
    ;;
  aarch64)
    # No arm64 multiarch packages: the cross runtime (libc, libstdc++, libgomp)
    # comes with the compiler, and what the core, ops and attention tests link
    # besides it (Kokkos, Kokkos Kernels without a BLAS, GoogleTest) is built
    # here. HDF5, toml++ and CLI11 are not needed (REFORMER_CORE_ONLY).
    apt_need g++-aarch64-linux-gnu qemu-user googletest
    toolchain=$here/toolchain-aarch64.cmake
    build_kokkos aarch64 -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DKokkos_ENABLE_OPENMP=ON \
      -- -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_FIND_ROOT_PATH="$DEPS/aarch64"
    if [ ! -f "$DEPS/aarch64/.googletest" ]; then
      log "aarch64: building GoogleTest from /usr/src/googletest"
      gbuild=$DEPS/build/aarch64-googletest
      rm -rf "$gbuild"
      cmake -S /usr/src/googletest -B "$gbuild" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_INSTALL_PREFIX="$DEPS/aarch64" \
        -DBUILD_GMOCK=OFF >"$gbuild.log" 2>&1 &&
        cmake --build "$gbuild" -j "$JOBS" >>"$gbuild.log" 2>&1 &&
        cmake --install "$gbuild" >>"$gbuild.log" 2>&1 ||
        { tail -n 40 "$gbuild.log" >&2; die "aarch64: GoogleTest build failed (log: $gbuild.log)"; }
      rm -rf "$gbuild"
      touch "$DEPS/aarch64/.googletest"
    fi
    echo "aarch64=$DEPS/aarch64"
    ;;
  esac
done

#!/usr/bin/env bash
# Checks the project against a Kokkos 4.x release (written for 4.6.x) in one
# command: builds Kokkos and Kokkos Kernels (OpenMP + Serial, shared libraries,
# Release, C++17, no architecture flags) from the source trees given, installs
# them under the work folder, builds the project against them (tests on, MPI and
# benchmarks off) and runs its OpenMP tests through tests/harness/ctest_step.py.
#
#   cmake/check-kokkos4.sh KOKKOS_SRC KERNELS_SRC [WORK]
#
#   KOKKOS_SRC   Kokkos source tree (a release tarball unpacked, or a checkout)
#   KERNELS_SRC  Kokkos Kernels source tree of the matching release
#   WORK         work folder (default build/kokkos4): install/kokkos and
#                install/kokkos-kernels (the libraries), reformer/ (the project's
#                build), logs/ (every configure and build log)
# The three can also be given as the environment variables KOKKOS_SRC,
# KERNELS_SRC and WORK. Other environment variables:
#   JOBS            parallel build jobs and tests at a time (default: nproc)
#   REFORMER_DEPS   the compiler cache lives in $REFORMER_DEPS/ccache (default
#                   ~/.cache/reformer-deps, as for cmake/install-deps.sh)
#   KK_COMPONENTS   Kokkos Kernels components to build: BLAS (default, the only
#                   one the project uses) or ALL
#   KK_TPL_BLAS     ON (default) or OFF: Kokkos Kernels' host BLAS/LAPACK TPL
# Kokkos Kernels' explicit instantiation is kept small: float and double, int
# ordinals and offsets, LayoutLeft, OpenMP execution space; everything else is
# instantiated from the headers where the project uses it.
#
# Reruns are cheap: each library is rebuilt only when its source tree (file
# names, sizes, times) or its options changed (stamp file in its install
# prefix); the project's build is incremental.
# Prints the versions built (from the installed KokkosConfigVersion.cmake and
# KokkosKernelsConfigVersion.cmake) and the time of each stage, and ends with the
# harness's line `NAME: P passed, F failed, S skipped (expected E)`. The exit
# status is non-zero when any stage fails or any test fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '[check-kokkos4] %s\n' "$*" >&2; }
die() { printf '[check-kokkos4] error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 2; }

case "${1:-}" in -h | --help) usage ;; esac
KOKKOS_SRC=${1:-${KOKKOS_SRC:-}}
KERNELS_SRC=${2:-${KERNELS_SRC:-}}
WORK=${3:-${WORK:-$root/build/kokkos4}}
if [ -z "$KOKKOS_SRC" ] || [ -z "$KERNELS_SRC" ]; then usage; fi
if [ ! -f "$KOKKOS_SRC/CMakeLists.txt" ] || [ ! -d "$KOKKOS_SRC/core" ]; then
  die "$KOKKOS_SRC does not look like a Kokkos source tree"
fi
if [ ! -f "$KERNELS_SRC/CMakeLists.txt" ] || [ ! -d "$KERNELS_SRC/blas" ]; then
  die "$KERNELS_SRC does not look like a Kokkos Kernels source tree"
fi
KOKKOS_SRC=$(cd "$KOKKOS_SRC" && pwd)
KERNELS_SRC=$(cd "$KERNELS_SRC" && pwd)
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
JOBS=${JOBS:-$(nproc)}
DEPS=${REFORMER_DEPS:-$HOME/.cache/reformer-deps}
KK_COMPONENTS=${KK_COMPONENTS:-BLAS}
KK_TPL_BLAS=${KK_TPL_BLAS:-ON}
command -v cmake >/dev/null || die "cmake not found"
command -v ninja >/dev/null || die "ninja not found"
command -v python3 >/dev/null || die "python3 not found (tests/harness/ctest_step.py)"

kokkos_prefix=$WORK/install/kokkos
kernels_prefix=$WORK/install/kokkos-kernels
logs=$WORK/logs
mkdir -p "$logs"

# The compiler cache, as tests/run_all.sh keeps it.
# shellcheck source=cmake/compiler-cache.sh
source "$root/cmake/compiler-cache.sh"
use_compiler_cache "$root" "$DEPS"

kokkos_args=(
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON
  -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON -DKokkos_ARCH_NATIVE=OFF
  -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF -DKokkos_ENABLE_BENCHMARKS=OFF
)
case "$KK_COMPONENTS" in
ALL) components=(-DKokkosKernels_ENABLE_ALL_COMPONENTS=ON) ;;
BLAS) components=(-DKokkosKernels_ENABLE_ALL_COMPONENTS=OFF -DKokkosKernels_ENABLE_COMPONENT_BLAS=ON) ;;
*) die "KK_COMPONENTS must be BLAS or ALL (got '$KK_COMPONENTS')" ;;
esac
kernels_args=(
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
  "${components[@]}"
  -DKokkosKernels_ENABLE_TPL_BLAS="$KK_TPL_BLAS"
  -DKokkosKernels_INST_FLOAT=ON -DKokkosKernels_INST_DOUBLE=ON
  -DKokkosKernels_INST_COMPLEX_FLOAT=OFF -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF
  -DKokkosKernels_INST_ORDINAL_INT=ON -DKokkosKernels_INST_ORDINAL_INT64_T=OFF
  -DKokkosKernels_INST_OFFSET_INT=ON -DKokkosKernels_INST_OFFSET_SIZE_T=OFF
  -DKokkosKernels_INST_LAYOUTLEFT=ON -DKokkosKernels_INST_LAYOUTRIGHT=OFF
  -DKokkosKernels_INST_EXECSPACE_OPENMP=ON -DKokkosKernels_INST_EXECSPACE_SERIAL=OFF
  -DKokkosKernels_INST_MEMSPACE_HOSTSPACE=ON
  -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF
  -DKokkosKernels_ENABLE_PERFTESTS=OFF -DKokkosKernels_ENABLE_BENCHMARK=OFF
  -DKokkosKernels_ENABLE_DOCS=OFF
)

# fingerprint <source tree>: its path, file names, sizes and modification times.
fingerprint() {
  (cd "$1" && find . -path ./.git -prune -o -type f -printf '%P %s %T@\n' | LC_ALL=C sort | sha256sum |
    cut -d' ' -f1)
}
compiler_id() { "${CXX:-c++}" --version 2>/dev/null | head -n 1 || echo unknown; }

# version_of <prefix> <Package>: PACKAGE_VERSION from the installed <Package>ConfigVersion.cmake.
version_of() {
  local file
  file=$(find "$1" -name "$2ConfigVersion.cmake" -print -quit)
  [ -n "$file" ] || die "$2ConfigVersion.cmake not found under $1"
  sed -n 's/^ *set(PACKAGE_VERSION "\([^"]*\)").*/\1/p' "$file" | head -n 1
}

times=()
stage_start=0
begin() { stage_start=$(date +%s); log "$*"; }
took() { times+=("$(printf '%-34s %5d s' "$1" $(($(date +%s) - stage_start)))"); }

# build_package <name> <source> <build dir> <prefix> <stamp id> <cmake args...>:
# configure, build and install unless the prefix's stamp matches <stamp id>.
build_package() {
  local name=$1 src=$2 build=$3 prefix=$4 id=$5
  shift 5
  local stamp=$prefix/.check-kokkos4.stamp
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$id" ]; then
    log "$name: up to date in $prefix (same sources and options)"
    times+=("$(printf '%-34s %7s' "$name" reused)")
    return 0
  fi
  begin "$name: configure, build (-j $JOBS) and install into $prefix (log: $logs/$name.log)"
  rm -rf "$build" "$prefix"
  cmake -S "$src" -B "$build" -G Ninja "${launcher[@]}" -DCMAKE_INSTALL_PREFIX="$prefix" "$@" \
    >"$logs/$name.log" 2>&1 || { tail -n 40 "$logs/$name.log" >&2; die "$name: configure failed (log: $logs/$name.log)"; }
  cmake --build "$build" -j "$JOBS" >>"$logs/$name.log" 2>&1 ||
    { grep -E -A5 'error|FAILED' "$logs/$name.log" | head -n 60 >&2; die "$name: build failed (log: $logs/$name.log)"; }
  cmake --install "$build" >>"$logs/$name.log" 2>&1 ||
    { tail -n 40 "$logs/$name.log" >&2; die "$name: install failed (log: $logs/$name.log)"; }
  rm -rf "$build"
  printf '%s\n' "$id" >"$stamp"
  took "$name"
}

log "fingerprinting the source trees"
kokkos_id=$(printf '%s\n' "$KOKKOS_SRC" "$(fingerprint "$KOKKOS_SRC")" "$(compiler_id)" "${kokkos_args[@]}")
kernels_id=$(printf '%s\n' "$kokkos_id" "$KERNELS_SRC" "$(fingerprint "$KERNELS_SRC")" "${kernels_args[@]}")

build_package kokkos "$KOKKOS_SRC" "$WORK/kokkos-build" "$kokkos_prefix" "$kokkos_id" "${kokkos_args[@]}"
# A Kokkos rebuilt (new stamp) invalidates the Kokkos Kernels install through kernels_id.
build_package kokkos-kernels "$KERNELS_SRC" "$WORK/kernels-build" "$kernels_prefix" "$kernels_id" \
  -DKokkos_ROOT="$kokkos_prefix" "${kernels_args[@]}"

kokkos_version=$(version_of "$kokkos_prefix" Kokkos)
kernels_version=$(version_of "$kernels_prefix" KokkosKernels)
log "Kokkos $kokkos_version ($KOKKOS_SRC), Kokkos Kernels $kernels_version ($KERNELS_SRC)"

# The project. A build folder configured from another checkout is started afresh.
build=$WORK/reformer
if [ -f "$build/CMakeCache.txt" ] &&
  ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$build/CMakeCache.txt"; then
  log "project: $build was configured from another source folder; starting afresh"
  rm -rf "$build"
fi
begin "project: configure and build (-j $JOBS) in $build (log: $logs/reformer.log)"
cmake -S "$root" -B "$build" -G Ninja "${launcher[@]}" \
  -DKokkos_ROOT="$kokkos_prefix" -DKokkosKernels_ROOT="$kernels_prefix" \
  -DREFORMER_ENABLE_TESTS=ON -DREFORMER_ENABLE_MPI=OFF -DREFORMER_ENABLE_BENCH=OFF \
  >"$logs/reformer.log" 2>&1 || { tail -n 40 "$logs/reformer.log" >&2; die "project: configure failed (log: $logs/reformer.log)"; }
grep -E 'Reformer: Kokkos' "$logs/reformer.log" >&2 || true
cmake --build "$build" -j "$JOBS" >>"$logs/reformer.log" 2>&1 ||
  { grep -E -A5 'error|FAILED' "$logs/reformer.log" | head -n 60 >&2; die "project: build failed (log: $logs/reformer.log)"; }
took "project build"

major_minor=$(cut -d. -f1,2 <<<"$kokkos_version")
name="OpenMP ctest (Kokkos $major_minor)"
begin "project: $name, $JOBS at a time"
rc=0
python3 "$root/tests/harness/ctest_step.py" "$build" --name "$name" --jobs "$JOBS" 2>&1 |
  tee "$logs/ctest.log" || rc=$?
took "tests"

printf '\nKokkos %s, Kokkos Kernels %s (OpenMP, shared libraries); compiler: %s\n' \
  "$kokkos_version" "$kernels_version" "$(compiler_id)"
printf '%s\n' "${times[@]}"
result=$(awk -v p="$name: " 'index($0, p) == 1 && / passed, /' "$logs/ctest.log" | tail -n 1)
[ -n "$result" ] || { echo "FAIL $name: the harness printed no result line" && exit 1; }
echo "$result"
exit "$rc"

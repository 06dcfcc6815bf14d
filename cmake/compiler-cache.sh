# use_compiler_cache <source root> <deps folder>: when ccache is installed,
# keeps its cache in <deps folder>/ccache and sets `launcher` to the CMake
# arguments that use it (empty otherwise). Sourced by tests/run_all.sh and
# cmake/check-kokkos4.sh.
# shellcheck shell=bash disable=SC2034
use_compiler_cache() {
  launcher=()
  command -v ccache >/dev/null || return 0
  # CCACHE_BASEDIR and CCACHE_NOHASHDIR: a fresh clone in another folder hits the
  # entries of the last one (with debug information, as in the sanitizer build,
  # ccache would otherwise hash the build folder's path into every entry).
  export CCACHE_DIR=$2/ccache CCACHE_BASEDIR=$1 CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-12G}
  mkdir -p "$CCACHE_DIR"
  # Objects built with -march=native depend on the CPU, which the compiler's
  # command line does not show, so the resolved native target is hashed into
  # every entry.
  g++ -march=native -Q --help=target 2>/dev/null >"$CCACHE_DIR/native-target.txt" || true
  export CCACHE_EXTRAFILES=$CCACHE_DIR/native-target.txt
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
}

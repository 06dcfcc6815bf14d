#!/usr/bin/env bash
# Prints one hash of the sources the compiled binaries are built from (C++
# sources and headers, CMake files) under the repository root: the GPU pack
# (tests/gpu_pack.sh) records it, and tests/gpu_run.sh compares it with the
# tree it runs in, so that a pack built from other code is named as stale.
# Needs no git (the lent GPU machine gets a copy of the working tree).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
find src include tests bench cmake CMakeLists.txt -type f \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.inc' -o -name '*.in' \
  -o -name '*.cmake' -o -name CMakeLists.txt \) -print0 | LC_ALL=C sort -z |
  xargs -0 sha256sum | sha256sum | cut -c1-16

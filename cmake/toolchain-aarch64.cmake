# Cross-compiling for 64-bit Arm Linux (AArch64, NEON) on an x86-64 Debian
# machine with Debian's cross compiler (g++-aarch64-linux-gnu), the target's
# C and C++ runtime under /usr/aarch64-linux-gnu, and qemu-user running the
# test programs (ctest and gtest_discover_tests go through
# CMAKE_CROSSCOMPILING_EMULATOR). `cmake/install-deps.sh aarch64` installs
# these and builds Kokkos, Kokkos Kernels and GoogleTest for the target into
# $REFORMER_DEPS/aarch64; tests/run_all.sh shows the whole configure line:
#
#   cmake -S . -B build/aarch64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
#     -DCMAKE_FIND_ROOT_PATH=$DEPS/aarch64 -DKokkos_ROOT=$DEPS/aarch64 \
#     -DKokkosKernels_ROOT=$DEPS/aarch64 -DGTest_ROOT=$DEPS/aarch64 \
#     -DREFORMER_ARCH=armv8-a -DREFORMER_CORE_ONLY=ON
#
# Libraries and packages are looked up only in the target's trees: the
# cross runtime and whatever prefixes are added to CMAKE_FIND_ROOT_PATH (pass
# the prefix of the target's Kokkos there), never in the host's /usr/lib.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(REFORMER_CROSS_TRIPLE aarch64-linux-gnu)
set(REFORMER_CROSS_RUNTIME /usr/${REFORMER_CROSS_TRIPLE})
set(CMAKE_C_COMPILER ${REFORMER_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${REFORMER_CROSS_TRIPLE}-g++)

list(APPEND CMAKE_FIND_ROOT_PATH ${REFORMER_CROSS_RUNTIME})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# qemu-user's -L: the target's dynamic loader and shared libraries (libc,
# libstdc++, libgomp) come from the cross runtime.
find_program(REFORMER_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(REFORMER_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${REFORMER_QEMU_AARCH64} -L ${REFORMER_CROSS_RUNTIME})
endif()

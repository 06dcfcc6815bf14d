# Finds every dependency and wraps Kokkos + Kokkos Kernels behind one target,
# reformer_kokkos, whatever the install looks like:
#  - standalone installs (3.4 built from source, 4.x) export Kokkos::kokkoskernels;
#  - Debian's trilinos packages (3.4.01, Serial) export no usable Kokkos target
#    (Kokkos::kokkos points at a missing include directory) and only variables.

find_package(Kokkos REQUIRED)
find_package(KokkosKernels REQUIRED)

add_library(reformer_kokkos INTERFACE)
if(TARGET Kokkos::kokkoskernels)
  target_link_libraries(reformer_kokkos INTERFACE Kokkos::kokkoskernels Kokkos::kokkos)
else()
  target_include_directories(reformer_kokkos SYSTEM INTERFACE ${KokkosKernels_INCLUDE_DIRS}
                                                               ${Kokkos_INCLUDE_DIRS})
  target_link_directories(reformer_kokkos INTERFACE ${KokkosKernels_LIBRARY_DIRS})
  target_link_libraries(reformer_kokkos INTERFACE ${KokkosKernels_LIBRARIES}
                                                  ${KokkosKernels_TPL_LIBRARIES})
endif()

# Which backends this Kokkos was built with (for messages and the ctest labels).
set(REFORMER_BACKENDS "")
foreach(backend SERIAL OPENMP CUDA HIP)
  if(COMMAND kokkos_check)
    kokkos_check(DEVICES ${backend} RETURN_VALUE has_backend)
  elseif(DEFINED Kokkos_DEVICES)
    list(FIND Kokkos_DEVICES ${backend} found)
    if(found GREATER -1)
      set(has_backend TRUE)
    else()
      set(has_backend FALSE)
    endif()
  else()
    # Debian's TriBITS config: Serial only.
    if(backend STREQUAL "SERIAL")
      set(has_backend TRUE)
    else()
      set(has_backend FALSE)
    endif()
  endif()
  if(has_backend)
    list(APPEND REFORMER_BACKENDS ${backend})
  endif()
endforeach()
message(STATUS "Reformer: Kokkos ${Kokkos_VERSION} with backends: ${REFORMER_BACKENDS}")

# REFORMER_CORE_ONLY (core, ops, attention) needs none of HDF5, libpng, CLI11, toml++.
if(NOT REFORMER_CORE_ONLY)
  find_package(HDF5 REQUIRED COMPONENTS C)
  # HDF5 as plain paths, so that projects using the installed package need neither
  # FindHDF5 nor the C language.
  add_library(reformer_hdf5 INTERFACE)
  target_include_directories(reformer_hdf5 SYSTEM INTERFACE ${HDF5_INCLUDE_DIRS})
  target_link_libraries(reformer_hdf5 INTERFACE ${HDF5_LIBRARIES})
  target_compile_definitions(reformer_hdf5 INTERFACE ${HDF5_DEFINITIONS})
  # PNG images (io/png.hpp: LRA's Pathfinder), as plain paths like HDF5.
  find_package(PNG REQUIRED)
  add_library(reformer_png INTERFACE)
  target_include_directories(reformer_png SYSTEM INTERFACE ${PNG_INCLUDE_DIRS})
  target_link_libraries(reformer_png INTERFACE ${PNG_LIBRARIES})
  target_compile_definitions(reformer_png INTERFACE ${PNG_DEFINITIONS})
  find_package(CLI11 CONFIG REQUIRED)
  # TOML configs (Debian: libtomlplusplus-dev).
  find_package(tomlplusplus 3 CONFIG REQUIRED)
endif()
if(REFORMER_ENABLE_TESTS)
  find_package(GTest REQUIRED)
endif()
if(REFORMER_ENABLE_BENCH)
  find_package(benchmark REQUIRED)
  find_package(BLAS)  # for the benchmark that calls the host BLAS directly
endif()

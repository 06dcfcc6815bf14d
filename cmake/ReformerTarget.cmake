# reformer_host_target(ARCH): compile for -march=ARCH, after checking that the
# compiler takes it. Where the target has AVX-512, prefer 512-bit vectors in
# auto-vectorised loops too (GCC otherwise keeps them at 256 bits); on every
# other target the compiler's own choice stands. Sets REFORMER_TARGET_VECTOR_UNIT
# to what core/cpu_target.hpp will see (AVX-512, AVX2, NEON, ...), for messages.
include(CheckCXXCompilerFlag)
include(CheckCXXSourceCompiles)

function(reformer_host_target arch)
  string(MAKE_C_IDENTIFIER "${arch}" id)
  check_cxx_compiler_flag("-march=${arch}" REFORMER_HAS_MARCH_${id})
  if(NOT REFORMER_HAS_MARCH_${id})
    message(FATAL_ERROR "REFORMER_ARCH='${arch}': ${CMAKE_CXX_COMPILER} does not accept -march=${arch}. "
      "Use a target this compiler knows (native, x86-64-v3, x86-64-v4, armv8-a, ...) or -DREFORMER_ARCH= "
      "for the compiler's default.")
  endif()
  set(CMAKE_REQUIRED_FLAGS "-march=${arch}")
  check_cxx_source_compiles("#ifndef __AVX512F__\n#error no AVX-512\n#endif\nint main() { return 0; }"
    REFORMER_TARGET_AVX512_${id})
  unset(CMAKE_REQUIRED_FLAGS)
  add_compile_options(-march=${arch})
  if(REFORMER_TARGET_AVX512_${id})
    add_compile_options(-mprefer-vector-width=512)
    set(unit "AVX-512 (512-bit vectors preferred)")
  else()
    set(unit "no AVX-512")
  endif()
  message(STATUS "Reformer host target: -march=${arch}, ${unit}")
endfunction()

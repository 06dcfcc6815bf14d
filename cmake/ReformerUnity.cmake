# Unity builds (REFORMER_UNITY_BUILD, off by default): each folder's sources are
# compiled as a few combined translation units of at most REFORMER_UNITY_FILES
# files. Every file includes Kokkos, and a device compiler spends 8-9 s on those
# headers alone (nvcc; a second or two for g++), so the test command's
# compile-only and sanitizer builds combine them; incremental work keeps one
# object per file. A file whose private names collide with a neighbour's is
# either renamed or listed with SKIP_UNITY_BUILD_INCLUSION where it is added.
#
# The combined units are written here rather than by CMake's UNITY_BUILD,
# because CMake's units #include each source by its absolute path: that path
# reaches the preprocessed text (line markers, __FILE__), so the compiler cache
# (cmake/compiler-cache.sh) missed every unit in a clone at another path, in
# both its direct and preprocessor modes (CCACHE_BASEDIR rewrites only the
# command line's paths). These units include each source by its path relative to
# the unit, so two clones with the same layout preprocess to the same text.
option(REFORMER_UNITY_BUILD "Compile each folder's sources as a few combined translation units" OFF)
set(REFORMER_UNITY_FILES 4 CACHE STRING "Unity builds: at most this many files a combined translation unit")

# reformer_unity_groups(<target>): replaces the target's .cpp sources, folder by
# folder in sorted order, with combined units of at most REFORMER_UNITY_FILES
# files each, written to <binary dir>/unity/<target>/.
function(reformer_unity_groups target)
  if(NOT REFORMER_UNITY_BUILD)
    return()
  endif()
  if(NOT REFORMER_UNITY_FILES GREATER 0)
    message(FATAL_ERROR "REFORMER_UNITY_FILES is '${REFORMER_UNITY_FILES}': it must be a whole number of at least 1 "
                        "(files a combined unit). Pass e.g. -DREFORMER_UNITY_FILES=4.")
  endif()
  get_target_property(sources ${target} SOURCES)
  set(unit_dir "${CMAKE_CURRENT_BINARY_DIR}/unity/${target}")
  set(kept)
  set(groups)
  set(paths)
  foreach(source IN LISTS sources)
    get_filename_component(path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND paths "${path}")
  endforeach()
  list(SORT paths)
  foreach(path IN LISTS paths)
    get_source_file_property(skip "${path}" SKIP_UNITY_BUILD_INCLUSION)
    if(skip OR NOT path MATCHES "\\.cpp$")
      list(APPEND kept "${path}")
      continue()
    endif()
    get_filename_component(folder "${path}" DIRECTORY)
    file(RELATIVE_PATH folder "${PROJECT_SOURCE_DIR}" "${folder}")
    string(MAKE_C_IDENTIFIER "${folder}" key)
    if(NOT DEFINED count_${key})
      set(count_${key} 0)
    endif()
    math(EXPR chunk "${count_${key}} / ${REFORMER_UNITY_FILES}")
    math(EXPR count_${key} "${count_${key}} + 1")
    set(group "${key}_${chunk}")
    if(NOT group IN_LIST groups)
      list(APPEND groups "${group}")
      set(content_${group} "// Written by cmake/ReformerUnity.cmake: one combined translation unit.\n")
      string(APPEND content_${group} "// Each source defines its own REFORMER_INSTANTIATE for its instantiations.\n")
    endif()
    file(RELATIVE_PATH relative "${unit_dir}" "${path}")
    string(APPEND content_${group} "#include \"${relative}\"\n#undef REFORMER_INSTANTIATE\n")
  endforeach()
  set(units)
  foreach(group IN LISTS groups)
    # file(CONFIGURE) leaves an unchanged unit's time stamp alone, so a new
    # configure recompiles only the units whose list of files changed.
    file(CONFIGURE OUTPUT "${unit_dir}/${group}.cpp" CONTENT "${content_${group}}" @ONLY)
    list(APPEND units "${unit_dir}/${group}.cpp")
  endforeach()
  set_property(TARGET ${target} PROPERTY SOURCES ${kept} ${units})
endfunction()

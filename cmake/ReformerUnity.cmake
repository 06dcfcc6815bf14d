# Unity builds (REFORMER_UNITY_BUILD, off by default): each folder's sources are
# compiled as a few combined translation units of at most REFORMER_UNITY_FILES
# files. Every file includes Kokkos, and a device compiler spends 8-9 s on those
# headers alone (nvcc; a second or two for g++), so the test command's
# compile-only and sanitizer builds combine them; incremental work keeps one
# object per file. A file whose private names collide with a neighbour's is
# either renamed or listed with SKIP_UNITY_BUILD_INCLUSION where it is added.
option(REFORMER_UNITY_BUILD "Compile each folder's sources as a few combined translation units" OFF)
set(REFORMER_UNITY_FILES 4 CACHE STRING "Unity builds: at most this many files a combined translation unit")

# reformer_unity_groups(<target>): groups the target's sources by folder.
function(reformer_unity_groups target)
  if(NOT REFORMER_UNITY_BUILD)
    return()
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  get_target_property(sources ${target} SOURCES)
  list(SORT sources)
  foreach(source IN LISTS sources)
    get_filename_component(path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    get_source_file_property(skip "${path}" SKIP_UNITY_BUILD_INCLUSION)
    if(skip)
      continue()
    endif()
    get_filename_component(folder "${path}" DIRECTORY)
    file(RELATIVE_PATH folder "${PROJECT_SOURCE_DIR}" "${folder}")
    string(MAKE_C_IDENTIFIER "${target}_${folder}" key)
    if(NOT DEFINED count_${key})
      set(count_${key} 0)
    endif()
    math(EXPR chunk "${count_${key}} / ${REFORMER_UNITY_FILES}")
    math(EXPR count_${key} "${count_${key}} + 1")
    set_source_files_properties("${path}" PROPERTIES UNITY_GROUP "${key}_${chunk}")
  endforeach()
endfunction()

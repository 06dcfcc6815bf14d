# Registers each GoogleTest case of one binary with ctest, when ctest starts.
# Included by the file reformer_discover_tests (tests/CMakeLists.txt) writes for
# the binary, which sets:
#   REFORMER_GTEST_BINARY     the test binary
#   REFORMER_GTEST_EMULATOR   the cross build's emulator (empty on the host)
#   REFORMER_GTEST_THREADS    thread counts: each case is registered at each one,
#                             named Suite.Case.threadsN when there are several
#   REFORMER_GTEST_PROCESSORS_PER_THREAD  1 with OpenMP (a case at N threads asks
#                             ctest for N processors), 0 otherwise (one)
#   REFORMER_GTEST_TIMEOUT, REFORMER_GTEST_LIST_TIMEOUT  seconds
#   REFORMER_GTEST_PROPERTIES more test properties, as a list
#   REFORMER_GTEST_WORKING_DIRECTORY
# Each case runs alone (--gtest_filter) and is skipped only by exit code 77
# (SKIP_RETURN_CODE; no output pattern, which would win over a failing exit).
# A binary that is missing or whose listing fails is registered as one test that
# fails, named after the binary.
get_filename_component(reformer_gtest_name "${REFORMER_GTEST_BINARY}" NAME)
if(NOT EXISTS "${REFORMER_GTEST_BINARY}")
  add_test("${reformer_gtest_name}.not_built" "${REFORMER_GTEST_BINARY}")
  return()
endif()
execute_process(
  COMMAND ${REFORMER_GTEST_EMULATOR} "${REFORMER_GTEST_BINARY}" --gtest_list_tests
  WORKING_DIRECTORY "${REFORMER_GTEST_WORKING_DIRECTORY}"
  TIMEOUT ${REFORMER_GTEST_LIST_TIMEOUT}
  OUTPUT_VARIABLE reformer_gtest_listing
  ERROR_QUIET
  RESULT_VARIABLE reformer_gtest_result)
if(NOT reformer_gtest_result EQUAL 0)
  # Running the listing again as a test fails it by name, with its output.
  add_test("${reformer_gtest_name}.listing" ${REFORMER_GTEST_EMULATOR} "${REFORMER_GTEST_BINARY}"
           --gtest_list_tests)
  return()
endif()
# Parameter comments ("  # GetParam() = ...") are not part of a case's name.
string(REGEX REPLACE "  +#[^\n]*" "" reformer_gtest_listing "${reformer_gtest_listing}")
string(REPLACE ";" "\\;" reformer_gtest_listing "${reformer_gtest_listing}")
string(REPLACE "\n" ";" reformer_gtest_lines "${reformer_gtest_listing}")
list(LENGTH REFORMER_GTEST_THREADS reformer_gtest_configurations)
set(reformer_gtest_suite "")
foreach(reformer_gtest_line IN LISTS reformer_gtest_lines)
  if(reformer_gtest_line MATCHES "^ +([^ ]+)")
    set(reformer_gtest_case "${reformer_gtest_suite}${CMAKE_MATCH_1}")
    foreach(reformer_gtest_n IN LISTS REFORMER_GTEST_THREADS)
      set(reformer_gtest_test "${reformer_gtest_case}")
      if(reformer_gtest_configurations GREATER 1)
        string(APPEND reformer_gtest_test ".threads${reformer_gtest_n}")
      endif()
      set(reformer_gtest_processors 1)
      if(REFORMER_GTEST_PROCESSORS_PER_THREAD)
        set(reformer_gtest_processors ${reformer_gtest_n})
      endif()
      add_test("${reformer_gtest_test}" ${REFORMER_GTEST_EMULATOR} "${REFORMER_GTEST_BINARY}"
               "--gtest_filter=${reformer_gtest_case}" --gtest_also_run_disabled_tests)
      set_tests_properties("${reformer_gtest_test}" PROPERTIES
        ENVIRONMENT "OMP_NUM_THREADS=${reformer_gtest_n}"
        PROCESSORS ${reformer_gtest_processors}
        TIMEOUT ${REFORMER_GTEST_TIMEOUT}
        SKIP_RETURN_CODE 77
        WORKING_DIRECTORY "${REFORMER_GTEST_WORKING_DIRECTORY}"
        ${REFORMER_GTEST_PROPERTIES})
      if(reformer_gtest_case MATCHES "(^|[./])DISABLED_")
        set_tests_properties("${reformer_gtest_test}" PROPERTIES DISABLED TRUE)
      endif()
    endforeach()
  elseif(reformer_gtest_line MATCHES "^([^ ]+)")
    set(reformer_gtest_suite "${CMAKE_MATCH_1}")
  endif()
endforeach()

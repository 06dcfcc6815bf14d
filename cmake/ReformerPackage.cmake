# Installs the library, headers and CLI, and exports a CMake package so that
# `find_package(Reformer)` gives the target `Reformer::reformer`.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(REFORMER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Reformer)

install(TARGETS reformer reformer_kokkos reformer_hdf5 reformer_png EXPORT ReformerTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS reformer_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/reformer DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ReformerTargets NAMESPACE Reformer:: DESTINATION ${REFORMER_CMAKE_DIR})

if(REFORMER_HAVE_MPI)
  set(REFORMER_HAVE_MPI_VALUE TRUE)
else()
  set(REFORMER_HAVE_MPI_VALUE FALSE)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ReformerConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/ReformerConfig.cmake
                              INSTALL_DESTINATION ${REFORMER_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ReformerConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ReformerConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ReformerConfigVersion.cmake
        DESTINATION ${REFORMER_CMAKE_DIR})

# `cmake --install BUILD --prefix P`: the library (P/lib/libqkv.a), its public headers
# (P/include/qkv/...), the CLI (P/bin/qkv), the plotting script the CLI runs
# (P/share/qkv/python/qkv/), and a CMake package (P/lib/cmake/qkv) so another project writes
# find_package(qkv) and links qkv::qkv.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS qkv EXPORT qkvTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS qkv_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/qkv DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "cli" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/qkv DESTINATION ${CMAKE_INSTALL_DATADIR}/qkv/python
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
install(EXPORT qkvTargets NAMESPACE qkv:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/qkvConfig.cmake.in ${PROJECT_BINARY_DIR}/qkvConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qkv PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qkvConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qkvConfig.cmake ${PROJECT_BINARY_DIR}/qkvConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)

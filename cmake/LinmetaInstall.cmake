# `cmake --install` gives a CMake package: find_package(linmeta) -> linmeta::linmeta.
# A consumer needs the CUDA runtime (CUDAToolkit's cudart_static) at configure time, not nvcc.
include(CMakePackageConfigHelpers)
install(TARGETS linmeta EXPORT linmetaTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/linmeta DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/include/linmeta/version.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/linmeta)
install(EXPORT linmetaTargets NAMESPACE linmeta:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/linmeta)
configure_package_config_file(cmake/linmetaConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/linmetaConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/linmeta)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/linmetaConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/linmetaConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/linmetaConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/linmeta)

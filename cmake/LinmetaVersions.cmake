# The oldest tool versions linmeta is built and tested with (docs/building.md). CI runs on
# exactly these (Debian 12 + the CUDA 13.0 toolkit); anything older fails here, at configure
# time, instead of deep inside a compile.
set(LINMETA_MIN_GCC 12.2)
set(LINMETA_MIN_CLANG 14.0)
set(LINMETA_MIN_CUDA 13.0)

if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS LINMETA_MIN_GCC)
  message(FATAL_ERROR "linmeta needs GCC >= ${LINMETA_MIN_GCC}, found ${CMAKE_CXX_COMPILER_VERSION}")
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS LINMETA_MIN_CLANG)
  message(FATAL_ERROR "linmeta needs Clang >= ${LINMETA_MIN_CLANG}, found ${CMAKE_CXX_COMPILER_VERSION}")
endif()
if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA" AND CMAKE_CUDA_COMPILER_VERSION VERSION_LESS LINMETA_MIN_CUDA)
  message(FATAL_ERROR "linmeta needs the CUDA toolkit >= ${LINMETA_MIN_CUDA} (nvcc), found ${CMAKE_CUDA_COMPILER_VERSION}")
endif()

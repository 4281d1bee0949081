# Dependencies: the CUDA toolkit (static cudart; CUB comes with its CCCL), fmt
# (header-only, so binaries run where libfmt is absent), GoogleTest and
# nlohmann-json for the tests and tools only.
find_package(CUDAToolkit REQUIRED)
find_package(fmt REQUIRED)
if(LINMETA_BUILD_TESTS OR LINMETA_BUILD_TOOLS OR LINMETA_BUILD_FUZZ)
  find_package(nlohmann_json REQUIRED)
endif()
if(LINMETA_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

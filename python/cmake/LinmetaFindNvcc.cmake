# Included before project() (CMAKE_PROJECT_INCLUDE_BEFORE, set by pyproject.toml):
# `pip install .` runs CMake from an environment where nvcc is often not on PATH.
# Look in the usual places unless the user chose a CUDA compiler already.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  find_program(LINMETA_NVCC nvcc
    HINTS ENV CUDA_HOME ENV CUDA_PATH ENV CUDA_ROOT
    PATH_SUFFIXES bin
    PATHS /usr/local/cuda/bin /usr/local/cuda /opt/cuda/bin
    NO_CACHE)
  if(LINMETA_NVCC)
    set(CMAKE_CUDA_COMPILER "${LINMETA_NVCC}" CACHE FILEPATH "CUDA compiler")
  endif()
endif()

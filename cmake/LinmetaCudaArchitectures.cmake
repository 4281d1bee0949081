# Included by CMakeLists.txt before project() enables CUDA (else CMake's own default, the
# compiler's e.g. sm_75, wins). The one place that names linmeta's default architectures.
#
# Machine code for every GPU generation vLLM serves on — A100 / A30 (sm_80), A10 / A40 /
# RTX 30x0 (sm_86), L4 / L40S / RTX 40x0 (sm_89), H100 / H200 (sm_90), B200 / GB200 (sm_100;
# B300, sm_103, runs it too), RTX PRO 6000 / RTX 50x0 (sm_120; DGX Spark, sm_121, runs it too)
# — plus compute_80 PTX, which the driver JIT-compiles on any newer GPU that has no machine
# code here (docs/building.md). Override with -DCMAKE_CUDA_ARCHITECTURES=... or the CUDAARCHS
# environment variable (pip: LINMETA_CUDA_ARCHITECTURES or CUDAARCHS).
#
# LINMETA_CUDA_ARCHITECTURES_FROM_USER says whether the user chose the list (any list but this
# default, or CUDAARCHS); when not, the test cuda_fatbin requires every code of
# LINMETA_DEFAULT_CUDA_ARCHITECTURES in the built library. Evaluated before project() on every
# configure: a preset or -D that changes the list later is seen as the user's.
set(LINMETA_DEFAULT_CUDA_ARCHITECTURES
    80-real 86-real 89-real 90-real 100-real 120-real 80-virtual)
set(_linmeta_archs_help "CUDA architectures (linmeta's default: sm_80/86/89/90/100/120 + compute_80 PTX)")
# A build folder whose cached list is an earlier default of linmeta's (0.1.0's "90"; its help
# string says so), not the user's choice, moves to this default.
if(DEFINED CACHE{CMAKE_CUDA_ARCHITECTURES})
  get_property(_linmeta_help CACHE CMAKE_CUDA_ARCHITECTURES PROPERTY HELPSTRING)
  if(_linmeta_help MATCHES "^CUDA architectures \\(linmeta's default" AND
     NOT _linmeta_help STREQUAL _linmeta_archs_help)
    set(CMAKE_CUDA_ARCHITECTURES "${LINMETA_DEFAULT_CUDA_ARCHITECTURES}" CACHE STRING
        "${_linmeta_archs_help}" FORCE)
  endif()
endif()
if(DEFINED ENV{CUDAARCHS} OR (DEFINED CMAKE_CUDA_ARCHITECTURES AND
                              NOT CMAKE_CUDA_ARCHITECTURES STREQUAL "${LINMETA_DEFAULT_CUDA_ARCHITECTURES}"))
  set(LINMETA_CUDA_ARCHITECTURES_FROM_USER ON)
else()
  set(LINMETA_CUDA_ARCHITECTURES_FROM_USER OFF)
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES "${LINMETA_DEFAULT_CUDA_ARCHITECTURES}" CACHE STRING
      "${_linmeta_archs_help}")
endif()

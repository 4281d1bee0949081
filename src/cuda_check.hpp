// CUDA error checks that throw linmeta::Error naming the call.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "linmeta/error.hpp"

namespace linmeta::detail {

inline void cuda_check(cudaError_t err, const char* call) {
  if (err != cudaSuccess)
    throw Error(std::string("linmeta: ") + call + " failed: " + cudaGetErrorName(err) + " (" +
                cudaGetErrorString(err) + ")");
}

}  // namespace linmeta::detail

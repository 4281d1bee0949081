// The CUDA check of the tools, the bench and the Python bindings: the library's own
// (src/cuda_check.hpp), so every component reports a failed CUDA call the same way — as
// linmeta::Error "linmeta: CALL failed: NAME (description)".
#pragma once

#include "src/cuda_check.hpp"

namespace linmeta::tools {

using linmeta::detail::cuda_check;

}  // namespace linmeta::tools

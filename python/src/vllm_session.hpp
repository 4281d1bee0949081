// The vLLM adapter's fast path (python/linmeta/vllm.py): one call per scheduler step and
// group, inputs read in place, outputs as cached views of the builder's persistent buffers.
#pragma once

#include <nanobind/nanobind.h>

namespace linmeta::py {

/// Binds VllmSession and fill_conv_lists into the extension module.
void bind_vllm_session(nanobind::module_& m);

}  // namespace linmeta::py

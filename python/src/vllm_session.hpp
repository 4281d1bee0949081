// The vLLM adapter's fast path (python/linmeta/vllm.py): one call per scheduler step and
// group, inputs read in place, outputs as cached views of the builder's persistent buffers.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>

namespace linmeta::py {

/// Binds VllmSession and fill_conv_lists into the extension module.
void bind_vllm_session(nanobind::module_& m);

/// VllmSession.call (see there) for C++ callers; `session` must be a VllmSession.
nanobind::object session_call(nanobind::handle session, nanobind::handle m, nanobind::handle table,
                              nanobind::handle accepted, nanobind::handle drafts, bool capture,
                              int32_t group, nanobind::handle stream, bool prefetch_tables);

/// obj.name (interned name); raises the Python error.
nanobind::object get_attr(nanobind::handle obj, const nanobind::str& name);

/// Binds vllm_build and VllmBuildState (python/src/vllm_build_call.cpp).
void bind_vllm_build_call(nanobind::module_& m);

}  // namespace linmeta::py

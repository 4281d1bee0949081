// linmeta._linmeta.vllm.Engine: the native half of linmeta.vllm (python/linmeta/vllm/).
//
// One Engine per linmeta.vllm builder object, over that object's own MetadataBuilder (one
// KV-cache group): nothing is shared between builder objects. Its build() reads the
// CommonAttentionMetadata attributes afresh, plans and launches the step, and returns a new
// instance of vLLM's metadata dataclass (its fields by vLLM's names, linmeta/outputs.hpp, as
// the instance __dict__) whose arrays are new view objects over the builder's buffers. A call
// entered while another call of the same builder runs (re-entry from an input's Python code,
// a second thread) is refused (CallGuard). update_block_table() re-gathers from another
// table, or builds the step another engine of the same configuration read when handed that
// engine's metadata (vLLM's runner hands one group's metadata to the other groups' builders).
// No cache is kept across calls but views keyed on the memory they show.
#pragma once

#include <nanobind/nanobind.h>

namespace linmeta::py {

/// Binds linmeta._linmeta.vllm (the Engine class) into `m`.
void bind_vllm(nanobind::module_& m);

}  // namespace linmeta::py

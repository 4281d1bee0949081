// linmeta._linmeta.vllm.Engine: the native half of linmeta.vllm (python/linmeta/vllm/).
//
// One Engine serves the builder objects an inference engine makes for the KV-cache groups of
// one configuration: group g's build() is one call of Engine.build(g, ...), its
// update_block_table() one call of Engine.update_block_table(g, ...). The first call of a
// scheduler step plans it and finishes every group in one launch (MetadataBuilder::
// build_groups); a later group's call of the same step (the very objects of that call, as
// vLLM's runner hands them to every group) is served from that plan, re-gathering only its
// own state indices when its block table is not where the launch read it. Each call returns
// a new instance of vLLM's metadata dataclass (its fields by vLLM's names, linmeta/outputs.hpp,
// as the instance __dict__), which the Python builder hands back.
#pragma once

#include <nanobind/nanobind.h>

namespace linmeta::py {

/// Binds linmeta._linmeta.vllm (the Engine class) into `m`.
void bind_vllm(nanobind::module_& m);

}  // namespace linmeta::py

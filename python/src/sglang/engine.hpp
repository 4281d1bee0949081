// linmeta._linmeta.sglang.Engine: the native half of linmeta.sglang (python/linmeta/sglang/).
//
// One Engine per SGLang backend object, over that object's own MetadataBuilder of an SGLang
// kind (linmeta/sglang.hpp). Its build() reads the ForwardBatch attributes afresh, makes the
// SglangStep, plans and launches it, and returns the fields of SGLang's metadata object as a
// dict (SGLang's names; composites as dicts): arrays in the builder's buffers as new view
// objects, arrays that are the step's own tensors or the backend's graph buffers as those
// very objects (a slice of the batch where the kind filled part of a caller's buffer:
// ShortConv's _cache_indices_buf[:bs]). A call entered while another call of the same builder runs
// is refused (CallGuard). No cache is kept across calls but views keyed on the memory they show.
#pragma once

#include <nanobind/nanobind.h>

namespace linmeta::py {

/// Binds linmeta._linmeta.sglang (the Engine class) into `m`.
void bind_sglang(nanobind::module_& m);

}  // namespace linmeta::py

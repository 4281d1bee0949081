#include "metadata.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "linmeta/outputs.hpp"

namespace linmeta::py {

nb::dlpack::dtype dlpack_dtype(DType t) {
  if (t == DType::Bool) return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bool), 8, 1};
  return {static_cast<uint8_t>(nb::dlpack::dtype_code::Int),
          static_cast<uint8_t>(8 * dtype_size(t)), 1};
}

namespace {

nb::object optional_int(const std::optional<int32_t>& v) {
  return v ? nb::object(nb::int_(*v)) : nb::none();
}

}  // namespace

// clang-format off
const std::array<ScalarField, 10> kScalarFields{{
  {"num_prefills", [](const Metadata& m) -> nb::object { return nb::int_(m.num_prefills); }},
  {"num_prefill_tokens", [](const Metadata& m) -> nb::object { return nb::int_(m.num_prefill_tokens); }},
  {"num_decodes", [](const Metadata& m) -> nb::object { return nb::int_(m.num_decodes); }},
  {"num_decode_tokens", [](const Metadata& m) -> nb::object { return nb::int_(m.num_decode_tokens); }},
  {"num_spec_decodes", [](const Metadata& m) -> nb::object { return nb::int_(m.num_spec_decodes); }},
  {"num_spec_decode_tokens", [](const Metadata& m) -> nb::object { return nb::int_(m.num_spec_decode_tokens); }},
  {"num_actual_tokens", [](const Metadata& m) -> nb::object { return nb::int_(m.num_actual_tokens); }},
  {"uniform_spec_sequence_length", [](const Metadata& m) { return optional_int(m.uniform_spec_sequence_length); }},
  // vllm-0.34 KDA: the first spec / non-spec token when those tokens are contiguous.
  {"spec_token_start", [](const Metadata& m) { return optional_int(m.spec_token_start); }},
  {"non_spec_token_start", [](const Metadata& m) { return optional_int(m.non_spec_token_start); }},
}};
// clang-format on

namespace {

constexpr int32_t kConvBlockKey = kConvBlock;  // nums_dict key, as vLLM's BLOCK_M

}  // namespace

nb::object PyMetadata::view(const Array& a, bool host_memory, int64_t rows) {
  if (!a.present) return nb::none();
  const bool device = !host_memory && m_.target == Target::Cuda;
  return export_array(a.data, a.ndim, rows >= 0 ? rows : a.rows, a.cols, dlpack_dtype(a.dtype),
                      device ? kDLCUDA : kDLCPU, device ? device_id_ : 0, builder_, array_type_);
}

nb::object PyMetadata::get(Out f) {
  nb::object& slot = cache_[static_cast<size_t>(f)];
  if (!slot.is_valid()) {
    const Array* a = output_spec(f).field(m_);
    slot = a == nullptr ? nb::none() : view(*a);
  }
  return slot;
}

nb::object PyMetadata::get(Composite f) {
  nb::object& slot = cache_[kNumOutputs + static_cast<size_t>(f)];
  if (!slot.is_valid()) slot = compute(f);
  return slot;
}

nb::object PyMetadata::compute(Composite f) {
  switch (f) {
    case Composite::NumsDict: {
      if (!m_.conv1d) return nb::none();
      // vLLM's compute_causal_conv1d_metadata: {BLOCK_M: {nums, tot, mlist, mlist_len,
      // offsetlist}}.
      const Conv1dMetadata& cv = *m_.conv1d;
      nb::dict inner;
      inner["nums"] = view(cv.nums, /*host_memory=*/true);
      inner["tot"] = nb::int_(cv.tot);
      inner["mlist"] = view(cv.batch_ptr, false, cv.tot);
      inner["mlist_len"] = nb::int_(cv.tot);
      inner["offsetlist"] = view(cv.token_chunk_offset_ptr, false, cv.tot);
      nb::dict outer;
      outer[nb::int_(kConvBlockKey)] = inner;
      return outer;
    }
    case Composite::RecoverSsmCommit: {
      if (!m_.recoverssm_commit) return nb::none();
      const RecoverSsmCommit& rc = *m_.recoverssm_commit;
      PyRecoverSsmCommit out;
      out.state_indices = get(Out::SpecStateIndices);
      out.query_start_loc = get(Out::SpecQueryStartLoc);
      out.request_indices = get(Out::RecoverSsmRequestIndices);
      out.align = nb::none();
      if (rc.align) {
        PyRecoverSsmAlign al;
        al.block_table = table_;
        al.num_computed_tokens = get(Out::RecoverSsmNumComputed);
        al.block_size = rc.align->block_size;
        out.align = nb::cast(std::move(al));
      }
      return nb::cast(std::move(out));
    }
    case Composite::Checkpoint: {
      if (!m_.checkpoint) return nb::none();
      PyCheckpoint cp;
      cp.checkpoint_offsets = get(Out::CheckpointOffsets);
      cp.state_indices = get(Out::CheckpointStateIndices);
      return nb::cast(std::move(cp));
    }
    case Composite::FlashInferCheckpointPlan: {
      if (!m_.flashinfer_checkpoint_plan) return nb::none();
      PyFlashInferCheckpointPlan plan;
      plan.every_n_tokens = m_.flashinfer_checkpoint_plan->every_n_tokens;
      plan.num_checkpoints = m_.flashinfer_checkpoint_plan->num_checkpoints;
      plan.cu_starts = get(Out::FlashInferCheckpointCuStarts);
      plan.rows = get(Out::FlashInferCheckpointRows);
      return nb::cast(std::move(plan));
    }
    case Composite::Count:
      break;
  }
  return nb::none();
}

void PyMetadata::bind(nb::module_& m) {
  nb::class_<PyRecoverSsmAlign>(
      m, "RecoverSsmAlign",
      "RecoverSSM commit metadata of align mode: the raw block table, the "
      "computed tokens per row and the block size.")
      .def_ro("block_table", &PyRecoverSsmAlign::block_table,
              "The step's raw block table (the caller's array).")
      .def_ro("num_computed_tokens", &PyRecoverSsmAlign::num_computed_tokens)
      .def_ro("block_size", &PyRecoverSsmAlign::block_size)
      .def("__repr__", [](const PyRecoverSsmAlign& a) {
        return "RecoverSsmAlign(block_size=" + std::to_string(a.block_size) + ")";
      });
  nb::class_<PyRecoverSsmCommit>(m, "RecoverSsmCommit", "KDA RecoverSSM commit metadata.")
      .def_ro("state_indices", &PyRecoverSsmCommit::state_indices)
      .def_ro("query_start_loc", &PyRecoverSsmCommit::query_start_loc)
      .def_ro("request_indices", &PyRecoverSsmCommit::request_indices)
      .def_ro("align", &PyRecoverSsmCommit::align)
      .def("__repr__", [](const PyRecoverSsmCommit& c) {
        return std::string("RecoverSsmCommit(request_indices=") +
               (c.request_indices.is_none() ? "None" : "...") +
               ", align=" + (c.align.is_none() ? "None" : "...") + ")";
      });
  nb::class_<PyCheckpoint>(m, "Checkpoint", "KDA prefill checkpoints (align mode).")
      .def_ro("checkpoint_offsets", &PyCheckpoint::checkpoint_offsets)
      .def_ro("state_indices", &PyCheckpoint::state_indices)
      .def("__repr__", [](const PyCheckpoint&) { return std::string("Checkpoint(...)"); });

  nb::class_<PyFlashInferCheckpointPlan>(
      m, "FlashInferCheckpointPlan",
      "vllm-0.34 GDN + FlashInfer prefill: where the prefill kernel emits checkpoints.")
      .def_ro("every_n_tokens", &PyFlashInferCheckpointPlan::every_n_tokens)
      .def_ro("num_checkpoints", &PyFlashInferCheckpointPlan::num_checkpoints)
      .def_ro("cu_starts", &PyFlashInferCheckpointPlan::cu_starts, "int64 [prefills + 1]")
      .def_ro("rows", &PyFlashInferCheckpointPlan::rows, "int64 [checkpoint rows]")
      .def("__repr__", [](const PyFlashInferCheckpointPlan& p) {
        return "FlashInferCheckpointPlan(every_n_tokens=" + std::to_string(p.every_n_tokens) +
               ", num_checkpoints=" + std::to_string(p.num_checkpoints) + ")";
      });

  auto cls = nb::class_<PyMetadata>(
      m, "Metadata",
      "GDN / KDA attention metadata of one step and KV-cache group. Array fields are views of the "
      "builder's persistent buffers (DLPack-exportable; torch.from_dlpack / numpy.from_dlpack "
      "alias "
      "them) and keep the builder alive; their contents are valid until the builder's next build. "
      "Absent fields are None.");
  for (const ScalarField& f : kScalarFields) {
    auto get = f.get;
    cls.def_prop_ro(f.name, [get](const PyMetadata& s) { return get(s.metadata()); });
  }

  // One property per top-level row of the output table (nested rows live in the
  // composites below), with its element type in the docstring.
  nb::list fields;
  for (const OutputSpec& spec : kOutputs) {
    if (!spec.is_output() || std::strchr(spec.name, '.') != nullptr) continue;
    const Out id = spec.id;
    const std::string doc = std::string(dtype_name(spec.dtype)) + " array or None (" +
                            (spec.scope == Scope::Group ? "per KV-cache group" : "batch-level") +
                            ")";
    cls.def_prop_ro(
        spec.name, [id](PyMetadata& s) { return s.get(id); }, doc.c_str());
    fields.append(nb::make_tuple(spec.name, dtype_name(spec.dtype),
                                 spec.scope == Scope::Group ? "group" : "batch"));
  }
  m.attr("OUTPUT_FIELDS") = nb::tuple(fields);
  cls.def_prop_ro(
         "nums_dict", [](PyMetadata& s) { return s.get(Composite::NumsDict); },
         "causal-conv1d metadata as vLLM's compute_causal_conv1d_metadata: {8: {'nums', 'tot', "
         "'mlist' (= batch_ptr[:tot]), 'mlist_len' (= tot), 'offsetlist' (= "
         "token_chunk_offset_ptr[:tot])}}; 'nums' is in host memory")
      .def_prop_ro(
          "recoverssm_commit", [](PyMetadata& s) { return s.get(Composite::RecoverSsmCommit); },
          "KDA RecoverSSM commit metadata (RecoverSsmCommit) or None")
      .def_prop_ro(
          "checkpoint", [](PyMetadata& s) { return s.get(Composite::Checkpoint); },
          "Prefill checkpoints (Checkpoint) or None: KDA; GDN in the vllm-0.34 profile")
      .def_prop_ro(
          "flashinfer_checkpoint_plan",
          [](PyMetadata& s) { return s.get(Composite::FlashInferCheckpointPlan); },
          "vllm-0.34 GDN + FlashInfer: FlashInferCheckpointPlan or None");
  cls.def_prop_ro("group", &PyMetadata::group, "The KV-cache group this metadata was built for.")
      .def_prop_ro("num_reqs", &PyMetadata::num_reqs, "Rows of the step (padding rows included).")
      .def_prop_ro(
          "builder", [](const PyMetadata& s) { return s.builder(); },
          "The builder that owns the buffers.")
      .def("__repr__", [](const PyMetadata& s) {
        const Metadata& md = s.metadata();
        return "Metadata(num_prefills=" + std::to_string(md.num_prefills) +
               ", num_prefill_tokens=" + std::to_string(md.num_prefill_tokens) +
               ", num_decodes=" + std::to_string(md.num_decodes) +
               ", num_decode_tokens=" + std::to_string(md.num_decode_tokens) +
               ", num_spec_decodes=" + std::to_string(md.num_spec_decodes) +
               ", num_spec_decode_tokens=" + std::to_string(md.num_spec_decode_tokens) +
               ", num_actual_tokens=" + std::to_string(md.num_actual_tokens) +
               ", group=" + std::to_string(s.group()) + ")";
      });
}

}  // namespace linmeta::py

#include "metadata.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <string>
#include <type_traits>

namespace linmeta::py {

namespace {

template <class T>
nb::dlpack::dtype dtype_of() {
  if constexpr (std::is_same_v<T, bool>)
    return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bool), 8, 1};
  else
    return {static_cast<uint8_t>(nb::dlpack::dtype_code::Int), 32, 1};
}

constexpr int32_t kConvBlockKey = kConvBlock;  // nums_dict key, as vLLM's BLOCK_M

}  // namespace

template <class T>
nb::object PyMetadata::view(const Array<T>& a, bool host_memory, int64_t rows) {
  if (!a.present) return nb::none();
  const bool device = !host_memory && m_.target == Target::Cuda;
  return export_array(a.data, a.ndim, rows >= 0 ? rows : a.rows, a.cols, dtype_of<T>(),
                      device ? kDLCUDA : kDLCPU, device ? device_id_ : 0, builder_, array_type_);
}

nb::object PyMetadata::get(Field f) {
  nb::object& slot = cache_[static_cast<size_t>(f)];
  if (!slot.is_valid()) slot = compute(f);
  return slot;
}

nb::object PyMetadata::compute(Field f) {
  switch (f) {
    case Field::HasInitialState:
      return view(m_.has_initial_state);
    case Field::ChunkIndices:
      return view(m_.chunk_indices);
    case Field::ChunkOffsets:
      return view(m_.chunk_offsets);
    case Field::PrefillQueryStartLoc:
      return view(m_.prefill_query_start_loc);
    case Field::PrefillStateIndices:
      return view(m_.prefill_state_indices);
    case Field::PrefillHasInitialState:
      return view(m_.prefill_has_initial_state);
    case Field::SpecQueryStartLoc:
      return view(m_.spec_query_start_loc);
    case Field::NonSpecQueryStartLoc:
      return view(m_.non_spec_query_start_loc);
    case Field::SpecStateIndices:
      return view(m_.spec_state_indices_tensor);
    case Field::NonSpecStateIndices:
      return view(m_.non_spec_state_indices_tensor);
    case Field::SpecSequenceMasks:
      return view(m_.spec_sequence_masks);
    case Field::SpecTokenIndx:
      return view(m_.spec_token_indx);
    case Field::NonSpecTokenIndx:
      return view(m_.non_spec_token_indx);
    case Field::NumAcceptedTokens:
      return view(m_.num_accepted_tokens);
    case Field::BatchPtr:
      return m_.conv1d ? view(m_.conv1d->batch_ptr) : nb::none();
    case Field::TokenChunkOffsetPtr:
      return m_.conv1d ? view(m_.conv1d->token_chunk_offset_ptr) : nb::none();
    case Field::NumsDict: {
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
    case Field::RecoverSsmCommit: {
      if (!m_.recoverssm_commit) return nb::none();
      const RecoverSsmCommit& rc = *m_.recoverssm_commit;
      PyRecoverSsmCommit out;
      out.state_indices = view(rc.state_indices);
      out.query_start_loc = view(rc.query_start_loc);
      out.request_indices = view(rc.request_indices);
      out.align = nb::none();
      if (rc.align) {
        PyRecoverSsmAlign al;
        al.block_table = table_;
        al.num_computed_tokens = view(rc.align->num_computed_tokens);
        al.block_size = rc.align->block_size;
        out.align = nb::cast(std::move(al));
      }
      return nb::cast(std::move(out));
    }
    case Field::Checkpoint: {
      if (!m_.checkpoint) return nb::none();
      PyCheckpoint cp;
      cp.checkpoint_offsets = view(m_.checkpoint->checkpoint_offsets);
      cp.state_indices = view(m_.checkpoint->state_indices);
      return nb::cast(std::move(cp));
    }
    case Field::Count:
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

  auto cls = nb::class_<PyMetadata>(
      m, "Metadata",
      "GDN / KDA attention metadata of one step and KV-cache group. Array fields are views of the "
      "builder's persistent buffers (DLPack-exportable; torch.from_dlpack / numpy.from_dlpack "
      "alias "
      "them) and keep the builder alive; their contents are valid until the builder's next build. "
      "Absent fields are None.");
  cls.def_prop_ro("num_prefills", [](const PyMetadata& s) { return s.metadata().num_prefills; })
      .def_prop_ro("num_prefill_tokens",
                   [](const PyMetadata& s) { return s.metadata().num_prefill_tokens; })
      .def_prop_ro("num_decodes", [](const PyMetadata& s) { return s.metadata().num_decodes; })
      .def_prop_ro("num_decode_tokens",
                   [](const PyMetadata& s) { return s.metadata().num_decode_tokens; })
      .def_prop_ro("num_spec_decodes",
                   [](const PyMetadata& s) { return s.metadata().num_spec_decodes; })
      .def_prop_ro("num_spec_decode_tokens",
                   [](const PyMetadata& s) { return s.metadata().num_spec_decode_tokens; })
      .def_prop_ro("num_actual_tokens",
                   [](const PyMetadata& s) { return s.metadata().num_actual_tokens; })
      .def_prop_ro("uniform_spec_sequence_length",
                   [](const PyMetadata& s) { return s.metadata().uniform_spec_sequence_length; });

  struct Named {
    const char* name;
    Field field;
    const char* doc;
  };
  static const Named fields[] = {
      {"has_initial_state", Field::HasInitialState, "bool [non-spec rows]"},
      {"chunk_indices", Field::ChunkIndices, "int32 [chunks, 2] (GDN, FLA chunk metadata)"},
      {"chunk_offsets", Field::ChunkOffsets, "int32 [prefills + 1] (GDN, FLA chunk metadata)"},
      {"prefill_query_start_loc", Field::PrefillQueryStartLoc, "int32 [prefills + 1] (GDN)"},
      {"prefill_state_indices", Field::PrefillStateIndices, "int32 [prefills] (GDN)"},
      {"prefill_has_initial_state", Field::PrefillHasInitialState, "bool [prefills] (GDN)"},
      {"spec_query_start_loc", Field::SpecQueryStartLoc, "int32 [spec rows + 1]"},
      {"non_spec_query_start_loc", Field::NonSpecQueryStartLoc, "int32 [non-spec rows + 1]"},
      {"spec_state_indices_tensor", Field::SpecStateIndices, "int32 [spec rows, S]"},
      {"non_spec_state_indices_tensor", Field::NonSpecStateIndices, "int32 [non-spec rows]"},
      {"spec_sequence_masks", Field::SpecSequenceMasks, "bool [rows]"},
      {"spec_token_indx", Field::SpecTokenIndx, "int32 [spec tokens]"},
      {"non_spec_token_indx", Field::NonSpecTokenIndx, "int32 [non-spec tokens]"},
      {"num_accepted_tokens", Field::NumAcceptedTokens, "int32 [spec rows]"},
      {"nums_dict", Field::NumsDict,
       "causal-conv1d metadata as vLLM's compute_causal_conv1d_metadata: {8: {'nums', 'tot', "
       "'mlist' (= batch_ptr[:tot]), 'mlist_len' (= tot), 'offsetlist' (= "
       "token_chunk_offset_ptr[:tot])}}; "
       "'nums' is in host memory"},
      {"batch_ptr", Field::BatchPtr, "int32 [capacity], PAD_SLOT_ID (-1) past tot"},
      {"token_chunk_offset_ptr", Field::TokenChunkOffsetPtr,
       "int32 [capacity], PAD_SLOT_ID (-1) past tot"},
      {"recoverssm_commit", Field::RecoverSsmCommit,
       "KDA RecoverSSM commit metadata (RecoverSsmCommit) or None"},
      {"checkpoint", Field::Checkpoint, "KDA prefill checkpoints (Checkpoint) or None"},
  };
  for (const Named& n : fields) {
    const Field f = n.field;
    cls.def_prop_ro(
        n.name, [f](PyMetadata& s) { return s.get(f); }, n.doc);
  }
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

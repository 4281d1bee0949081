// Every array view of a Metadata, for the fuzz oracle. Once Metadata's arrays are
// type-erased, linmeta::for_each_array replaces this list.
#pragma once

#include <cstdint>

#include "linmeta/metadata.hpp"

namespace linmeta::fuzz {

/// Calls f(field, data, bytes) for every present, non-empty array of `m`
/// (host target: the data is host memory).
template <class F>
void for_each_view(const Metadata& m, F&& f) {
  auto one = [&](const char* field, const auto& a) {
    if (a.present && a.size() > 0)
      f(field, static_cast<const void*>(a.data), a.size() * static_cast<int64_t>(sizeof(*a.data)));
  };
  one("has_initial_state", m.has_initial_state);
  one("chunk_indices", m.chunk_indices);
  one("chunk_offsets", m.chunk_offsets);
  one("prefill_query_start_loc", m.prefill_query_start_loc);
  one("prefill_state_indices", m.prefill_state_indices);
  one("prefill_has_initial_state", m.prefill_has_initial_state);
  one("spec_query_start_loc", m.spec_query_start_loc);
  one("non_spec_query_start_loc", m.non_spec_query_start_loc);
  one("spec_state_indices_tensor", m.spec_state_indices_tensor);
  one("non_spec_state_indices_tensor", m.non_spec_state_indices_tensor);
  one("spec_sequence_masks", m.spec_sequence_masks);
  one("spec_token_indx", m.spec_token_indx);
  one("non_spec_token_indx", m.non_spec_token_indx);
  one("num_accepted_tokens", m.num_accepted_tokens);
  if (m.conv1d) {
    one("conv1d.nums", m.conv1d->nums);
    one("conv1d.batch_ptr", m.conv1d->batch_ptr);
    one("conv1d.token_chunk_offset_ptr", m.conv1d->token_chunk_offset_ptr);
  }
  if (m.recoverssm_commit) {
    one("recoverssm_commit.state_indices", m.recoverssm_commit->state_indices);
    one("recoverssm_commit.query_start_loc", m.recoverssm_commit->query_start_loc);
    one("recoverssm_commit.request_indices", m.recoverssm_commit->request_indices);
    if (m.recoverssm_commit->align)
      one("recoverssm_commit.align.num_computed_tokens",
          m.recoverssm_commit->align->num_computed_tokens);
  }
  if (m.checkpoint) {
    one("checkpoint.checkpoint_offsets", m.checkpoint->checkpoint_offsets);
    one("checkpoint.state_indices", m.checkpoint->state_indices);
  }
}

/// Whether two metadata have the same counts and the same views (address and shape).
inline bool same_descriptors(const Metadata& a, const Metadata& b) {
  const StepCounts& x = a;
  const StepCounts& y = b;
  if (x.num_prefills != y.num_prefills || x.num_prefill_tokens != y.num_prefill_tokens ||
      x.num_decodes != y.num_decodes || x.num_decode_tokens != y.num_decode_tokens ||
      x.num_spec_decodes != y.num_spec_decodes ||
      x.num_spec_decode_tokens != y.num_spec_decode_tokens ||
      x.num_actual_tokens != y.num_actual_tokens ||
      a.uniform_spec_sequence_length != b.uniform_spec_sequence_length ||
      a.conv1d.has_value() != b.conv1d.has_value() || (a.conv1d && a.conv1d->tot != b.conv1d->tot))
    return false;
  struct View {
    const void* data;
    int64_t bytes;
  };
  View va[32], vb[32];
  int na = 0, nb = 0;
  for_each_view(a, [&](const char*, const void* d, int64_t n) {
    if (na < 32) va[na++] = {d, n};
  });
  for_each_view(b, [&](const char*, const void* d, int64_t n) {
    if (nb < 32) vb[nb++] = {d, n};
  });
  if (na != nb) return false;
  for (int i = 0; i < na; ++i)
    if (va[i].data != vb[i].data || va[i].bytes != vb[i].bytes) return false;
  return true;
}

}  // namespace linmeta::fuzz

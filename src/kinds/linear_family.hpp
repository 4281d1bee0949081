// The rules vLLM 0.34's linear-attention builders share (linear_attn.py, docs/semantics.md
// L1): the rows of linear.cpp and bailing_linear.cpp point here.
#pragma once

#include <cstdint>

#include "kind_rules.hpp"

namespace linmeta::detail {

/// L1: split_decodes_and_prefills with short extends as decodes (is_prefilling is not read)
/// at `decode_threshold` tokens.
void plan_linear_split(Ctx& x, int32_t decode_threshold);
/// L1 / L2: state_indices_tensor, column 0 of every row; staged FULL-graph steps pad the rows
/// whose device seq_len is 0 with PAD_SLOT_ID.
void pack_linear_state(Packer& k);
/// L1: seq_lens and query_start_loc, the step's own arrays.
void pack_linear_fields(Packer& k);

/// A row of the family (the device query_start_loc, state_indices_tensor and the step's own
/// arrays); a kind's row sets what differs.
constexpr KindRules linear_family_row(BuilderKind kind) {
  KindRules r{.kind = kind,
              .device_query_start_loc = true,
              .pack_gathers = pack_linear_state,
              .pack_fields = pack_linear_fields};
  return r;
}

}  // namespace linmeta::detail

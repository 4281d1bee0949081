// The metadata a build produces (SPEC §9): counts plus views of builder-owned arrays.
#pragma once

#include <cstdint>
#include <optional>

#include "linmeta/config.hpp"
#include "linmeta/step.hpp"

namespace linmeta {

/// A view of a 1-D or 2-D array. `present == false` is the reference's None;
/// a present array may be empty. Memory is the builder's target memory unless
/// the field's comment says host.
template <class T>
struct Array {
  const T* data = nullptr;
  int64_t rows = 0;  ///< first dimension
  int32_t cols = 1;  ///< second dimension (1 for 1-D arrays)
  int32_t ndim = 1;  ///< 1 or 2
  bool present = false;

  [[nodiscard]] int64_t size() const { return rows * cols; }
  explicit operator bool() const { return present; }
};

struct Conv1dMetadata {
  int32_t tot = 0;                        ///< number of programs
  Array<int32_t> nums;                    ///< host memory: programs per sequence
  Array<int32_t> batch_ptr;               ///< [capacity], PAD_SLOT_ID past tot
  Array<int32_t> token_chunk_offset_ptr;  ///< [capacity], PAD_SLOT_ID past tot
};

struct RecoverSsmAlign {
  BlockTable block_table;              ///< the step's raw block table (caller memory)
  Array<int32_t> num_computed_tokens;  ///< [num_reqs]
  int32_t block_size = 0;
};

struct RecoverSsmCommit {
  Array<int32_t> state_indices;          ///< = spec_state_indices_tensor
  Array<int32_t> query_start_loc;        ///< = spec_query_start_loc
  Array<int32_t> request_indices;        ///< mixed path only
  std::optional<RecoverSsmAlign> align;  ///< align mode only
};

struct Checkpoint {
  Array<int32_t> checkpoint_offsets;
  Array<int32_t> state_indices;
};

/// The counts of a step (SPEC §9).
struct StepCounts {
  int32_t num_prefills = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_decodes = 0;
  int32_t num_decode_tokens = 0;
  int32_t num_spec_decodes = 0;
  int32_t num_spec_decode_tokens = 0;
  int32_t num_actual_tokens = 0;  ///< padded token count of the step
};

/// GDN and KDA metadata; KDA-only fields stay absent for GDN and vice versa.
struct Metadata : StepCounts {
  Array<bool> has_initial_state;
  Array<int32_t> chunk_indices;  ///< [n, 2]
  Array<int32_t> chunk_offsets;
  Array<int32_t> prefill_query_start_loc;
  Array<int32_t> prefill_state_indices;
  Array<bool> prefill_has_initial_state;
  Array<int32_t> spec_query_start_loc;
  Array<int32_t> non_spec_query_start_loc;
  Array<int32_t> spec_state_indices_tensor;  ///< [rows, S]
  Array<int32_t> non_spec_state_indices_tensor;
  Array<bool> spec_sequence_masks;
  Array<int32_t> spec_token_indx;
  Array<int32_t> non_spec_token_indx;
  Array<int32_t> num_accepted_tokens;
  std::optional<int32_t> uniform_spec_sequence_length;
  std::optional<Conv1dMetadata> conv1d;

  // KDA only.
  std::optional<RecoverSsmCommit> recoverssm_commit;
  std::optional<Checkpoint> checkpoint;

  /// Memory the array views point to.
  Target target = Target::Host;
};

using GdnMetadata = Metadata;
using KdaMetadata = Metadata;

}  // namespace linmeta

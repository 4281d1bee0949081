// The bench workloads: named, deterministic scheduler steps and the builder
// configuration each one runs under.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "linmeta/linmeta.hpp"

namespace linmeta::bench {

/// Row mix of one step, in the order vLLM lays rows out: spec decodes, decodes,
/// prefills, then zero-length padding rows.
struct StepShape {
  int32_t spec_rows = 0;     ///< query length num_spec + 1, drafts = num_spec
  int32_t decode_rows = 0;   ///< query length 1
  int32_t prefill_rows = 0;  ///< query length prefill_len (chunked prefills)
  int32_t prefill_len = 0;
  int32_t pad_rows = 0;  ///< query length 0

  [[nodiscard]] int32_t rows() const { return spec_rows + decode_rows + prefill_rows + pad_rows; }
};

struct Workload {
  std::string name;  ///< kind/shape/B<rows>/<cache mode>/G<groups>/<fullgraph|nograph>
  BuilderKind kind = BuilderKind::Gdn;
  Config config;
  int32_t groups = 1;
  StepShape shape;
  /// Host time of the reference Python builder (vLLM) for this step on an H200, 0 = none.
  double vllm_py_us = 0;
  bool headline = false;
};

/// Every workload, in table order (about 35).
std::vector<Workload> all_workloads();

/// Host copies of every array of a step plus one block table per group.
struct StepData {
  int32_t num_reqs = 0;
  int32_t num_actual_tokens = 0;
  std::vector<int32_t> qsl, seq_lens, seq_ub, drafts, accepted;
  std::unique_ptr<bool[]> is_prefilling;
  bool has_drafts = false;
  bool has_accepted = false;
  int32_t width = 0;
  std::vector<std::vector<int32_t>> tables;  ///< [groups][num_reqs * width]

  /// The step over the given "device" arrays (host arrays on the host target).
  [[nodiscard]] Step step(const int32_t* dev_qsl, const int32_t* dev_seq_lens,
                          const int32_t* dev_accepted, const int32_t* dev_table0) const;
};

/// The deterministic step of a workload.
StepData make_step(const Workload& w);

}  // namespace linmeta::bench

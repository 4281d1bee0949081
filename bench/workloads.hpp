// The bench workloads: named, deterministic scheduler steps and the builder
// configuration each one runs under.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "linmeta/linmeta.hpp"
#include "random_step.hpp"

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

/// Host copies of every array of a step plus one block table per group (the
/// test suite's step holder; its step() views them).
using StepData = linmeta::testing::RandomStep;

/// The deterministic step of a workload.
StepData make_step(const Workload& w);

}  // namespace linmeta::bench

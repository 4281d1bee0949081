// MetadataBuilder::Impl: plan (host, once per step) -> pack (arena + jobs) -> submit (the
// target runs the jobs) -> the returned metadata. No allocation after construction.
// Declared here (not in builder.cpp) so that tests can reach the executor.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "buffer_layout.hpp"
#include "executor.hpp"
#include "linmeta/builder.hpp"
#include "pack.hpp"
#include "reentry_guard.hpp"
#include "step_plan.hpp"

namespace linmeta {

class MetadataBuilder::Impl {
 public:
  Impl(BuilderKind kind, const Config& config, const BuilderOptions& options);

  /// Plans the step into the plan not in use; only after the work is submitted does it
  /// become the last built step and are the returned metadata rewritten, so that a step
  /// that fails (validation, submission) leaves the last built step and its metadata intact.
  std::span<const Metadata> build(const Step& step, std::span<const BlockTable> tables,
                                  Stream stream, bool capture);
  Metadata update_block_table(const Metadata& m, const BlockTable& table, int32_t group,
                              Stream stream);

  BuilderKind kind_;
  Config config_;
  BuilderOptions options_;
  detail::BufferLayout layout_;
  std::array<detail::PlanStorage, 2> storage_;
  std::array<detail::StepPlan, 2> plans_;
  int32_t current_ = 0;  ///< plans_[current_] is the last built step
  bool built_ = false;
  detail::PackedStep packed_;
  detail::PackedStep update_;
  std::unique_ptr<detail::Executor> executor_;
  std::vector<Metadata> out_;
  std::vector<detail::TableRef> tables_;
  BuildTiming timing_;
  int64_t last_upload_bytes_ = 0;
  detail::DebugReentryGuard reentry_;  ///< debug builds: one builder used from two threads throws
};

}  // namespace linmeta

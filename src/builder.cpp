// MetadataBuilder: plan (host, once per step) -> pack (arena + jobs) -> submit
// (the target runs the jobs). No allocation after construction.
#include "linmeta/builder.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <vector>

#include "buffer_layout.hpp"
#include "capacity.hpp"
#include "executor.hpp"
#include "linmeta/error.hpp"
#include "pack.hpp"
#include "reentry_guard.hpp"
#include "step_plan.hpp"

namespace linmeta {

using namespace detail;

class MetadataBuilder::Impl {
 public:
  Impl(BuilderKind kind, const Config& config, const BuilderOptions& options)
      : kind_(kind), config_(config), options_(options) {
    validate_config(config, kind);
    if (options.num_groups < 1 || options.num_groups > kMaxNumGroups)
      throw Error(fmt::format("linmeta: options.num_groups = {} is outside [1, kMaxNumGroups = {}]",
                              options.num_groups, kMaxNumGroups));
    layout_ =
        BufferLayout::of(Capacity::of(config, kind), config.full_cuda_graph, options.num_groups);
    for (auto& p : plans_) reserve_plan(p, config);
    const int32_t words = arena_capacity_words(config, kind, options.num_groups);
    executor_ = options.target == Target::Cuda
                    ? make_cuda_executor(layout_.total_bytes(), words, options)
                    : make_host_executor(layout_.total_bytes(), words);
    out_.resize(static_cast<size_t>(options.num_groups));
    tables_.resize(static_cast<size_t>(options.num_groups));
  }

  std::span<const Metadata> build(const Step& step, std::span<const BlockTable> tables,
                                  Stream stream, bool capture) {
    const auto scope = reentry_.enter("build");
    using Clock = std::chrono::steady_clock;
    const int32_t G = options_.num_groups;
    if (static_cast<int32_t>(tables.size()) != G)
      throw Error(fmt::format("linmeta: {} block tables given, the builder serves num_groups = {}",
                              tables.size(), G));
    const auto t0 = Clock::now();
    StepPlan& plan = plans_[1 - current_];
    plan_step(config_, kind_, step, capture, tables, plan);  // throws before any write
    const auto t1 = Clock::now();

    for (int32_t g = 0; g < G; ++g) {
      const BlockTable& t = tables[static_cast<size_t>(g)];
      tables_[static_cast<size_t>(g)] =
          TableRef{t.data, t.row_stride, t.width, spec_columns(config_, plan, t)};
    }
    pack_step(plan, config_, kind_, layout_, tables_, 0, PackMode::Build, executor_->arena(),
              packed_);
    LaunchHeader& h = packed_.header;
    h.seq_lens = step.seq_lens;
    h.accepted = step.num_accepted_tokens;
    h.starts_dst = -1;
    h.wait_on_dependency = options_.programmatic_dependent_launch ? 1 : 0;
    for (int32_t g = 0; g < G; ++g)
      out_[static_cast<size_t>(g)] =
          materialize(plan, packed_.views, layout_, executor_->buffers(), g, options_.target,
                      tables[static_cast<size_t>(g)], config_);
    const auto t2 = Clock::now();
    executor_->submit(h, packed_.arena_words, stream);
    const auto t3 = Clock::now();

    current_ = 1 - current_;
    built_ = true;
    last_upload_bytes_ = static_cast<int64_t>(packed_.arena_words) * 4;
    auto ns = [](auto d) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    };
    timing_ = {ns(t1 - t0), ns(t2 - t1), ns(t3 - t2)};
    return out_;
  }

  Metadata update_block_table(const Metadata& m, const BlockTable& table, int32_t group,
                              Stream stream) {
    const auto scope = reentry_.enter("update_block_table");
    if (!built_) throw Error("linmeta: update_block_table before any build");
    if (group < 0 || group >= options_.num_groups)
      throw Error(fmt::format("linmeta: update_block_table group = {} is outside [0, {})", group,
                              options_.num_groups));
    const StepPlan& plan = plans_[current_];
    if (m.num_actual_tokens != plan.num_actual_tokens || m.num_prefills != plan.num_prefills ||
        m.num_decodes != plan.num_decodes || m.num_spec_decodes != plan.num_spec_decodes ||
        m.checkpoint.has_value() != plan.checkpoint)
      throw Error("linmeta: update_block_table takes metadata of the builder's last built step");
    const std::array<BlockTable, 1> one{table};
    validate_tables(one);
    check_table_widths(one, plan.width);

    // Only the block-table gathers, from the aligned starts the build stored: the
    // caller's seq_lens of that step are not read again.
    const std::array<TableRef, 1> ref{
        TableRef{table.data, table.row_stride, table.width, spec_columns(config_, plan, table)}};
    PackedStep& u = update_;
    pack_step(plan, config_, kind_, layout_, ref, group, PackMode::GathersOnly, executor_->arena(),
              u);
    u.header.seq_lens = nullptr;
    u.header.accepted = nullptr;
    u.header.starts_dst = config_.mamba_cache_mode == CacheMode::Align
                              ? layout_.dst(Buf{Out::AlignedStart, false})
                              : -1;
    u.header.wait_on_dependency = options_.programmatic_dependent_launch ? 1 : 0;
    executor_->submit(u.header, u.arena_words, stream);
    last_upload_bytes_ = static_cast<int64_t>(u.arena_words) * 4;

    const Metadata fresh = materialize(plan, u.views, layout_, executor_->buffers(), group,
                                       options_.target, table, config_);
    Metadata out = m;
    out.spec_state_indices_tensor = fresh.spec_state_indices_tensor;
    out.non_spec_state_indices_tensor = fresh.non_spec_state_indices_tensor;
    out.prefill_state_indices = fresh.prefill_state_indices;
    if (out.recoverssm_commit) {
      out.recoverssm_commit->state_indices = fresh.spec_state_indices_tensor;
      if (out.recoverssm_commit->align) out.recoverssm_commit->align->block_table = table;
    }
    if (out.checkpoint) out.checkpoint->state_indices = fresh.checkpoint->state_indices;
    return out;
  }

  BuilderKind kind_;
  Config config_;
  BuilderOptions options_;
  BufferLayout layout_;
  std::array<StepPlan, 2> plans_;
  int32_t current_ = 0;  ///< plans_[current_] is the last built step
  bool built_ = false;
  PackedStep packed_;
  PackedStep update_;
  std::unique_ptr<Executor> executor_;
  std::vector<Metadata> out_;
  std::vector<TableRef> tables_;
  BuildTiming timing_;
  int64_t last_upload_bytes_ = 0;
  DebugReentryGuard reentry_;  ///< debug builds: one builder used from two threads throws
};

MetadataBuilder::MetadataBuilder(BuilderKind kind, const Config& config,
                                 const BuilderOptions& options)
    : impl_(std::make_unique<Impl>(kind, config, options)) {}
MetadataBuilder::~MetadataBuilder() = default;
MetadataBuilder::MetadataBuilder(MetadataBuilder&&) noexcept = default;
MetadataBuilder& MetadataBuilder::operator=(MetadataBuilder&&) noexcept = default;

MetadataBuilder::Impl& MetadataBuilder::impl() const {
  if (!impl_) throw Error("linmeta: this MetadataBuilder was moved from; it holds no builder");
  return *impl_;
}

const Metadata& MetadataBuilder::build(const Step& step, Stream stream) {
  return impl().build(step, {&step.block_table, 1}, stream, false)[0];
}
const Metadata& MetadataBuilder::build_for_cudagraph_capture(const Step& step, Stream stream) {
  return impl().build(step, {&step.block_table, 1}, stream, true)[0];
}
std::span<const Metadata> MetadataBuilder::build_groups(const Step& step,
                                                        std::span<const BlockTable> tables,
                                                        Stream stream) {
  return impl().build(step, tables, stream, false);
}
std::span<const Metadata> MetadataBuilder::build_groups_for_cudagraph_capture(
    const Step& step, std::span<const BlockTable> tables, Stream stream) {
  return impl().build(step, tables, stream, true);
}
Metadata MetadataBuilder::update_block_table(const Metadata& metadata, const BlockTable& table,
                                             int32_t group, Stream stream) {
  return impl().update_block_table(metadata, table, group, stream);
}
const Config& MetadataBuilder::config() const { return impl().config_; }
BuilderKind MetadataBuilder::kind() const { return impl().kind_; }
Target MetadataBuilder::target() const { return impl().options_.target; }
int32_t MetadataBuilder::num_groups() const { return impl().options_.num_groups; }
const BuildTiming& MetadataBuilder::last_timing() const { return impl().timing_; }
int64_t MetadataBuilder::last_upload_bytes() const { return impl().last_upload_bytes_; }
int32_t MetadataBuilder::last_launch_param_bytes() const {
  return impl().executor_->last_param_bytes();
}
int64_t MetadataBuilder::pinned_bytes() const { return impl().executor_->pinned_bytes(); }
int64_t MetadataBuilder::buffer_bytes() const { return impl().executor_->buffer_bytes(); }

}  // namespace linmeta

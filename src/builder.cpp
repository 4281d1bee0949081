// MetadataBuilder: plan (host, once per step) -> pack (arena + jobs) -> submit
// (the target runs the jobs). No allocation after construction.
#include "linmeta/builder.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <chrono>
#include <vector>

#include "builder_impl.hpp"
#include "capacity.hpp"
#include "linmeta/error.hpp"

namespace linmeta {

using namespace detail;

namespace {

/// Metadata::step_id: unique in the process, so that metadata of another builder, or of an
/// earlier step of this one, is told apart from the last built step's.
uint64_t next_step_id() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace

MetadataBuilder::Impl::Impl(BuilderKind kind, const Config& config, const BuilderOptions& options)
    : kind_(kind),
      config_((validate_config(config, kind), config)),
      options_(options),
      storage_{PlanStorage(config, kind), PlanStorage(config, kind)} {
  if (options.num_groups < 1 || options.num_groups > kMaxNumGroups)
    throw Error(fmt::format("linmeta: options.num_groups = {} is outside [1, kMaxNumGroups = {}]",
                            options.num_groups, kMaxNumGroups));
  layout_ = BufferLayout::of(Capacity::of(config, kind), kind, config.full_cuda_graph,
                             options.num_groups);
  plans_ = {StepPlan(storage_[0]), StepPlan(storage_[1])};
  const int32_t words = arena_capacity_words(config, kind, options.num_groups);
  executor_ = options.target == Target::Cuda
                  ? make_cuda_executor(layout_.total_bytes(), words, options)
                  : make_host_executor(layout_.total_bytes(), words);
  out_.resize(static_cast<size_t>(options.num_groups));
  tables_.resize(static_cast<size_t>(options.num_groups));
}

std::span<const Metadata> MetadataBuilder::Impl::build(const Step& step,
                                                       std::span<const BlockTable> tables,
                                                       Stream stream, bool capture) {
  const auto scope = reentry_.enter("build");
  using Clock = std::chrono::steady_clock;
  const int32_t G = options_.num_groups;
  if (static_cast<int32_t>(tables.size()) != G)
    throw Error(fmt::format("linmeta: {} block tables given, the builder serves num_groups = {}",
                            tables.size(), G));
  const auto t0 = Clock::now();
  const int32_t next = 1 - current_;
  StepPlan& plan = plans_[static_cast<size_t>(next)];
  plan = StepPlan(storage_[static_cast<size_t>(next)]);
  plan_step(config_, kind_, step, capture, tables, plan);  // throws before any write
  plan.step_id = next_step_id();
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
  h.wait_on_dependency = options_.programmatic_dependent_launch ? 1 : 0;
  const auto t2 = Clock::now();
  executor_->submit(h, packed_.arena_words, stream);
  const auto t3 = Clock::now();

  // Submitted: this is now the last built step.
  current_ = next;
  built_ = true;
  for (int32_t g = 0; g < G; ++g) {
    Metadata& m = out_[static_cast<size_t>(g)];
    m = Metadata{};
    m.target = options_.target;
    m.step_id = plan.step_id;
    m.spec_rows_staged = plan.stage_spec;
    m.decode_rows_staged = plan.stage_decode;
    const StepArrays in{
        step.seq_lens, step.num_accepted_tokens, step.query_start_loc,
        tables[static_cast<size_t>(g)],
        step.num_decode_draft_tokens.empty() ? nullptr : step.num_decode_draft_tokens.data()};
    materialize(m, kind_, plan, packed_.views, layout_, executor_->buffers(), g, in, config_,
                Rows::All);
  }
  last_upload_bytes_ = static_cast<int64_t>(packed_.arena_words) * 4;
  const auto t4 = Clock::now();
  auto ns = [](auto d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
  timing_ = {ns(t1 - t0), ns(t2 - t1), ns(t3 - t2), ns(t4 - t3)};
  return out_;
}

Metadata MetadataBuilder::Impl::update_block_table(const Metadata& m, const BlockTable& table,
                                                   int32_t group, Stream stream) {
  const auto scope = reentry_.enter("update_block_table");
  if (!built_) throw Error("linmeta: update_block_table before any build");
  if (group < 0 || group >= options_.num_groups)
    throw Error(fmt::format("linmeta: update_block_table group = {} is outside [0, {})", group,
                            options_.num_groups));
  const StepPlan& plan = plans_[static_cast<size_t>(current_)];
  if (m.step_id != plan.step_id)
    throw Error(
        "linmeta: update_block_table takes metadata of the builder's last built step (this "
        "metadata is of another step or another builder)");
  const std::array<BlockTable, 1> one{table};
  validate_tables(one, group);
  check_table_widths(one, plan.width, group);

  // Only the block-table gathers, from the seq_lens the build kept: the caller's of that
  // step are not read again.
  const std::array<TableRef, 1> ref{
      TableRef{table.data, table.row_stride, table.width, spec_columns(config_, plan, table)}};
  PackedStep& u = update_;
  pack_step(plan, config_, kind_, layout_, ref, group, PackMode::GathersOnly, executor_->arena(),
            u);
  u.header.seq_lens = regather_reads_seq_lens(config_, kind_)
                          ? reinterpret_cast<const int32_t*>(
                                executor_->buffers() + layout_.dst(Buf{Out::KeptSeqLens, false}))
                          : nullptr;
  u.header.accepted = nullptr;
  u.header.wait_on_dependency = options_.programmatic_dependent_launch ? 1 : 0;
  executor_->submit(u.header, u.arena_words, stream);
  last_upload_bytes_ = static_cast<int64_t>(u.arena_words) * 4;

  // Every batch-level field stays `m`'s; the group's (Scope::Group rows) are re-gathered.
  Metadata out = m;
  const StepArrays in{nullptr, nullptr, nullptr, table};
  materialize(out, kind_, plan, u.views, layout_, executor_->buffers(), group, in, config_,
              Rows::GroupScoped);
  return out;
}

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

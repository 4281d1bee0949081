// The packer: a StepPlan into the step arena (pack.hpp). The kinds' packing rules
// (src/kinds/) write through its helpers: emit (a finish job and its view), put (plan data
// into the arena), set / host / input (views of values, plan memory and step arrays).
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "linmeta/error.hpp"
#include "pack.hpp"

namespace linmeta::detail {

/// Largest step arena (int32 words): offsets stay far from int32 overflow.
inline constexpr int64_t kMaxArenaWords = int64_t{1} << 28;

// Typed job description -> job kind and arguments (one overload per flavour of the list).
#define LINMETA_JOB_ENCODE(S, m)                  \
  inline JobKind encode(JobArgs& a, const S& x) { \
    a.m = x;                                      \
    return JobKind::S;                            \
  }
LINMETA_JOB_KINDS(LINMETA_JOB_ENCODE)
#undef LINMETA_JOB_ENCODE

class Packer {
 public:
  Packer(const StepPlan& plan, const Config& config, BuilderKind builder_kind,
         const BufferLayout& l, ArenaSpan arena, PackedStep& out)
      : p(plan), c(config), kind(builder_kind), l_(l), arena_(arena), out_(out) {}

  /// `tables` holds group_count references (count mode: none are read).
  void run(PackMode mode, std::span<const TableRef> tables, int32_t group_begin,
           int32_t group_count);

  const StepPlan& p;
  const Config& c;
  const BuilderKind kind;
  /// Arena offsets of the arrays every kind may read: query_start_loc, the spec mask, the
  /// non-spec and spec row lists and their cumulative lengths.
  int32_t qsl_at = 0, mask_at = 0, ns_rows_at = kIdentity, sp_rows_at = kIdentity, ns_qsl_at = 0,
          sp_qsl_at = 0;
  /// Arena offset of the SGLang kinds' SglangRefs (src/kinds/sglang_family.cpp).
  int32_t sglang_refs_at = 0;

  [[nodiscard]] bool counting() const { return arena_.data == nullptr; }

  /// Reserves n words (written by `fill` unless counting); returns their offset.
  template <class Fill>
  int32_t reserve(int64_t n, Fill&& fill) {
    const auto at = static_cast<int32_t>(words_);
    if (!counting()) {
      if (words_ + n > arena_.capacity)
        throw InternalError(fmt::format("step arena overflow: {} words past the {} counted",
                                        words_ + n - arena_.capacity, arena_.capacity));
      fill(arena_.data + at);
    }
    words_ += n;
    if (words_ > kMaxArenaWords)
      throw Error(fmt::format(
          "linmeta: this configuration cannot fit: its step arena needs more than {} words "
          "(max_num_seqs = {}, num_groups = {})",
          kMaxArenaWords, c.max_num_seqs, num_groups_));
    return at;
  }
  int32_t put(const int32_t* data, int32_t n) {
    return reserve(
        n, [&](int32_t* dst) { std::memcpy(dst, data, sizeof(int32_t) * static_cast<size_t>(n)); });
  }
  void align_even() {
    if (words_ % 2 != 0) reserve(1, [](int32_t* dst) { *dst = 0; });
  }
  int32_t put_rows(const RowList& rows) {
    return rows.identity ? kIdentity : put(rows.idx.data(), rows.n);
  }
  /// The rows as values (an identity list written out).
  int32_t put_row_values(const RowList& rows) {
    if (!rows.identity) return put(rows.idx.data(), rows.n);
    return reserve(rows.n, [&](int32_t* dst) {
      for (int32_t i = 0; i < rows.n; ++i) dst[i] = i;
    });
  }
  int32_t put_cumsum(const Cumsum& cs) { return cs.is_qsl ? qsl_at : put(cs.v.data(), cs.n + 1); }

  /// Adds the job writing `count` elements of output `out` (its staged buffer when
  /// `staged`) and returns the view of them (`count` rows; Slots rows set their own).
  template <class Args>
  FieldView& emit(Out out, bool staged, int32_t count, const Args& args,
                  DType dtype = DType::Int32) {
    const Buf buf{out, staged};
    const bool pairs = std::is_same_v<Args, ChunkIndexPairs>;
    const int64_t elems = static_cast<int64_t>(count) * (pairs ? 2 : 1);
    if (!counting() && elems > l_.capacity_of(buf))
      throw InternalError(fmt::format("{} elements of {}{} exceed its buffer of {}", elems,
                                      output_spec(out).name, staged ? " (staged)" : "",
                                      l_.capacity_of(buf)));
    if (dtype_size(dtype) > dtype_size(output_spec(out).dtype))
      throw InternalError(
          fmt::format("{} written wider than its buffer's element type", output_spec(out).name));
    // count mode: sizes are not known, every job may run
    if (count > 0 || counting())
      add_job(args, count, dtype, BufferLayout::per_group(buf) ? 1 : 0, l_.dst(buf));
    FieldView& v = memory(out, Source::Buffer, nullptr, count, dtype);
    v.buf = buf;
    return v;
  }
  FieldView& view(Out out) { return out_.views[static_cast<size_t>(out)]; }
  /// A scalar (count, set optional, flag) or a present composite.
  void set(Out out, int64_t value = 0) {
    FieldView& v = view(out);
    v = FieldView{};
    v.present = true;
    v.value = value;
  }
  /// An array in the plan's host memory.
  template <class T>
  void host(Out out, std::span<T> data, int32_t rows) {
    memory(out, Source::Plan, data.data(), rows, dtype_of<T>());
  }
  /// One of the step's own arrays.
  void input(Out out, StepInput which, int32_t rows) {
    FieldView& v = view(out);
    v = FieldView{};
    v.present = true;
    v.source = Source::Input;
    v.input = which;
    v.rows = rows;
  }
  /// Adds a job writing `count` elements at `dst`, caller memory (Job kExternalDst), or a job
  /// that writes no output (dst null: its element function has a side effect of its own).
  template <class Args>
  void emit_to(void* dst, int32_t count, const Args& args, DType dtype = DType::Int32) {
    if (count > 0 || counting())
      add_job(args, count, dtype, kExternalDst,
              static_cast<int64_t>(reinterpret_cast<uintptr_t>(dst)));
  }
  /// An array in caller memory: `rows` rows (`cols` > 0: [rows, cols]).
  void external(Out out, const void* data, int64_t rows, DType dtype, int32_t cols = 0) {
    memory(out, Source::External, data, rows, dtype).cols = cols;
  }
  static FieldView slice(FieldView v, int32_t skip) {
    v.offset += skip;
    v.rows -= skip;
    return v;
  }

  /// The token ids of the non-spec rows and of the spec rows (int64 outputs).
  void token_partition();

 private:
  FieldView& memory(Out out, Source source, const void* data, int64_t rows, DType dtype) {
    FieldView& v = view(out);
    v = FieldView{};
    v.present = true;
    v.source = source;
    v.host = data;
    v.rows = rows;
    v.dtype = dtype;
    return v;
  }
  template <class Args>
  void add_job(const Args& args, int32_t count, DType dtype, int32_t per_group, int64_t dst) {
    if (num_jobs_ == static_cast<int32_t>(jobs_.size())) throw InternalError("job table overflow");
    Job& job = jobs_[static_cast<size_t>(num_jobs_++)];
    job = Job{};
    job.kind = encode(job.args, args);
    job.count = count;
    job.dtype = dtype;
    job.per_group = per_group;
    job.dst = dst;
  }
  void counts();
  void conv1d();
  void checkpoint_gather(Out state_indices, int32_t cols);
  void checkpoints(bool meta);
  [[nodiscard]] AcceptedFrom accepted_from() const;
  void finish(std::span<const TableRef> tables, int32_t group_begin);

  const BufferLayout& l_;
  ArenaSpan arena_;
  PackedStep& out_;
  // At most one job per output row, and a few side effects.
  std::array<Job, kNumOutputs + 4> jobs_{};
  int32_t num_jobs_ = 0;
  int64_t words_ = 0;
  int32_t num_groups_ = 0;
};

}  // namespace linmeta::detail

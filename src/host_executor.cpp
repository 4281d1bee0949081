#include <algorithm>
#include <type_traits>
#include <vector>

#include "executor.hpp"

namespace linmeta::detail {

namespace {

/// The elements of an int32 ConvPrograms job (batch_ptr, token_chunk_offset_ptr) sequence by
/// sequence: run_element's values (conv_program, then PAD_SLOT_ID) without its search per
/// element. A long prefill has thousands of programs: they were most of a prefill step's
/// host-target time.
template <class Chunk>
void run_conv_programs(ConvPrograms x, Chunk chunk, const int32_t* off, int32_t count,
                       int32_t* out) {
  x.chunk = chunk;  // a constant for the compiler: one vectorised loop per flavour
  int32_t e = 0;
  for (int32_t i = 0; i < x.n_seqs; ++i) {
    const int32_t end = std::min(off[i + 1], count);
    for (; e < end; ++e) out[e] = conv_program(x, off, i, e);
  }
  for (; e < count; ++e) out[e] = kPadSlotId;
}

/// Every element of `job` for group `g` through run_element, with the job kind a constant
/// so that run_element's switch folds away (the kernel's per-element form, one loop per kind).
template <JobKind K>
void run_elements(const LaunchHeader& h, const int32_t* arena, Job job, int32_t g) {
  job.kind = K;
  for (int32_t e = 0; e < job.count; ++e) run_element(h, arena, job, g, e);
}

void run_job(const LaunchHeader& h, const int32_t* arena, const Job& job, int32_t g) {
  if (job.kind == JobKind::ConvPrograms && job.dtype == DType::Int32) {
    const ConvPrograms& x = job.args.conv;
    auto* out = reinterpret_cast<int32_t*>(job_base(h, job, g));
    if (x.chunk) return run_conv_programs(x, std::true_type{}, arena + x.offsets, job.count, out);
    return run_conv_programs(x, std::false_type{}, arena + x.offsets, job.count, out);
  }
  switch (job.kind) {
#define LINMETA_RUN(S, m) \
  case JobKind::S:        \
    return run_elements<JobKind::S>(h, arena, job, g);
    LINMETA_JOB_KINDS(LINMETA_RUN)
#undef LINMETA_RUN
  }
}

}  // namespace

void run_jobs_on_host(const LaunchHeader& h, const int32_t* arena) {
  for (int32_t j = 0; j < h.num_jobs; ++j) {
    const Job& job = job_at(h, arena, j);
    const int32_t g0 = job.per_group == 1 ? h.group_begin : 0;
    const int32_t g1 = job.per_group == 1 ? h.group_begin + h.group_count : 1;
    for (int32_t g = g0; g < g1; ++g) run_job(h, arena, job, g);
  }
}

namespace {

class HostExecutor final : public Executor {
 public:
  HostExecutor(int64_t buffer_bytes, int32_t arena_words)
      : buffers_(static_cast<size_t>(buffer_bytes) / sizeof(int64_t) + 1),
        arena_(static_cast<size_t>(arena_words) / 2 + 1) {}

  ArenaSpan arena() override {
    return {reinterpret_cast<int32_t*>(arena_.data()), static_cast<int32_t>(arena_.size() * 2)};
  }
  void submit(LaunchHeader& h, int32_t, Stream) override {
    h.arena = nullptr;
    h.buffers = buffers();
    run_jobs_on_host(h, reinterpret_cast<const int32_t*>(arena_.data()));
  }
  [[nodiscard]] char* buffers() const override {
    return reinterpret_cast<char*>(const_cast<int64_t*>(buffers_.data()));
  }
  [[nodiscard]] int64_t pinned_bytes() const override { return 0; }
  [[nodiscard]] int64_t buffer_bytes() const override {
    return static_cast<int64_t>(buffers_.size() * sizeof(int64_t));
  }
  [[nodiscard]] int32_t last_param_bytes() const override { return 0; }

 private:
  std::vector<int64_t> buffers_;  // zero-initialised, 8-byte aligned
  std::vector<int64_t> arena_;    // 8-byte aligned: jobs hold int64 offsets
};

}  // namespace

std::unique_ptr<Executor> make_host_executor(int64_t buffer_bytes, int32_t arena_words) {
  return std::make_unique<HostExecutor>(buffer_bytes, arena_words);
}

}  // namespace linmeta::detail

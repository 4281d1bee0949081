#include <vector>

#include "executor.hpp"

namespace linmeta::detail {

void run_jobs_on_host(const FinishParams& p) {
  for (int32_t j = 0; j < p.num_jobs; ++j) {
    const Job& job = p.jobs[j];
    const int32_t g0 = job.per_group ? p.group_begin : 0;
    const int32_t g1 = job.per_group ? p.group_begin + p.group_count : 1;
    for (int32_t g = g0; g < g1; ++g)
      for (int32_t e = 0; e < job.count; ++e) run_element(p, p.arena, job, g, e);
  }
}

namespace {

class HostExecutor final : public Executor {
 public:
  HostExecutor(int64_t buffer_bytes, int32_t arena_words)
      : buffers_(static_cast<size_t>(buffer_bytes) / sizeof(int64_t) + 1),
        arena_(static_cast<size_t>(arena_words)) {}

  int32_t* acquire_arena(Stream) override { return arena_.data(); }
  void submit(FinishParams& params, int32_t, Stream stream) override { rerun(params, stream); }
  void rerun(FinishParams& params, Stream) override {
    params.arena = arena_.data();
    run_jobs_on_host(params);
  }
  [[nodiscard]] bool capturing(Stream) const override { return false; }
  [[nodiscard]] char* buffers() const override {
    return reinterpret_cast<char*>(const_cast<int64_t*>(buffers_.data()));
  }
  [[nodiscard]] int64_t pinned_bytes() const override { return 0; }
  [[nodiscard]] int64_t buffer_bytes() const override {
    return static_cast<int64_t>(buffers_.size() * sizeof(int64_t));
  }

 private:
  std::vector<int64_t> buffers_;  // zero-initialised, 8-byte aligned
  std::vector<int32_t> arena_;
};

}  // namespace

std::unique_ptr<Executor> make_host_executor(int64_t buffer_bytes, int32_t arena_words) {
  return std::make_unique<HostExecutor>(buffer_bytes, arena_words);
}

}  // namespace linmeta::detail

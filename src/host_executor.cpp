#include <vector>

#include "executor.hpp"

namespace linmeta::detail {

void run_jobs_on_host(const LaunchHeader& h, const int32_t* arena) {
  for (int32_t j = 0; j < h.num_jobs; ++j) {
    const Job& job = job_at(h, arena, j);
    const int32_t g0 = job.per_group ? h.group_begin : 0;
    const int32_t g1 = job.per_group ? h.group_begin + h.group_count : 1;
    for (int32_t g = g0; g < g1; ++g)
      for (int32_t e = 0; e < job.count; ++e) run_element(h, arena, job, g, e);
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

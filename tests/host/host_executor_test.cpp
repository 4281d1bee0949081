// The host target's job loops (src/host_executor.cpp) against the per-element form the
// kernel runs (kernels/finish_job.cuh: run_element): the host walks ConvPrograms jobs
// sequence by sequence instead of searching per element; both must write the same values.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "src/executor.hpp"

namespace linmeta::detail {
namespace {

/// A one-job arena: the offsets at word 0, the job after them (8-byte aligned).
struct OneJob {
  std::vector<int64_t> words;  // 8-byte aligned storage of the int32 arena
  LaunchHeader h{};
  [[nodiscard]] const int32_t* arena() const {
    return reinterpret_cast<const int32_t*>(words.data());
  }
};

OneJob conv_job(const std::vector<int32_t>& offsets, int32_t count, int32_t chunk, DType dtype,
                char* buffers) {
  OneJob o;
  const auto n = static_cast<int32_t>(offsets.size());
  const int32_t jobs_at = (n + 1) / 2 * 2;
  o.words.assign(static_cast<size_t>(jobs_at + kJobWords) / 2 + 1, 0);
  auto* a = reinterpret_cast<int32_t*>(o.words.data());
  std::memcpy(a, offsets.data(), offsets.size() * sizeof(int32_t));
  Job job{};
  job.kind = JobKind::ConvPrograms;
  job.count = count;
  job.dtype = dtype;
  job.args.conv = ConvPrograms{.n_seqs = n - 1, .offsets = 0, .chunk = chunk};
  std::memcpy(a + jobs_at, &job, sizeof(Job));
  o.h.num_jobs = 1;
  o.h.jobs_at = jobs_at;
  o.h.buffers = buffers;
  o.h.group_count = 1;
  return o;
}

TEST(HostExecutor, ConvProgramsWalkEqualsTheElementForm) {
  std::mt19937 rng(20261205u);
  auto uniform = [&](int32_t lo, int32_t hi) {
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> offsets{0};
    for (int32_t i = uniform(0, 12); i > 0; --i)  // empty sequences included
      offsets.push_back(offsets.back() + (uniform(0, 3) == 0 ? 0 : uniform(1, 40)));
    const int32_t total = offsets.back();
    const int32_t count = uniform(0, 3) == 0 ? uniform(0, total) : total + uniform(0, 64);
    const int32_t chunk = uniform(0, 1);
    const DType dtype = uniform(0, 1) == 0 ? DType::Int32 : DType::Int64;
    const size_t bytes = static_cast<size_t>(count) * 8 + 8;
    std::vector<char> walked(bytes, 0x5a), element(bytes, 0x5a);
    const OneJob w = conv_job(offsets, count, chunk, dtype, walked.data());
    run_jobs_on_host(w.h, w.arena());
    const OneJob e = conv_job(offsets, count, chunk, dtype, element.data());
    const Job& job = job_at(e.h, e.arena(), 0);
    for (int32_t i = 0; i < count; ++i) run_element(e.h, e.arena(), job, 0, i);
    ASSERT_EQ(walked, element) << "trial " << trial << ": " << offsets.size() - 1 << " sequences, "
                               << total << " programs, count " << count << ", chunk " << chunk;
  }
}

}  // namespace
}  // namespace linmeta::detail

// Executors run the finish jobs of a packed step on a target: the CPU (host
// target) or one upload plus one kernel launch (cuda target).
#pragma once

#include <cstdint>
#include <memory>

#include "../kernels/finish_job.cuh"
#include "linmeta/builder.hpp"

namespace linmeta::detail {

class Executor {
 public:
  virtual ~Executor() = default;
  /// Host memory to pack the next step arena into.
  virtual int32_t* acquire_arena(Stream stream) = 0;
  /// Runs the jobs over the arena last packed (`words` int32), uploading it.
  virtual void submit(FinishParams& params, int32_t words, Stream stream) = 0;
  /// Runs (other) jobs over the last submitted arena (update_block_table).
  virtual void rerun(FinishParams& params, Stream stream) = 0;
  /// Whether `stream` is capturing a CUDA graph.
  [[nodiscard]] virtual bool capturing(Stream stream) const = 0;
  /// Base of the output block (target memory).
  [[nodiscard]] virtual char* buffers() const = 0;
  [[nodiscard]] virtual int64_t pinned_bytes() const = 0;
  [[nodiscard]] virtual int64_t buffer_bytes() const = 0;
};

std::unique_ptr<Executor> make_host_executor(int64_t buffer_bytes, int32_t arena_words);
std::unique_ptr<Executor> make_cuda_executor(int64_t buffer_bytes, int32_t arena_words,
                                             const BuilderOptions& options);

/// Runs every job element on the calling thread.
void run_jobs_on_host(const FinishParams& params);

}  // namespace linmeta::detail

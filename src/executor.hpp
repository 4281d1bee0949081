// Executors run the finish jobs of a packed step on a target: the CPU (host
// target) or one launch, with the arena in its parameters or copied first (cuda target).
#pragma once

#include <cstdint>
#include <memory>

#include "../kernels/finish_job.cuh"
#include "linmeta/builder.hpp"
#include "pack.hpp"

namespace linmeta::detail {

class Executor {
 public:
  virtual ~Executor() = default;
  /// Host memory to pack the next step arena into.
  virtual ArenaSpan arena() = 0;
  /// Runs the jobs of the arena last packed (`words` int32); sets the header's
  /// arena and buffer pointers.
  virtual void submit(LaunchHeader& header, int32_t words, Stream stream) = 0;
  /// Base of the output block (target memory).
  [[nodiscard]] virtual char* buffers() const = 0;
  [[nodiscard]] virtual int64_t pinned_bytes() const = 0;
  [[nodiscard]] virtual int64_t buffer_bytes() const = 0;
  /// Kernel parameter bytes of the last launch (0 on the host target).
  [[nodiscard]] virtual int32_t last_param_bytes() const = 0;
};

std::unique_ptr<Executor> make_host_executor(int64_t buffer_bytes, int32_t arena_words);
std::unique_ptr<Executor> make_cuda_executor(int64_t buffer_bytes, int32_t arena_words,
                                             const BuilderOptions& options);

/// Runs every job element on the calling thread.
void run_jobs_on_host(const LaunchHeader& header, const int32_t* arena);

}  // namespace linmeta::detail

// The cuda target. A step arena that fits the kernel parameters travels inside
// the launch (one launch, no copy). A larger one is staged in a ring of pinned
// slots guarded by events (slots reserved for captured builds, which re-read
// theirs at every replay), copied with one cudaMemcpyAsync, then one launch.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../kernels/finish_launch.hpp"
#include "cuda_check.hpp"
#include "executor.hpp"

namespace linmeta::detail {

namespace {

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(int64_t buffer_bytes, int32_t arena_words, const BuilderOptions& o)
      : scratch_(static_cast<size_t>(arena_words) / 2 + 1),
        slot_bytes_((static_cast<size_t>(arena_words) * sizeof(int32_t) + 255) / 256 * 256),
        buffer_bytes_(buffer_bytes),
        capture_slots_(o.capture_slots),
        pdl_(o.programmatic_dependent_launch) {
    if (o.staging_slots < 1) throw Error("linmeta: options.staging_slots must be at least 1");
    if (o.capture_slots < 0) throw Error("linmeta: options.capture_slots must be >= 0");
    if (pdl_) {  // PDL only where the kernel waits (else plain stream order)
      int device = 0;
      cuda_check(cudaGetDevice(&device), "cudaGetDevice");
      pdl_ = programmatic_launch_waits(device);
    }
    // Staging exists only when some step can outgrow the kernel parameters.
    if (arena_words > max_inline_arena_words())
      ring_.resize(static_cast<size_t>(o.staging_slots));
    else
      capture_slots_ = 0;
    try {
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&buffers_), static_cast<size_t>(buffer_bytes)),
                 "cudaMalloc(buffers)");
      cuda_check(cudaMemset(buffers_, 0, static_cast<size_t>(buffer_bytes)), "cudaMemset(buffers)");
      if (!ring_.empty()) {
        cuda_check(cudaMalloc(reinterpret_cast<void**>(&arena_), slot_bytes_), "cudaMalloc(arena)");
        const size_t slots = ring_.size() + static_cast<size_t>(capture_slots_);
        cuda_check(cudaHostAlloc(&pinned_, slot_bytes_ * slots, cudaHostAllocDefault),
                   "cudaHostAlloc(staging)");
        for (auto& s : ring_)
          cuda_check(cudaEventCreateWithFlags(&s, cudaEventDisableTiming), "cudaEventCreate");
      }
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(construction)");
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaExecutor() override { release(); }

  ArenaSpan arena() override { return {scratch(), static_cast<int32_t>(scratch_.size() * 2)}; }

  void submit(LaunchHeader& h, int32_t words, Stream stream) override {
    h.buffers = buffers_;
    if (words <= max_inline_arena_words()) {
      h.arena = nullptr;
      param_bytes_ = launch_finish_inline(h, scratch(), words, pdl_, stream);
    } else {
      upload(words, stream);
      h.arena = arena_;
      param_bytes_ = launch_finish(h, pdl_, stream);
    }
  }

  [[nodiscard]] char* buffers() const override { return buffers_; }
  [[nodiscard]] int64_t pinned_bytes() const override {
    return pinned_ == nullptr
               ? 0
               : static_cast<int64_t>(slot_bytes_ *
                                      (ring_.size() + static_cast<size_t>(capture_slots_)));
  }
  [[nodiscard]] int64_t buffer_bytes() const override {
    return buffer_bytes_ + (arena_ == nullptr ? 0 : static_cast<int64_t>(slot_bytes_));
  }
  [[nodiscard]] int32_t last_param_bytes() const override { return param_bytes_; }

 private:
  int32_t* scratch() { return reinterpret_cast<int32_t*>(scratch_.data()); }

  [[nodiscard]] bool capturing(Stream stream) const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cuda_check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
    return status == cudaStreamCaptureStatusActive;
  }

  /// Copies the scratch arena through a pinned slot into the device arena.
  void upload(int32_t words, Stream stream) {
    const bool captured = capturing(stream);
    int32_t slot = 0;
    if (captured) {
      if (captured_count_ == capture_slots_)
        throw Error("linmeta: all " + std::to_string(capture_slots_) +
                    " capture slots are taken (BuilderOptions::capture_slots)");
      slot = static_cast<int32_t>(ring_.size()) + captured_count_++;
    } else {
      slot = next_;
      next_ = (next_ + 1) % static_cast<int32_t>(ring_.size());
      // Waits only when the device is a whole ring of steps behind.
      cuda_check(cudaEventSynchronize(ring_[static_cast<size_t>(slot)]),
                 "cudaEventSynchronize(staging slot)");
    }
    auto* dst = reinterpret_cast<int32_t*>(static_cast<char*>(pinned_) +
                                           slot_bytes_ * static_cast<size_t>(slot));
    std::copy(scratch(), scratch() + words, dst);
    cuda_check(cudaMemcpyAsync(arena_, dst, sizeof(int32_t) * static_cast<size_t>(words),
                               cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync(step arena)");
    if (!captured)
      cuda_check(cudaEventRecord(ring_[static_cast<size_t>(slot)], stream), "cudaEventRecord");
  }

  void release() {
    for (auto& s : ring_)
      if (s != nullptr) cudaEventDestroy(s);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    if (arena_ != nullptr) cudaFree(arena_);
    if (buffers_ != nullptr) cudaFree(buffers_);
    pinned_ = nullptr;
    arena_ = nullptr;
    buffers_ = nullptr;
  }

  std::vector<int64_t> scratch_;  ///< the packed arena of the last build (host, 8-byte aligned)
  size_t slot_bytes_;
  int64_t buffer_bytes_;
  int32_t capture_slots_;
  bool pdl_;
  std::vector<cudaEvent_t> ring_;
  char* buffers_ = nullptr;
  int32_t* arena_ = nullptr;
  void* pinned_ = nullptr;
  int32_t next_ = 0;
  int32_t captured_count_ = 0;
  int32_t param_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(int64_t buffer_bytes, int32_t arena_words,
                                             const BuilderOptions& options) {
  return std::make_unique<CudaExecutor>(buffer_bytes, arena_words, options);
}

}  // namespace linmeta::detail

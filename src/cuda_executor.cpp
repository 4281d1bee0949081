// The cuda target: a device output block and step arena, a ring of pinned
// staging slots guarded by events, and slots reserved for captured builds.
#include <cuda_runtime_api.h>

#include <vector>

#include "../kernels/finish_launch.hpp"
#include "cuda_check.hpp"
#include "executor.hpp"

namespace linmeta::detail {

namespace {

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(int64_t buffer_bytes, int32_t arena_words, const BuilderOptions& o)
      : slot_bytes_((static_cast<size_t>(arena_words) * sizeof(int32_t) + 255) / 256 * 256),
        ring_(static_cast<size_t>(o.staging_slots)),
        capture_slots_(o.capture_slots),
        buffer_bytes_(buffer_bytes) {
    if (o.staging_slots < 1) throw Error("linmeta: options.staging_slots must be at least 1");
    if (o.capture_slots < 0) throw Error("linmeta: options.capture_slots must be >= 0");
    try {
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&buffers_), static_cast<size_t>(buffer_bytes)), "cudaMalloc(buffers)");
      cuda_check(cudaMemset(buffers_, 0, static_cast<size_t>(buffer_bytes)), "cudaMemset(buffers)");
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&arena_), slot_bytes_), "cudaMalloc(arena)");
      const size_t slots = ring_.size() + static_cast<size_t>(capture_slots_);
      cuda_check(cudaHostAlloc(&pinned_, slot_bytes_ * slots, cudaHostAllocDefault),
                 "cudaHostAlloc(staging)");
      for (auto& s : ring_) cuda_check(cudaEventCreateWithFlags(&s, cudaEventDisableTiming), "cudaEventCreate");
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(construction)");
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaExecutor() override { release(); }

  [[nodiscard]] bool capturing(Stream stream) const override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cuda_check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
    return status == cudaStreamCaptureStatusActive;
  }

  int32_t* acquire_arena(Stream stream) override {
    capturing_ = capturing(stream);
    if (capturing_) {
      // A captured copy re-reads its slot at every replay: the slot is never reused.
      if (captured_ == capture_slots_)
        throw Error("linmeta: all " + std::to_string(capture_slots_) +
                    " capture slots are taken (BuilderOptions::capture_slots)");
      slot_ = static_cast<int32_t>(ring_.size()) + captured_++;
    } else {
      slot_ = next_;
      next_ = (next_ + 1) % static_cast<int32_t>(ring_.size());
      // Waits only when the device is a whole ring of steps behind.
      cuda_check(cudaEventSynchronize(ring_[static_cast<size_t>(slot_)]), "cudaEventSynchronize(staging slot)");
    }
    return slot(slot_);
  }

  void submit(FinishParams& params, int32_t words, Stream stream) override {
    cuda_check(cudaMemcpyAsync(arena_, slot(slot_), sizeof(int32_t) * static_cast<size_t>(words),
                               cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync(step arena)");
    if (!capturing_) cuda_check(cudaEventRecord(ring_[static_cast<size_t>(slot_)], stream), "cudaEventRecord");
    rerun(params, stream);
  }

  void rerun(FinishParams& params, Stream stream) override {
    params.arena = arena_;
    params.buffers = buffers_;
    launch_finish(params, stream);
  }

  [[nodiscard]] char* buffers() const override { return buffers_; }
  [[nodiscard]] int64_t pinned_bytes() const override {
    return static_cast<int64_t>(slot_bytes_ * (ring_.size() + static_cast<size_t>(capture_slots_)));
  }
  [[nodiscard]] int64_t buffer_bytes() const override {
    return buffer_bytes_ + static_cast<int64_t>(slot_bytes_);
  }

 private:
  int32_t* slot(int32_t i) const {
    return reinterpret_cast<int32_t*>(static_cast<char*>(pinned_) + slot_bytes_ * static_cast<size_t>(i));
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

  size_t slot_bytes_;
  std::vector<cudaEvent_t> ring_;
  int32_t capture_slots_;
  int64_t buffer_bytes_;
  char* buffers_ = nullptr;
  int32_t* arena_ = nullptr;
  void* pinned_ = nullptr;
  int32_t next_ = 0;
  int32_t slot_ = 0;
  int32_t captured_ = 0;
  bool capturing_ = false;
};

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(int64_t buffer_bytes, int32_t arena_words,
                                             const BuilderOptions& options) {
  return std::make_unique<CudaExecutor>(buffer_bytes, arena_words, options);
}

}  // namespace linmeta::detail

// A test hook on a builder's submission (MetadataBuilder::impl() is public for tests,
// src/builder_impl.hpp): the builder's executor is wrapped so that a function runs before
// every submission. The function may throw (a failed launch) or block (to hold a call inside
// the builder, past its re-entry guard, while another thread calls in).
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "linmeta/linmeta.hpp"
#include "src/builder_impl.hpp"

namespace linmeta::testing {

/// Installs `before_submit` on `builder` for the hook's lifetime; the builder's own executor
/// comes back when the hook is destroyed.
class SubmitHook {
 public:
  SubmitHook(MetadataBuilder& builder, std::function<void()> before_submit)
      : impl_(builder.impl()) {
    auto hooked = std::make_unique<Hooked>(std::move(impl_.executor_), std::move(before_submit));
    hooked_ = hooked.get();
    impl_.executor_ = std::move(hooked);
  }
  ~SubmitHook() { impl_.executor_ = std::move(hooked_->inner); }
  SubmitHook(const SubmitHook&) = delete;
  SubmitHook& operator=(const SubmitHook&) = delete;

 private:
  struct Hooked final : detail::Executor {
    Hooked(std::unique_ptr<detail::Executor> in, std::function<void()> f)
        : inner(std::move(in)), before(std::move(f)) {}
    detail::ArenaSpan arena() override { return inner->arena(); }
    void submit(detail::LaunchHeader& h, int32_t words, Stream stream) override {
      before();
      inner->submit(h, words, stream);
    }
    [[nodiscard]] char* buffers() const override { return inner->buffers(); }
    [[nodiscard]] int64_t pinned_bytes() const override { return inner->pinned_bytes(); }
    [[nodiscard]] int64_t buffer_bytes() const override { return inner->buffer_bytes(); }
    [[nodiscard]] int32_t last_param_bytes() const override { return inner->last_param_bytes(); }

    std::unique_ptr<detail::Executor> inner;
    std::function<void()> before;
  };

  MetadataBuilder::Impl& impl_;
  Hooked* hooked_ = nullptr;
};

}  // namespace linmeta::testing

// Detection of one builder used from two threads at once (a caller bug: builders are
// not thread-safe; docs/ARCHITECTURE.md "Threads"). One atomic exchange per call, and
// only in debug builds: `DebugReentryGuard` is empty when NDEBUG is defined.
#pragma once

#include <atomic>
#include <string>

#include "linmeta/error.hpp"

namespace linmeta::detail {

/// Marks an object busy for the duration of a call. A second call that enters while
/// the first has not left throws linmeta::Error and leaves the object untouched.
class ReentryGuard {
 public:
  class Scope {
   public:
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { busy_.store(false, std::memory_order_release); }

   private:
    friend class ReentryGuard;
    explicit Scope(std::atomic<bool>& busy) : busy_(busy) {}
    std::atomic<bool>& busy_;
  };

  /// `what` names the call in the error ("build", "update_block_table").
  [[nodiscard]] Scope enter(const char* what) {
    if (busy_.exchange(true, std::memory_order_acquire))
      throw Error(std::string("linmeta: ") + what +
                  " entered while another call of the same builder is running: a builder "
                  "must not be used from two threads at once");
    return Scope(busy_);
  }

 private:
  std::atomic<bool> busy_{false};
};

/// Release builds: nothing.
class NoReentryGuard {
 public:
  struct Scope {
    ~Scope() {}  // user-provided: an unused scope variable is not warned about
  };
  [[nodiscard]] static Scope enter(const char* /*what*/) { return {}; }
};

#ifdef NDEBUG
using DebugReentryGuard = NoReentryGuard;
#else
using DebugReentryGuard = ReentryGuard;
#endif

}  // namespace linmeta::detail

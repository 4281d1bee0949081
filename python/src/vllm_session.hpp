// The vLLM adapter's fast path (python/linmeta/vllm.py): one call per scheduler step and
// group, inputs read in place, outputs as cached views of the builder's persistent buffers.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>

namespace linmeta::py {

/// Binds VllmSession and fill_conv_lists into the extension module.
void bind_vllm_session(nanobind::module_& m);

/// What a VllmSession call needs only when it launches work (a plan, or a re-gather of a
/// group's state indices from another table): read on demand, so that a call served from the
/// plan reads neither.
class LaunchArgs {
 public:
  LaunchArgs() = default;
  LaunchArgs(const LaunchArgs&) = delete;
  LaunchArgs& operator=(const LaunchArgs&) = delete;
  virtual ~LaunchArgs() = default;
  /// The stream to launch on: None, an int cudaStream_t handle or a torch.cuda.Stream.
  [[nodiscard]] virtual nanobind::object stream() const = 0;
  /// Whether a plan gathers the other groups' state indices from the tables they used the
  /// step before.
  [[nodiscard]] virtual bool prefetch_tables() const = 0;
};

/// VllmSession.call (see there) for C++ callers; `session` must be a VllmSession. A null
/// `table` handle: m.block_table_tensor.
/// int32_counts_only: None, instead of a plan, when the accepted or draft counts are not int32
/// arrays (a call served from the last plan passes the plan's own, imported as int32).
nanobind::object session_call(nanobind::handle session, nanobind::handle m, nanobind::handle table,
                              nanobind::handle accepted, nanobind::handle drafts, bool capture,
                              int32_t group, const LaunchArgs& launch, bool int32_counts_only);

/// VllmSession.serve (see there) for C++ callers: None, instead of the group's fields, when
/// `num_actual_tokens` is not the last plan's (the metadata given to update_block_table is of
/// another step) or serving raises linmeta.Error.
nanobind::object session_serve(nanobind::handle session, int32_t group, nanobind::handle table,
                               const LaunchArgs& launch, nanobind::handle num_actual_tokens);

/// isinstance(obj, T) for a bound class T, the exact type first: one pointer comparison per
/// call on the adapter's per-call paths (nb::isinstance looks the type up by its typeid).
template <class T>
bool is_instance(nanobind::handle obj) {
  static PyTypeObject* const exact = reinterpret_cast<PyTypeObject*>(nanobind::type<T>().ptr());
  return (exact != nullptr && Py_TYPE(obj.ptr()) == exact) || nanobind::isinstance<T>(obj);
}

/// obj.name (interned name); raises the Python error.
nanobind::object get_attr(nanobind::handle obj, const nanobind::str& name);

/// Binds vllm_build and VllmBuildState (python/src/vllm_build_call.cpp).
void bind_vllm_build_call(nanobind::module_& m);

}  // namespace linmeta::py

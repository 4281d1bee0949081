// The fuzz oracle's view of a Metadata: every row of the output table (linmeta/outputs.hpp)
// through `for_each_field`, array values read back from host memory (host target).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "linmeta/metadata.hpp"
#include "linmeta/outputs.hpp"

namespace linmeta::fuzz {

/// Address ranges of the caller's arrays behind a build: the step's device arrays and
/// block tables. Views into them are never read by the oracle: the harness frees a step's
/// arrays right after its build. (Which rows may be caller memory depends on the step, e.g.
/// the Mamba builders pass the caller's num_accepted_tokens through: the output table's
/// Cap::Input rows are not all of them.)
class CallerMemory {
 public:
  void add(const void* p, size_t bytes) {
    if (p != nullptr && bytes > 0) ranges_.push_back({addr(p), addr(p) + bytes});
  }
  [[nodiscard]] bool contains(const void* p) const {
    const uintptr_t a = addr(p);
    for (const auto& [lo, hi] : ranges_)
      if (a >= lo && a < hi) return true;
    return false;
  }

 private:
  static uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;
};

/// Whether the oracle may read array `a` of row `spec`: the builder's memory (its buffers,
/// or its plan's host memory), not the caller's.
[[nodiscard]] inline bool readable(const OutputSpec& spec, const Array& a,
                                   const CallerMemory& caller) {
  return !spec.caller_memory() && !caller.contains(a.data);
}

/// Calls f(spec, data, bytes) for every present, non-empty array of `m` the oracle may read.
template <class F>
void for_each_view(const Metadata& m, BuilderKind kind, const CallerMemory& caller, F&& f) {
  for_each_array(m, kind, [&](const OutputSpec& spec, const Array& a) {
    if (a.present && a.size() > 0 && readable(spec, a, caller)) f(spec, a.data, a.bytes());
  });
}

/// The rows of `m` (output table order; a composite's members only when it is present).
struct Row {
  const OutputSpec* spec;
  FieldRef ref;
};
inline std::vector<Row> table_rows(const Metadata& m, BuilderKind kind) {
  std::vector<Row> out;
  for_each_field(m, kind, [&](const OutputSpec& spec, const FieldRef& r) {
    out.push_back({&spec, r});
  });
  return out;
}

/// The first difference between two metadata of the same step and kind, field by field
/// through the output table ("" when equal); `ca` / `cb`: the caller memory behind each.
/// Arrays compare by shape and element values; arrays in the caller's memory by address
/// when `same_inputs` (both built from the very same step arrays), else by shape only.
/// step_id and target are not rows of the table.
inline std::string first_difference(const Metadata& a, const CallerMemory& ca, const Metadata& b,
                                    const CallerMemory& cb, BuilderKind kind, bool same_inputs) {
  const std::vector<Row> ra = table_rows(a, kind), rb = table_rows(b, kind);
  for (size_t i = 0; i < ra.size() || i < rb.size(); ++i) {
    if (i >= ra.size() || i >= rb.size() || ra[i].spec != rb[i].spec) {
      const OutputSpec* s = i < ra.size() ? ra[i].spec : rb[i].spec;
      return std::string(s->name) + " (a composite's presence differs before it)";
    }
    const OutputSpec& spec = *ra[i].spec;
    const FieldRef& x = ra[i].ref;
    const FieldRef& y = rb[i].ref;
    const std::string name = spec.name;
    switch (x.type) {
      case FieldType::Count:
        if (x.count() != y.count())
          return name + ": " + std::to_string(x.count()) + " != " + std::to_string(y.count());
        break;
      case FieldType::OptionalInt:
        if (x.optional_int() != y.optional_int())
          return name + ": " + std::to_string(x.optional_int().value_or(-999999)) +
                 " != " + std::to_string(y.optional_int().value_or(-999999)) + " (-999999: None)";
        break;
      case FieldType::Flag:
        if (x.flag() != y.flag()) return name + ": flag differs";
        break;
      case FieldType::Table:
        if (!(x.table() == y.table())) return name + ": block table differs";
        break;
      case FieldType::Composite:
        if (x.present() != y.present()) return name + ": presence differs";
        break;
      case FieldType::Array: {
        const Array& p = x.array();
        const Array& q = y.array();
        if (p.present != q.present) return name + ": presence differs";
        if (!p.present) break;
        if (p.dtype != q.dtype || p.rows != q.rows || p.cols != q.cols || p.ndim != q.ndim)
          return name + ": shape differs (" + std::to_string(p.rows) + "x" +
                 std::to_string(p.cols) + " vs " + std::to_string(q.rows) + "x" +
                 std::to_string(q.cols) + ")";
        if (p.size() == 0) break;
        const bool pa = readable(spec, p, ca), qa = readable(spec, q, cb);
        if (pa != qa) return name + ": one is the caller's array, the other the builder's";
        if (!pa) {
          if (same_inputs && p.data != q.data) return name + ": another caller array";
          break;
        }
        for (int64_t e = 0; e < p.size(); ++e)
          if (p.at(e) != q.at(e))
            return name + "[" + std::to_string(e) + "]: " + std::to_string(p.at(e)) +
                   " != " + std::to_string(q.at(e));
        break;
      }
    }
  }
  return "";
}

}  // namespace linmeta::fuzz

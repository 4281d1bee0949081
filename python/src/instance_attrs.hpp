// Reads a fixed set of attributes of an object (vLLM's CommonAttentionMetadata, once per
// build() call of every KV-cache group) with dictionary lookups in its __dict__ where that
// gives what getattr gives, and with getattr where it may not.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <span>
#include <vector>

namespace linmeta::py {

/// The attributes `names` of objects, read in one call. A name whose value the object's own
/// __dict__ decides (generic attribute access, and the type has no data descriptor of that
/// name: a dataclass field) is a dict lookup; any other name, or one the dict lacks, takes
/// getattr. What each type allows is worked out once per type and kept while the type is
/// unchanged (its version tag: assigning to a class attribute invalidates it).
class InstanceAttrs {
 public:
  /// names: at most 64.
  explicit InstanceAttrs(std::span<const char* const> names);

  /// out[i] = getattr(obj, names[i]); with `optional` bit i set, None where obj has no such
  /// attribute (getattr's AttributeError). Raises the Python error otherwise.
  void read(nanobind::handle obj, std::span<nanobind::object> out, uint64_t optional = 0);

 private:
  void learn(PyTypeObject* type);

  std::vector<nanobind::str> names_;
  nanobind::object type_;   ///< the type last learnt (held: its address is not reused)
  unsigned int tag_ = 0;    ///< its version tag then
  uint64_t from_dict_ = 0;  ///< bit i: names_[i] may be read from the instance __dict__
};

}  // namespace linmeta::py

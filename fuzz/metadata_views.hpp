// Every array view of a Metadata, for the fuzz oracle: the output table's rows
// (linmeta::for_each_array) plus the conv1d host counts.
#pragma once

#include <cstdint>

#include "linmeta/metadata.hpp"
#include "linmeta/outputs.hpp"

namespace linmeta::fuzz {

/// Calls f(field, data, bytes) for every present, non-empty array of `m`
/// (host target: the data is host memory).
template <class F>
void for_each_view(const Metadata& m, F&& f) {
  auto one = [&](const char* field, const Array& a) {
    if (a.present && a.size() > 0) f(field, a.data, a.bytes());
  };
  for_each_array(m, [&](const OutputSpec& spec, const Array& a) { one(spec.name, a); });
  if (m.conv1d) one("conv1d.nums", m.conv1d->nums);
}

/// Whether two metadata have the same counts and the same views (address and shape).
inline bool same_descriptors(const Metadata& a, const Metadata& b) {
  const StepCounts& x = a;
  const StepCounts& y = b;
  if (x.num_prefills != y.num_prefills || x.num_prefill_tokens != y.num_prefill_tokens ||
      x.num_decodes != y.num_decodes || x.num_decode_tokens != y.num_decode_tokens ||
      x.num_spec_decodes != y.num_spec_decodes ||
      x.num_spec_decode_tokens != y.num_spec_decode_tokens ||
      x.num_actual_tokens != y.num_actual_tokens ||
      a.uniform_spec_sequence_length != b.uniform_spec_sequence_length ||
      a.conv1d.has_value() != b.conv1d.has_value() || (a.conv1d && a.conv1d->tot != b.conv1d->tot))
    return false;
  struct View {
    const void* data;
    int64_t bytes;
  };
  View va[32], vb[32];
  int na = 0, nb = 0;
  for_each_view(a, [&](const char*, const void* d, int64_t n) {
    if (na < 32) va[na++] = {d, n};
  });
  for_each_view(b, [&](const char*, const void* d, int64_t n) {
    if (nb < 32) vb[nb++] = {d, n};
  });
  if (na != nb) return false;
  for (int i = 0; i < na; ++i)
    if (va[i].data != vb[i].data || va[i].bytes != vb[i].bytes) return false;
  return true;
}

}  // namespace linmeta::fuzz

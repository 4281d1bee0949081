// Hand-written steps for the host suites: host vectors behind a linmeta::Step,
// plus readers that turn output views into plain vectors.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "linmeta/linmeta.hpp"

namespace linmeta::testing {

/// One step over host vectors (host target: "device" arrays are host memory).
/// Query lengths define query_start_loc; seq() sets both the device seq_lens and
/// the host upper bound. Optional arrays stay absent until set.
struct HostStep {
  std::vector<int32_t> qsl{0};
  std::vector<int32_t> seq_lens, seq_ub, drafts, accepted;
  std::vector<char> is_prefilling;  // empty = absent
  bool has_drafts = false, has_accepted = false;
  std::vector<int32_t> table;
  int32_t width = 0;
  int64_t stride = 0;
  int32_t num_actual_tokens = -1;  // -1: the query total
  int32_t num_reqs = -1;           // -1: query_start_loc's rows

  HostStep& lens(std::initializer_list<int32_t> ql) {
    qsl.assign(1, 0);
    for (int32_t q : ql) qsl.push_back(qsl.back() + q);
    return *this;
  }
  HostStep& seq(std::initializer_list<int32_t> s) {
    seq_lens = s;
    seq_ub = s;
    return *this;
  }
  HostStep& seq_device(std::initializer_list<int32_t> s) {
    seq_lens = s;
    return *this;
  }
  HostStep& prefilling(std::initializer_list<int> p) {
    is_prefilling.clear();
    for (int x : p) is_prefilling.push_back(x != 0 ? 1 : 0);
    return *this;
  }
  HostStep& draft_counts(std::initializer_list<int32_t> d) {
    drafts = d;
    has_drafts = true;
    return *this;
  }
  HostStep& accepted_counts(std::initializer_list<int32_t> a) {
    accepted = a;
    has_accepted = true;
    return *this;
  }
  HostStep& tokens(int32_t n) {
    num_actual_tokens = n;
    return *this;
  }
  /// bt[r, c] = base + row_stride * r + c (SPEC §3's example: base 100, stride 8).
  HostStep& iota_table(int32_t w, int64_t row_stride = 8, int32_t base = 100) {
    width = w;
    stride = row_stride;
    table.assign(static_cast<size_t>(rows() * row_stride), -7);
    for (int32_t r = 0; r < rows(); ++r)
      for (int32_t c = 0; c < w; ++c)
        table[static_cast<size_t>(r * row_stride + c)] =
            base + static_cast<int32_t>(row_stride) * r + c;
    return *this;
  }

  [[nodiscard]] int32_t rows() const { return static_cast<int32_t>(qsl.size()) - 1; }
  [[nodiscard]] int32_t bt(int32_t r, int32_t c) const {
    return table[static_cast<size_t>(r * stride + c)];
  }
  [[nodiscard]] BlockTable block_table() const { return {table.data(), width, stride}; }

  /// Appends zero-length padding rows up to `n` rows (table re-laid as iota).
  HostStep& pad_to(int32_t n) {
    while (rows() < n) {
      qsl.push_back(qsl.back());
      seq_lens.push_back(0);
      seq_ub.push_back(0);
      if (!is_prefilling.empty()) is_prefilling.push_back(0);
      if (has_drafts) drafts.push_back(-1);
      if (has_accepted) accepted.push_back(1);
    }
    return iota_table(width, stride);
  }

  [[nodiscard]] Step step() const {
    Step s;
    s.num_reqs = num_reqs >= 0 ? num_reqs : rows();
    s.num_actual_tokens = num_actual_tokens >= 0 ? num_actual_tokens : qsl.back();
    s.query_start_loc_cpu = qsl;
    s.seq_lens_cpu_upper_bound = seq_ub;
    if (!is_prefilling.empty())
      s.is_prefilling = {reinterpret_cast<const bool*>(is_prefilling.data()), is_prefilling.size()};
    if (has_drafts) s.num_decode_draft_tokens = drafts;
    s.query_start_loc = qsl.data();
    s.seq_lens = seq_lens.data();
    s.num_accepted_tokens = has_accepted ? accepted.data() : nullptr;
    s.block_table = block_table();
    return s;
  }
};

using Ints = std::vector<int32_t>;
using Ints2 = std::vector<std::vector<int32_t>>;

/// Host values of a view (host target), any element type; bools as 0/1.
inline Ints vec(const Array& a) {
  Ints out;
  for (int64_t i = 0; a.present && i < a.size(); ++i) out.push_back(static_cast<int32_t>(a.at(i)));
  return out;
}
/// Rows of a 2-D view.
inline Ints2 rows_of(const Array& a) {
  Ints2 out;
  for (int64_t r = 0; a.present && r < a.rows; ++r) {
    Ints row;
    for (int32_t c = 0; c < a.cols; ++c) row.push_back(static_cast<int32_t>(a.at(r * a.cols + c)));
    out.push_back(row);
  }
  return out;
}

inline BuilderOptions host_options(int32_t groups = 1) {
  BuilderOptions o;
  o.target = Target::Host;
  o.num_groups = groups;
  return o;
}

}  // namespace linmeta::testing

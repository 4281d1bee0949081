// A random step (random_step.hpp) as a case-file line without "expected" (docs/replay.md):
// what linmeta-stepgen prints, and what the GPU tests print to reproduce a failure with
// `linmeta-replay run`.
#pragma once

#include <string>

#include "case_file.hpp"
#include "linmeta/names.hpp"
#include "random_step.hpp"

namespace linmeta::testing {

inline cases::json step_case_json(const RandomStep& r, const std::string& name) {
  using cases::json;
  auto table = [&](size_t group) {
    json t = json::array();
    for (int32_t i = 0; i < r.num_reqs; ++i) {
      json row = json::array();
      for (int32_t c = 0; c < r.width; ++c)
        row.push_back(r.tables[group][static_cast<size_t>(i * r.row_stride + c)]);
      t.push_back(row);
    }
    return t;
  };
  json step;
  step["query_start_loc"] = r.qsl;
  step["seq_lens"] = r.seq_lens;
  step["seq_lens_cpu_upper_bound"] = r.seq_ub;
  json prefilling = nullptr;
  if (!r.is_prefilling.empty()) {
    prefilling = json::array();
    for (const char b : r.is_prefilling) prefilling.push_back(b != 0);
  }
  step["is_prefilling"] = prefilling;
  step["num_actual_tokens"] = r.num_actual_tokens;
  step["num_decode_draft_tokens_cpu"] = r.has_drafts ? json(r.drafts) : json(nullptr);
  step["num_accepted_tokens"] = r.has_accepted ? json(r.accepted) : json(nullptr);
  step["block_table"] = table(0);
  if (r.tables.size() > 1) {
    json groups = json::array();
    for (size_t g = 0; g < r.tables.size(); ++g) groups.push_back(table(g));
    step["groups"] = groups;
  }
  return {{"name", name},
          {"builder", names::builder_kind_name(r.kind)},
          {"mode", r.capture ? "capture" : "build"},
          {"config", cases::config_json(r.config)},
          {"step", step}};
}

}  // namespace linmeta::testing

// What the tests of rejected input share: the check that a call throws linmeta::Error naming
// the field, snapshots proving a rejected call wrote nothing, and the valid steps (one per
// builder shape) that the bad steps are derived from.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "host_configs.hpp"
#include "host_step.hpp"

namespace linmeta::testing {

/// `call` throws linmeta::Error (no other type) whose message holds every needle; `where`
/// prefixes the failure messages.
inline void expect_error(const std::function<void()>& call, const std::vector<std::string>& needles,
                         const std::string& where = "") {
  const std::string at = where.empty() ? "" : where + ": ";
  try {
    call();
    ADD_FAILURE() << at << "no linmeta::Error thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& n : needles)
      EXPECT_NE(what.find(n), std::string::npos)
          << at << "message \"" << what << "\" lacks \"" << n << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << at << "not a linmeta::Error: " << e.what();
  }
}

/// Snapshots of builder-owned metadata, to prove a failed call wrote nothing.
class Snapshot {
 public:
  Snapshot(std::span<const Metadata> ms, BuilderKind kind)
      : kind_(kind), ms_(ms.begin(), ms.end()) {
    for (const auto& m : ms_) json_.push_back(cases::to_json(m, kind_));
  }
  void expect_unchanged(const std::string& where) const {
    for (size_t g = 0; g < ms_.size(); ++g)
      EXPECT_EQ(cases::to_json(ms_[g], kind_), json_[g]) << where << ": group " << g << " changed";
  }
  [[nodiscard]] const cases::json& at(size_t g) const { return json_[g]; }

 private:
  BuilderKind kind_;
  std::vector<Metadata> ms_;
  std::vector<cases::json> json_;
};

/// A builder's configuration plus the valid step built before the bad one.
struct Base {
  std::string name;
  BuilderKind kind = BuilderKind::Gdn;
  Config config;
  HostStep step;
  int32_t groups = 1;
};

/// GDN with FULL graphs, k = 2.
inline Config graph_gdn_config() { return gdn_config(2, CacheMode::None, true); }

/// KDA RecoverSSM, k = 2, align mode, prefill checkpoints.
inline Config checkpoint_kda_config() {
  Config c = kda_config(2, true, CacheMode::Align);
  c.num_prefill_checkpoint_blocks = 1;
  return c;
}

/// GDN, last build staged into the FULL-graph buffers.
inline Base gdn_staged() {
  HostStep s;
  s.lens({3, 3, 0, 0}).seq({30, 40, 0, 0}).prefilling({0, 0, 0, 0}).draft_counts({2, 2, -1, -1});
  s.accepted_counts({1, 2, 1, 1}).tokens(8).iota_table(4);
  return {"gdn staged pure spec", BuilderKind::Gdn, graph_gdn_config(), s};
}

/// GDN, last build an eager mixed step (spec + prefill: every GDN array present).
inline Base gdn_mixed() {
  HostStep s;
  s.lens({3, 3, 5, 0}).seq({30, 40, 5, 0}).prefilling({0, 0, 1, 0}).draft_counts({2, 2, -1, -1});
  s.accepted_counts({1, 2, 1, 1}).iota_table(4);
  return {"gdn mixed", BuilderKind::Gdn, graph_gdn_config(), s};
}

/// GDN, last build a staged decode step (no drafts).
inline Base gdn_decode() {
  HostStep s;
  s.lens({1, 1, 1, 0}).seq({30, 40, 5, 0}).prefilling({0, 0, 0, 0}).iota_table(4);
  return {"gdn staged decode", BuilderKind::Gdn, graph_gdn_config(), s};
}

/// KDA RecoverSSM, align mode, checkpoints: commit, request indices and checkpoint present.
inline Base kda_mixed() {
  HostStep s;
  s.lens({3, 1, 34, 0}).seq({30, 40, 50, 0}).prefilling({0, 0, 1, 0}).draft_counts({2, -1, -1, -1});
  s.accepted_counts({2, 1, 1, 1}).iota_table(5);
  return {"kda recoverssm mixed", BuilderKind::Kda, checkpoint_kda_config(), s};
}

inline std::vector<Base> all_bases() {
  return {gdn_staged(), gdn_mixed(), gdn_decode(), kda_mixed()};
}
inline std::vector<Base> spec_bases() { return {gdn_staged(), gdn_mixed(), kda_mixed()}; }

/// Lengthens row `row` by `extra` tokens (every later start moves).
inline void add_tokens_from(HostStep& s, int32_t row, int32_t extra) {
  for (size_t i = static_cast<size_t>(row) + 1; i < s.qsl.size(); ++i) s.qsl[i] += extra;
}

}  // namespace linmeta::testing

// linmeta-stepgen: random scheduler steps from the test suite's step generator
// (tools/common/random_step.hpp), printed as case-file JSON lines without "expected"
// (docs/semantics.md, "Case files"). A reference fills "expected" (tests/vllm/).
//   linmeta-stepgen --builder gdn|kda --count N [--seed S] [--profile seed|vllm-0.34]
//                   [--groups-percent P] [--zero-drafts-percent Z]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "case_file.hpp"
#include "random_step.hpp"

namespace {

using linmeta::cases::json;

int usage() {
  std::fprintf(stderr,
               "usage: linmeta-stepgen --builder gdn|kda --count N [--seed S]\n"
               "                       [--profile seed|vllm-0.34] [--groups-percent P]\n"
               "                       [--zero-drafts-percent Z]\n"
               "  prints N random steps (one case-file JSON object per line, no expected);\n"
               "  P percent of them (default 15) are seen by 2-4 KV-cache groups; in Z percent\n"
               "  (default 0) every spec row drafts 0 tokens\n");
  return 2;
}

json table_json(const linmeta::testing::RandomStep& r, size_t group) {
  json t = json::array();
  for (int32_t i = 0; i < r.num_reqs; ++i) {
    json row = json::array();
    for (int32_t c = 0; c < r.width; ++c)
      row.push_back(r.tables[group][static_cast<size_t>(i * r.row_stride + c)]);
    t.push_back(row);
  }
  return t;
}

json case_json(const linmeta::testing::RandomStep& r, const std::string& name) {
  using linmeta::BuilderKind;
  const linmeta::Config& c = r.config;
  json cfg = linmeta::cases::config_json(c);
  json step;
  step["query_start_loc"] = r.qsl;
  step["seq_lens"] = r.seq_lens;
  step["seq_lens_cpu_upper_bound"] = r.seq_ub;
  if (r.is_prefilling.empty()) {
    step["is_prefilling"] = nullptr;
  } else {
    json p = json::array();
    for (const char b : r.is_prefilling) p.push_back(b != 0);
    step["is_prefilling"] = p;
  }
  step["num_actual_tokens"] = r.num_actual_tokens;
  step["block_table"] = table_json(r, 0);
  step["num_decode_draft_tokens_cpu"] = r.has_drafts ? json(r.drafts) : json(nullptr);
  step["num_accepted_tokens"] = r.has_accepted ? json(r.accepted) : json(nullptr);
  if (r.tables.size() > 1) {
    json groups = json::array();
    for (size_t g = 0; g < r.tables.size(); ++g) groups.push_back(table_json(r, g));
    step["groups"] = groups;
  }
  return {{"name", name},
          {"builder", r.kind == BuilderKind::Kda ? "kda" : "gdn"},
          {"mode", r.capture ? "capture" : "build"},
          {"config", cfg},
          {"step", step}};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace linmeta;
  std::string builder, profile = "seed";
  long count = -1;
  unsigned long seed = 1;
  int groups_percent = 15, zero_drafts_percent = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--builder")
      builder = v;
    else if (a == "--count")
      count = std::strtol(v, nullptr, 10);
    else if (a == "--seed")
      seed = std::strtoul(v, nullptr, 10);
    else if (a == "--profile")
      profile = v;
    else if (a == "--groups-percent")
      groups_percent = static_cast<int>(std::strtol(v, nullptr, 10));
    else if (a == "--zero-drafts-percent")
      zero_drafts_percent = static_cast<int>(std::strtol(v, nullptr, 10));
    else
      return usage();
  }
  if ((builder != "gdn" && builder != "kda") || count < 0 ||
      (profile != "seed" && profile != "vllm-0.34") || groups_percent < 0 || groups_percent > 100 ||
      zero_drafts_percent < 0 || zero_drafts_percent > 100)
    return usage();
  const BuilderKind kind = builder == "kda" ? BuilderKind::Kda : BuilderKind::Gdn;
  const Profile prof = profile == "seed" ? Profile::Seed : Profile::Vllm034;
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  for (long i = 0; i < count; ++i) {
    const Config c = testing::random_config(rng, kind, prof);
    testing::RandomStepOptions o;
    o.kind = kind;
    o.zero_drafts = zero_drafts_percent / 100.0;
    o.num_groups = testing::uniform(rng, 0, 99) < groups_percent ? testing::uniform(rng, 2, 4) : 1;
    const testing::RandomStep r = testing::random_step(rng, c, o);
    std::cout << case_json(
                     r, "stepgen-" + std::to_string(seed) + "/" + builder + "/" + std::to_string(i))
                     .dump()
              << "\n";
  }
  return 0;
}

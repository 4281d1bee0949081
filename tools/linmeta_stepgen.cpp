// linmeta-stepgen: random scheduler steps from the test suite's step generator
// (tools/common/random_step.hpp), printed as case-file JSON lines without "expected"
// (docs/semantics.md, "Case files"). A reference fills "expected" (tests/vllm/).
//   linmeta-stepgen --builder NAME --count N [--seed S] [--profile seed|vllm-0.34]
//                   [--groups-percent P] [--zero-drafts-percent Z]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "linmeta/names.hpp"
#include "step_json.hpp"

namespace {

int usage() {
  std::string kinds;  // the builder names, from the kind list (names.hpp)
  for (const auto& [kind, name] : linmeta::names::kBuilderKinds)
    kinds.append(kinds.empty() ? "" : "|").append(name);
  std::fprintf(stderr,
               "usage: linmeta-stepgen --builder %s --count N\n"
               "                       [--seed S]\n"
               "                       [--profile seed|vllm-0.34] [--groups-percent P]\n"
               "                       [--zero-drafts-percent Z]\n"
               "  prints N random steps (one case-file JSON object per line, no expected);\n"
               "  P percent of them (default 15) are seen by 2-4 KV-cache groups; in Z percent\n"
               "  (default 0) every spec row drafts 0 tokens\n",
               kinds.c_str());
  return 2;
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
  const auto kind = linmeta::names::parse(linmeta::names::kBuilderKinds, builder);
  if (!kind || count < 0 || (profile != "seed" && profile != "vllm-0.34") || groups_percent < 0 ||
      groups_percent > 100 || zero_drafts_percent < 0 || zero_drafts_percent > 100)
    return usage();
  const Profile prof = profile == "seed" ? Profile::Seed : Profile::Vllm034;
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  for (long i = 0; i < count; ++i) {
    const Config c = testing::random_config(rng, *kind, prof);
    testing::RandomStepOptions o;
    o.kind = *kind;
    o.zero_drafts = zero_drafts_percent / 100.0;
    o.num_groups = testing::uniform(rng, 0, 99) < groups_percent ? testing::uniform(rng, 2, 4) : 1;
    const testing::RandomStep r = testing::random_step(rng, c, o);
    std::cout << testing::step_case_json(
                     r, "stepgen-" + std::to_string(seed) + "/" + builder + "/" + std::to_string(i))
                     .dump()
              << "\n";
  }
  return 0;
}

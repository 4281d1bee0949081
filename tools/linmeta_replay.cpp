// linmeta-replay: runs case files (SPEC §10) through the public API.
//   linmeta-replay check FILE.jsonl [--target host|cuda]   compare with "expected"
//   linmeta-replay run FILE.jsonl [--target host|cuda]     print the metadata as JSON lines
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "case_file.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: linmeta-replay check|run FILE.jsonl [--target host|cuda]\n"
               "  check: compares every expected field, prints one line per mismatch and\n"
               "         ends with 'N passed, M failed[, K skipped]'; exit 1 on failures\n"
               "  run:   prints each case's metadata (one JSON object per line)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace linmeta;
  if (argc < 3) return usage();
  const std::string cmd = argv[1];
  const std::string file = argv[2];
  Target target = Target::Host;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--target") == 0 && i + 1 < argc) {
      const std::string t = argv[++i];
      if (t == "host")
        target = Target::Host;
      else if (t == "cuda")
        target = Target::Cuda;
      else
        return usage();
    } else {
      return usage();
    }
  }
  if (cmd != "check" && cmd != "run") return usage();
  try {
    const auto lines = cases::read_jsonl(file);
    if (target == Target::Cuda && !cases::cuda_available()) {
      std::fprintf(stderr, "linmeta-replay: no CUDA device: every case skipped\n");
      std::printf("0 passed, 0 failed, %zu skipped\n", lines.size());
      return cmd == "check" ? 1 : 0;
    }
    int passed = 0, failed = 0;
    for (const auto& line : lines) {
      const cases::Case c = cases::parse_case(line);
      std::vector<cases::json> got;
      try {
        got = cases::run_case(c, target);
      } catch (const std::exception& e) {
        if (cmd == "run") {
          std::cout << cases::json{{"name", c.name}, {"error", e.what()}}.dump() << "\n";
          continue;
        }
        std::printf("%s: error: %s\n", c.name.c_str(), e.what());
        ++failed;
        continue;
      }
      if (cmd == "run") {
        for (size_t g = 0; g < got.size(); ++g) {
          cases::json out = got[g];
          out["name"] = c.name;
          if (got.size() > 1) out["group"] = g;
          std::cout << out.dump() << "\n";
        }
        continue;
      }
      bool ok = true;
      for (size_t g = 0; g < got.size(); ++g)
        for (const auto& m : cases::compare(c.expected_groups[g], got[g])) {
          ok = false;
          std::printf("%s: group %zu: %s: expected %s, got %s\n", c.name.c_str(), g,
                      m.field.c_str(), m.expected.c_str(), m.got.c_str());
        }
      ok ? ++passed : ++failed;
    }
    if (cmd == "check") {
      std::printf("%d passed, %d failed\n", passed, failed);
      return failed == 0 ? 0 : 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linmeta-replay: %s\n", e.what());
    return 1;
  }
}

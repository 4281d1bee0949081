// linmeta-replay: runs case files (SPEC §10) through the public API.
//   linmeta-replay check FILE.jsonl [--target host|cuda] [--strict-fields]
//                                                     compare with "expected"
//   linmeta-replay run FILE.jsonl [--target host|cuda]     print the metadata as JSON lines
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <string>

#include "case_file.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: linmeta-replay check|run FILE.jsonl [--target host|cuda] [--strict-fields]\n"
               "  check: compares every expected field, prints one line per mismatch and\n"
               "         ends with 'N passed, M failed[, K skipped]'; exit 1 on failures.\n"
               "         A case whose expected fields linmeta all matches except fields it\n"
               "         does not emit yet is 'partial' (neither passed nor failed; a\n"
               "         failure with --strict-fields). A case on which the reference raised\n"
               "         passes when linmeta rejects the step too ('reference raised,\n"
               "         linmeta answered' is counted apart)\n"
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
  bool strict_fields = false;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--strict-fields") == 0) {
      strict_fields = true;
    } else if (std::strcmp(argv[i], "--target") == 0 && i + 1 < argc) {
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
    int passed = 0, failed = 0, partial = 0, answered = 0;
    std::map<std::string, int> not_emitted;  // field -> cases
    for (const auto& line : lines) {
      const cases::Case c = cases::parse_case(line);
      std::vector<cases::json> got;
      try {
        got = cases::run_case(c, target);
      } catch (const Error& e) {
        if (!c.error.is_null() && cmd == "check") {
          ++passed;  // both reject the step
          continue;
        }
        if (cmd == "run") {
          std::cout << cases::json{{"name", c.name}, {"error", e.what()}}.dump() << "\n";
          continue;
        }
        std::printf("%s: error: %s\n", c.name.c_str(), e.what());
        ++failed;
        continue;
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
      if (!c.error.is_null()) {
        std::printf("%s: reference raised %s, linmeta answered\n", c.name.c_str(),
                    c.error.value("type", std::string("?")).c_str());
        ++answered;
        continue;
      }
      bool ok = true, missing = false;
      std::map<std::string, int> fields;
      for (size_t g = 0; g < got.size(); ++g)
        for (const auto& m : cases::compare(c.expected_groups[g], got[g])) {
          if (m.not_emitted) {
            missing = true;
            fields[m.field] = 1;
            continue;
          }
          ok = false;
          std::printf("%s: group %zu: %s: expected %s, got %s\n", c.name.c_str(), g,
                      m.field.c_str(), m.expected.c_str(), m.got.c_str());
        }
      for (const auto& f : fields) not_emitted[f.first] += 1;
      if (!ok)
        ++failed;
      else if (missing)
        ++partial;
      else
        ++passed;
    }
    if (cmd == "check") {
      if (partial > 0) {
        std::printf(
            "partial: %d cases match every field linmeta emits but expect fields it does "
            "not emit yet:",
            partial);
        for (const auto& f : not_emitted) std::printf(" %s (%d)", f.first.c_str(), f.second);
        std::printf("\n");
      }
      if (answered > 0) std::printf("reference raised, linmeta answered: %d cases\n", answered);
      std::printf("%d passed, %d failed\n", passed, failed);
      return failed == 0 && (!strict_fields || partial == 0) ? 0 : 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linmeta-replay: %s\n", e.what());
    return 1;
  }
}

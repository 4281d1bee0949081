// linmeta-replay: runs case files (docs/case-format.md, docs/replay.md) through the public API.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "case_file.hpp"

namespace {

using linmeta::Target;
using linmeta::cases::json;
namespace cases = linmeta::cases;

constexpr const char* kUsage = R"(usage: linmeta-replay check|run FILE.jsonl [options]

  check   runs every case and compares every expected field; prints one line per problem
          (FILE:LINE: case: ...) and ends with 'N passed, M failed'; exit status 1 when a
          case failed or a line is malformed (such lines count as failures); a
          linmeta::InternalError (a bug of linmeta) is a failure whatever the case expects
  run     prints each case's metadata, one JSON object per line, under vLLM's field names
          ("line", "name", "group" for multi-group steps; "error" when linmeta rejects the
          step, "internal_error" for a linmeta::InternalError); exit status 1 when a line is
          malformed or an internal error occurred

  --target host|cuda   builder target (default host)
  --filter SUBSTRING   only the cases whose name contains SUBSTRING
  --jobs N             run N cases at a time (default 1; output keeps the file's order)
  --allow-skip         --target cuda without a CUDA device: skip every case, exit 0
                       (without it that is an error)
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "linmeta-replay: %s\n\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

struct Args {
  bool check = true;
  std::string file;
  Target target = Target::Host;
  std::string filter;
  int jobs = 1;
  bool allow_skip = false;
  bool inject_internal_error = false;  ///< test builds only (LINMETA_REPLAY_TEST_HOOK)
};

Args parse_args(int argc, char** argv) {
  if (argc < 3) usage_error("needs a command and a file");
  Args a;
  const std::string_view cmd = argv[1];
  if (cmd != "check" && cmd != "run") usage_error("unknown command '" + std::string(cmd) + "'");
  a.check = cmd == "check";
  a.file = argv[2];
  for (int i = 3; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--target") {
      const std::string t = value();
      if (t != "host" && t != "cuda") usage_error("--target takes host or cuda, got '" + t + "'");
      a.target = t == "cuda" ? Target::Cuda : Target::Host;
    } else if (arg == "--filter") {
      a.filter = value();
    } else if (arg == "--jobs") {
      const std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 1 || n > 256)
        usage_error("--jobs takes an integer from 1 to 256, got '" + v + "'");
      a.jobs = static_cast<int>(n);
    } else if (arg == "--allow-skip") {
      a.allow_skip = true;
#ifdef LINMETA_REPLAY_TEST_HOOK
    } else if (arg == "--inject-internal-error") {  // every case throws an InternalError
      a.inject_internal_error = true;
#endif
    } else {
      usage_error("unknown argument '" + std::string(arg) + "'");
    }
  }
  return a;
}

enum class Verdict {
  Pass,
  Fail,
  Answered,  ///< the reference raised on a valid step, linmeta answered (SPEC §8)
};

/// What one line of the file gave: a verdict, the lines to print, in order.
struct Outcome {
  Verdict verdict = Verdict::Pass;
  bool internal_error = false;   ///< linmeta threw an InternalError (a Fail)
  std::vector<std::string> out;  ///< stdout lines (run: JSON; check: problems)
};

/// The case name of a line for --filter ("" when it has none).
std::string name_of(const cases::Line& line) {
  const json& j = line.value;
  if (!j.is_object()) return {};
  const auto it = j.find("name");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// A line of `run`'s output. Invalid UTF-8 (which nlohmann's dump throws on) is replaced.
std::string dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// A failed line: `what` as a check problem, or run's `invalid_case` object.
Outcome failure(Outcome o, const cases::Line& line, const Args& a, const std::string& what) {
  o.verdict = Verdict::Fail;
  o.out.push_back(a.check ? a.file + ":" + std::to_string(line.number) + ": " + what
                          : dumped(json{{"line", line.number}, {"invalid_case", what}}));
  return o;
}

Outcome replay_line(const cases::Line& line, const Args& a) {
  Outcome o;
  const std::string where = a.file + ":" + std::to_string(line.number) + ": ";
  auto fail = [&](const std::string& what) { return failure(std::move(o), line, a, what); };
  if (!line.error.empty()) return fail(line.error);
  cases::Case c;
  try {
    c = cases::parse_case(line.value);
  } catch (const std::exception& e) {  // CaseError, or nlohmann's on a malformed value
    return fail(std::string("invalid case: ") + e.what());
  }
  const std::string label = where + c.name + ": ";
  std::vector<json> got;
  try {
    if (a.inject_internal_error)
      throw linmeta::InternalError("injected by --inject-internal-error (a test build)");
    got = cases::run_case(c, a.target);
  } catch (const linmeta::InternalError& e) {
    // A broken invariant of linmeta, never an answer to the step: a failure even where the
    // reference rejected the step too.
    o.internal_error = true;
    if (a.check) return fail(c.name + ": " + e.what() + " (a bug of linmeta, not of the step)");
    o.verdict = Verdict::Fail;
    o.out.push_back(
        dumped(json{{"line", line.number}, {"name", c.name}, {"internal_error", e.what()}}));
    return o;
  } catch (const linmeta::Error& e) {
    if (!a.check) {
      o.out.push_back(dumped(json{{"line", line.number}, {"name", c.name}, {"error", e.what()}}));
      return o;
    }
    if (c.error && c.error->rejects_input()) return o;  // rejected, as the reference did
    if (c.error)
      return fail(c.name + ": reference raised " + c.error->type + " (a bug of the " +
                  "reference on a valid step), linmeta rejected it: " + e.what());
    return fail(c.name + ": linmeta rejected the step: " + e.what());
  } catch (const std::exception& e) {
    return fail(c.name + ": " + e.what());
  }
  if (!a.check) {
    for (size_t g = 0; g < got.size(); ++g) {
      got[g]["line"] = line.number;
      got[g]["name"] = c.name;
      if (got.size() > 1) got[g]["group"] = g;
      o.out.push_back(dumped(got[g]));
    }
    return o;
  }
  if (c.error) {
    if (c.error->rejects_input())
      return fail(c.name + ": reference raised " + c.error->type + " (\"" + c.error->message +
                  "\"), linmeta answered instead of rejecting the step");
    o.verdict = Verdict::Answered;
    o.out.push_back(label + "reference raised " + c.error->type + ", linmeta answered");
    return o;
  }
  if (c.expected_groups.empty())
    return fail(c.name +
                ": no 'expected' and no 'error': nothing to check against (`run` prints "
                "the metadata)");
  if (got.size() != c.expected_groups.size())
    return fail(c.name + ": " + std::to_string(got.size()) + " groups of metadata, " +
                std::to_string(c.expected_groups.size()) + " expected");
  for (size_t g = 0; g < got.size(); ++g) {
    std::vector<cases::Mismatch> mismatches;
    try {
      mismatches = cases::compare(c.expected_groups[g], got[g]);
    } catch (const std::exception& e) {
      return fail(c.name + ": group " + std::to_string(g) + ": cannot compare: " + e.what());
    }
    for (const auto& m : mismatches) {
      o.verdict = Verdict::Fail;
      o.out.push_back(label + "group " + std::to_string(g) + ": " + m.field + ": expected " +
                      m.expected + ", got " + m.got);
    }
  }
  return o;
}

/// `s` on one line: control characters of the case file (a newline or an escape sequence in a
/// case name) written as \n, \r or \xHH, so that no case can forge check's problem lines or its
/// summary.
std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if ((u < 0x20 && ch != '\t') || u == 0x7F) {
      constexpr const char* kHex = "0123456789abcdef";
      out += {'\\', 'x', kHex[u >> 4], kHex[u & 0xF]};
    } else {
      out += ch;
    }
  }
  return out;
}

/// One line's outcome; never throws (it runs on the worker threads): whatever escapes the
/// checks above (a JSON exception on a value of an unforeseen shape, std::bad_alloc) is that
/// line's failure.
Outcome replay(const cases::Line& line, const Args& a) {
  Outcome o;
  try {
    o = replay_line(line, a);
  } catch (const std::exception& e) {
    o = failure({}, line, a, std::string("cannot replay the line: ") + e.what());
  }
  if (a.check)  // run's lines are JSON, escaped already
    for (auto& s : o.out) s = one_line(s);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  std::vector<cases::Line> lines;
  try {
    for (auto& line : cases::read_lines(a.file))
      if (a.filter.empty() || !line.error.empty() ||
          name_of(line).find(a.filter) != std::string::npos)
        lines.push_back(std::move(line));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linmeta-replay: %s\n", e.what());
    return 1;
  }
  if (a.target == Target::Cuda && !cases::cuda_available()) {
    if (!a.allow_skip) {
      std::fprintf(stderr,
                   "linmeta-replay: --target cuda but no CUDA device is visible "
                   "(--allow-skip skips the %zu cases instead)\n",
                   lines.size());
      return 1;
    }
    std::printf("0 passed, 0 failed, %zu skipped\n", lines.size());
    return 0;
  }

  std::vector<Outcome> outcomes(lines.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < lines.size();) outcomes[i] = replay(lines[i], a);
  };
  std::vector<std::jthread> pool;
  for (int t = 1; t < std::min<int>(a.jobs, static_cast<int>(lines.size())); ++t)
    pool.emplace_back(worker);
  worker();
  pool.clear();

  int passed = 0, failed = 0, answered = 0, internal = 0;
  for (const auto& o : outcomes) {
    for (const auto& s : o.out) std::cout << s << "\n";
    passed += o.verdict == Verdict::Pass;
    failed += o.verdict == Verdict::Fail;
    answered += o.verdict == Verdict::Answered;
    internal += o.internal_error;
  }
  std::cout.flush();
  if (!a.check) {
    if (failed > internal)
      std::fprintf(stderr, "linmeta-replay: %d malformed lines\n", failed - internal);
    if (internal > 0)
      std::fprintf(stderr, "linmeta-replay: %d internal errors (bugs of linmeta)\n", internal);
    return failed == 0 ? 0 : 1;
  }
  if (internal > 0)
    std::printf("%d internal errors (bugs of linmeta, counted as failed)\n", internal);
  if (answered > 0)
    std::printf(
        "%d reference raised, linmeta answered (reference bugs on valid steps, SPEC §8; "
        "neither passed nor failed)\n",
        answered);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

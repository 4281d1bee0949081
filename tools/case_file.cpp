#include "case_file.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "cuda_check.hpp"
#include "linmeta/names.hpp"

namespace linmeta::cases {

namespace {

using tools::cuda_check;

// --- Checked reads of untrusted JSON. `path` names the value in errors ("step.seq_lens[3]").

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw CaseError(path.empty() ? what : path + ": " + what);
}

/// `s` cut to `max` bytes with "..." (never inside a UTF-8 sequence: the message may be dumped
/// as JSON again, which rejects invalid UTF-8).
std::string cut(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max - 3;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "...";
}

/// `v` as JSON text; invalid UTF-8 in its strings (which dump() throws on) is replaced.
std::string dumped(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

/// `v` for an error message, cut to 40 bytes.
std::string shown(const json& v) { return cut(dumped(v), 40); }

/// `v` when it is an integer in [lo, hi] (a float, a string, ... or a value out of range: none).
std::optional<int64_t> int_in(const json& v, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) return {};
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) return {};
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) return {};
  return x;
}

std::string at_index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// `path` by value (not const&): a reference-returning function with a temporary bound to a
// reference parameter trips g++ 13's -Wdangling-reference at every member(j, "", ...).
const json& member(const json& obj, std::string_view path, const char* key) {
  if (!obj.is_object()) bad(std::string(path), "expected an object, got " + shown(obj));
  const auto it = obj.find(key);
  const std::string where = path.empty() ? std::string(key) : std::string(path) + "." + key;
  if (it == obj.end()) bad(where, "missing");
  return *it;
}

std::string field_path(const std::string& path, const char* key) {
  return path.empty() ? key : path + "." + key;
}

int32_t to_int(const json& v, const std::string& path) {
  if (!v.is_number_integer()) bad(path, "expected an integer, got " + shown(v));
  constexpr auto lo = std::numeric_limits<int32_t>::min();
  constexpr auto hi = std::numeric_limits<int32_t>::max();
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                           : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!fits) bad(path, shown(v) + " is outside the int32 range");
  return static_cast<int32_t>(v.get<int64_t>());
}

bool to_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) bad(path, "expected true or false, got " + shown(v));
  return v.get<bool>();
}

std::string to_string(const json& v, const std::string& path) {
  if (!v.is_string()) bad(path, "expected a string, got " + shown(v));
  return v.get<std::string>();
}

int32_t int_field(const json& obj, const std::string& path, const char* key) {
  return to_int(member(obj, path, key), field_path(path, key));
}

/// A list of int32 values of length `size` (any length when size < 0).
std::vector<int32_t> int_list(const json& v, const std::string& path, int64_t size = -1) {
  if (!v.is_array()) bad(path, "expected a list of integers, got " + shown(v));
  if (size >= 0 && std::cmp_not_equal(v.size(), size))
    bad(path, std::to_string(v.size()) + " entries, expected " + std::to_string(size));
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) out.push_back(to_int(v[i], at_index(path, i)));
  return out;
}

/// A block table: a list of at least `rows` rows of one width, flattened row-major.
std::vector<int32_t> table(const json& v, const std::string& path, int32_t rows, int32_t& width) {
  if (!v.is_array()) bad(path, "expected a list of rows, got " + shown(v));
  if (std::cmp_less(v.size(), rows))
    bad(path, std::to_string(v.size()) + " rows, the step has " + std::to_string(rows));
  std::vector<int32_t> flat;
  for (size_t r = 0; r < v.size(); ++r) {
    const std::string row_path = at_index(path, r);
    const auto row = int_list(v[r], row_path);
    if (r == 0) width = static_cast<int32_t>(row.size());
    if (std::cmp_not_equal(row.size(), width))
      bad(row_path, std::to_string(row.size()) + " columns, row 0 has " + std::to_string(width) +
                        " (ragged table)");
    flat.insert(flat.end(), row.begin(), row.end());
  }
  return flat;
}

/// Throws CaseError naming the first key of `obj` (the object at `path`, "" for the case
/// itself) that is not in `known`: a misspelt key would otherwise leave its field at the
/// default and the case would check linmeta against a step the file did not describe.
void only_known_keys(const json& obj, const std::string& path,
                     const std::vector<std::string_view>& known) {
  if (!obj.is_object()) return;  // member() names the wrong type
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) != known.end()) continue;
    std::string list;
    for (const auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    bad(path, "unknown key " + shown(json(it.key())) + " (" + (path.empty() ? "a case" : path) +
                  " has " + list + "; docs/case-format.md)");
  }
}

/// The keys of a case, of its step and of its error (docs/case-format.md); the config's are
/// those of the configuration's field table (config_keys()).
const std::vector<std::string_view> kCaseKeys = {
    "name", "builder", "mode", "config", "step", "expected", "expected_groups", "error", "comment"};
const std::vector<std::string_view> kStepKeys = {"query_start_loc",
                                                 "seq_lens",
                                                 "seq_lens_cpu_upper_bound",
                                                 "is_prefilling",
                                                 "num_actual_tokens",
                                                 "block_table",
                                                 "groups",
                                                 "num_decode_draft_tokens_cpu",
                                                 "num_accepted_tokens"};
const std::vector<std::string_view> kErrorKeys = {"type", "message", "where", "line"};

template <class E, size_t N>
E named(const std::array<std::pair<E, std::string_view>, N>& table, const json& obj,
        const std::string& path, const char* key) {
  const std::string where = field_path(path, key);
  const std::string s = to_string(member(obj, path, key), where);
  if (const auto v = names::parse(table, s)) return *v;
  bad(where, "'" + s + "' is not " + names::choices(table));
}

// --- Inputs and outputs of a run.

/// Device (or host) copies of a case's "device" arrays, alive for one run.
class Inputs {
 public:
  Inputs(const Case& c, Target t) : target_(t) {
    qsl_ = put(c.qsl);
    seq_lens_ = put(c.seq_lens);
    accepted_ = c.has_accepted ? put(c.accepted) : nullptr;
    for (const auto& t2 : c.tables) tables_.push_back(put(t2));
  }
  ~Inputs() {
    if (target_ == Target::Cuda)
      for (void* p : owned_) cudaFree(p);
  }
  Inputs(const Inputs&) = delete;
  Inputs& operator=(const Inputs&) = delete;

  const int32_t* qsl_ = nullptr;
  const int32_t* seq_lens_ = nullptr;
  const int32_t* accepted_ = nullptr;
  std::vector<const int32_t*> tables_;

 private:
  const int32_t* put(const std::vector<int32_t>& v) {
    if (target_ == Target::Host) return v.data();
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(v.size(), 1) * sizeof(int32_t);
    cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    owned_.push_back(p);
    if (!v.empty())
      cuda_check(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    return static_cast<const int32_t*>(p);
  }
  Target target_;
  std::vector<void*> owned_;
};

/// Elements of `a` as int64, copied from target memory.
std::vector<int64_t> read(const Array& a, Target t) {
  std::vector<int64_t> raw(static_cast<size_t>(a.size()) + 1);  // bytes <= 8 per element
  if (a.size() > 0) {
    if (t == Target::Cuda)
      cuda_check(
          cudaMemcpy(raw.data(), a.data, static_cast<size_t>(a.bytes()), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    else
      std::memcpy(raw.data(), a.data, static_cast<size_t>(a.bytes()));
  }
  Array host = a;
  host.data = raw.data();
  std::vector<int64_t> v(static_cast<size_t>(a.size()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = host.at(static_cast<int64_t>(i));
  return v;
}

json element(const Array& a, int64_t v) { return a.dtype == DType::Bool ? json(v != 0) : json(v); }

json array_json(const Array& a, Target t) {
  if (!a.present) return nullptr;
  const auto v = read(a, t);
  json out = json::array();
  if (a.ndim == 1) {
    for (const int64_t x : v) out.push_back(element(a, x));
    return out;
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    json row = json::array();
    for (int32_t c = 0; c < a.cols; ++c)
      row.push_back(element(a, v[static_cast<size_t>(r * a.cols + c)]));
    out.push_back(row);
  }
  return out;
}

/// The case-file `conv1d` entry (SPEC §10) of a to_json() result: the first `tot` programs and
/// whether the arrays hold 2 * max(1024, tot) entries with PAD_SLOT_ID past `tot`.
/// Throws json::exception when `got` is not of to_json()'s shape.
json conv1d_entry(const json& got) {
  const auto nd = got.find("nums_dict");
  if (nd == got.end() || nd->is_null()) return nullptr;
  const json& d = nd->at(std::to_string(kConvBlock));
  const json& bp = got.at("batch_ptr");
  const json& off = got.at("token_chunk_offset_ptr");
  const auto tot = int_in(d.at("tot"), 0, std::numeric_limits<int32_t>::max());
  if (!tot || !bp.is_array() || !off.is_array())
    throw CaseError("conv1d metadata of an unexpected shape: tot " + shown(d.at("tot")));
  bool pad_ok = std::cmp_greater_equal(bp.size(), 2 * std::max<int64_t>(1024, *tot)) &&
                off.size() == bp.size();
  for (size_t i = static_cast<size_t>(*tot); pad_ok && i < bp.size(); ++i)
    pad_ok = bp[i] == kPadSlotId && off[i] == kPadSlotId;
  return {{"nums", d.at("nums")},
          {"tot", *tot},
          {"batch_ptr", d.at("mlist")},
          {"token_chunk_offset_ptr", d.at("offsetlist")},
          {"capacity_padding_ok", pad_ok}};
}

/// Sequence orders agree up to ties (vLLM sorts with an unstable argsort): a permutation
/// of the same size with the same sequence length at every place. Every operand may come from
/// the case file: anything but permutations of 0..n-1 and int32 start locations is no match.
bool same_order_up_to_ties(const json& expected_order, const json& got, const json& qsl) {
  if (!expected_order.is_array() || !got.is_array() || !qsl.is_array()) return false;
  const size_t n = expected_order.size();
  if (got.size() != n || qsl.size() != n + 1) return false;
  std::vector<int64_t> starts;  // int32 values: their differences cannot overflow
  for (const json& x : qsl) {
    const auto v =
        int_in(x, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    if (!v) return false;
    starts.push_back(*v);
  }
  auto len = [&](int64_t i) {
    const auto k = static_cast<size_t>(i);
    return starts[k + 1] - starts[k];
  };
  const auto last = static_cast<int64_t>(n) - 1;
  std::vector<bool> seen_got(n), seen_expected(n);
  for (size_t i = 0; i < n; ++i) {
    const auto g = int_in(got[i], 0, last), e = int_in(expected_order[i], 0, last);
    if (!g || !e || seen_got[static_cast<size_t>(*g)] || seen_expected[static_cast<size_t>(*e)])
      return false;
    seen_got[static_cast<size_t>(*g)] = seen_expected[static_cast<size_t>(*e)] = true;
    if (len(*g) != len(*e)) return false;
  }
  return true;
}

// --- The configuration, through its field table (linmeta/config.hpp).

/// Keys every case's config has; the rest may be absent (their defaults).
bool required_config_key(const std::string& k) {
  return k == "num_spec" || k == "max_num_seqs" || k == "full_cuda_graph" ||
         k == "max_cudagraph_capture_size" || k == "mamba_cache_mode" || k == "block_size" ||
         k == "num_speculative_blocks";
}

/// Configuration fields that are no case-file keys: chunk metadata comes from the builder.
bool derived_config_field(std::string_view k) { return k == "chunk_metadata"; }

/// The keys a case's config may have: every field of the configuration's table but the
/// derived ones.
const std::vector<std::string_view>& config_keys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> out;
    const Config c;
    for_each_config_field(c, [&](const char* key, const auto&) {
      if (!derived_config_field(key)) out.emplace_back(key);
    });
    return out;
  }();
  return keys;
}

void read_config_value(const json& v, const std::string& path, int32_t& out) {
  out = to_int(v, path);
}
void read_config_value(const json& v, const std::string& path, bool& out) {
  out = to_bool(v, path);
}
void read_config_value(const json& v, const std::string& path, Unsettable<int32_t> out) {
  out.value = v.is_null() ? 0 : to_int(v, path);
}
template <class E>
void read_config_value(const json& v, const std::string& path, E& out) {
  const std::string s = to_string(v, path);
  if (const auto e = names::parse(names::table_of<E>(), s)) {
    out = *e;
    return;
  }
  bad(path, "'" + s + "' is not " + names::choices(names::table_of<E>()));
}

json config_value(int32_t v) { return v; }
json config_value(bool v) { return v; }
json config_value(Unsettable<const int32_t> v) {
  return v.value > 0 ? json(v.value) : json(nullptr);
}
template <class E>
json config_value(E v) {
  return std::string(names::name_of(names::table_of<E>(), v));
}

Config parse_config(const json& cf, BuilderKind kind) {
  Config c;
  // The builder's own settings: chunk metadata (GDN) and the backend a CUDA engine resolves
  // by default (GDN triton, KDA FlashKDA).
  c.chunk_metadata = kind == BuilderKind::Gdn;
  c.prefill_backend = kind == BuilderKind::Kda ? PrefillBackend::FlashKda : PrefillBackend::Triton;
  if (!cf.is_object()) bad("config", "expected an object, got " + shown(cf));
  only_known_keys(cf, "config", config_keys());
  // max_num_batched_tokens is optional: vLLM's scheduler_config value where a builder reads it
  // (Inkling's buffers), else the step's token count (parse_case).
  c.max_num_batched_tokens = 0;
  for_each_config_field(c, [&](const char* key, auto&& member) {
    const std::string k = key;
    if (derived_config_field(k)) return;
    const std::string path = "config." + k;
    if (!cf.contains(k)) {
      if (required_config_key(k)) bad(path, "missing");
      return;
    }
    if (k == "prefill_backend" && cf.at(k).is_null()) return;  // the default above
    read_config_value(cf.at(k), path, member);
  });
  // vLLM's MambaSpec.prefill_checkpoint_alignment = None: no checkpoints.
  if (cf.contains("prefill_checkpoint_alignment") &&
      cf.at("prefill_checkpoint_alignment").is_null())
    c.num_prefill_checkpoint_blocks = 0;
  return c;
}

/// The column (from 1) of the bracket at which `text` nests arrays and objects deeper than
/// kMaxJsonDepth, 0 when it does not. Brackets inside strings do not count. On the part of a
/// line that is valid JSON this is the parser's own depth, so a line that passes cannot make
/// the parser build a deeper value.
size_t too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxJsonDepth) return i + 1;
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return 0;
}

}  // namespace

bool ReferenceError::rejects_input() const {
  return type == "ValueError" || type == "TypeError" || type == "AssertionError";
}

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Line parse_line(std::string_view text, int number) {
  Line line;
  line.number = number;
  if (const size_t column = too_deep_at(text); column > 0) {
    line.error = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (column " +
                 std::to_string(column) + ")";
    return line;
  }
  try {
    line.value = json::parse(text);
  } catch (const json::parse_error& e) {
    line.error = "not valid JSON (column " + std::to_string(e.byte) + ")";
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number such as 1e999
    line.value = nullptr;
    line.error = "not valid JSON: " + cut(e.what(), 100);
  }
  return line;
}

std::vector<Line> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw CaseError("cannot open " + path);
  std::vector<Line> out;
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_line(text, number));
  }
  if (in.bad()) throw CaseError("cannot read " + path);
  return out;
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  for (auto& line : read_lines(path)) {
    if (!line.error.empty())
      throw CaseError(path + ":" + std::to_string(line.number) + ": " + line.error);
    out.push_back(std::move(line.value));
  }
  return out;
}

Case parse_case(const json& j) {
  Case c;
  c.name = to_string(member(j, "", "name"), "name");
  only_known_keys(j, "", kCaseKeys);
  c.kind = named(names::kBuilderKinds, j, "", "builder");
  const std::string mode = j.contains("mode") ? to_string(j.at("mode"), "mode") : "build";
  if (mode != "build" && mode != "capture")
    bad("mode", "'" + mode + "' is not 'build' or 'capture'");
  c.capture = mode == "capture";

  c.config = parse_config(member(j, "", "config"), c.kind);
  const json& s = member(j, "", "step");
  const std::string S = "step";
  only_known_keys(s, S, kStepKeys);
  c.seq_lens = int_list(member(s, S, "seq_lens"), "step.seq_lens");
  if (c.seq_lens.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    bad("step.seq_lens", std::to_string(c.seq_lens.size()) + " entries, more than int32 allows");
  c.num_reqs = static_cast<int32_t>(c.seq_lens.size());
  const int64_t n = c.num_reqs;
  c.qsl = int_list(member(s, S, "query_start_loc"), "step.query_start_loc", n + 1);
  c.seq_lens_ub =
      int_list(member(s, S, "seq_lens_cpu_upper_bound"), "step.seq_lens_cpu_upper_bound", n);
  c.num_actual_tokens = int_field(s, S, "num_actual_tokens");
  if (c.config.max_num_batched_tokens == 0)
    c.config.max_num_batched_tokens = std::max(c.num_actual_tokens, 1);
  const json& pre = member(s, S, "is_prefilling");
  if (!pre.is_null()) {
    if (!pre.is_array() || std::cmp_not_equal(pre.size(), n))
      bad("step.is_prefilling", "expected a list of " + std::to_string(n) + " booleans");
    for (size_t i = 0; i < pre.size(); ++i)
      c.is_prefilling.push_back(to_bool(pre[i], at_index("step.is_prefilling", i)) ? 1 : 0);
  }
  const json& drafts = member(s, S, "num_decode_draft_tokens_cpu");
  c.has_drafts = !drafts.is_null();
  if (c.has_drafts) c.drafts = int_list(drafts, "step.num_decode_draft_tokens_cpu", n);
  const json& accepted = member(s, S, "num_accepted_tokens");
  c.has_accepted = !accepted.is_null();
  if (c.has_accepted) c.accepted = int_list(accepted, "step.num_accepted_tokens", n);

  c.multi_group = s.contains("groups");
  if (c.multi_group) {
    const json& groups = s.at("groups");
    if (!groups.is_array() || groups.empty())
      bad("step.groups", "expected a non-empty list of block tables");
    for (size_t g = 0; g < groups.size(); ++g) {
      int32_t w = 0;
      c.tables.push_back(table(groups[g], at_index("step.groups", g), c.num_reqs, w));
      if (g > 0 && w != c.width)
        bad(at_index("step.groups", g),
            "width " + std::to_string(w) + ", group 0 has " + std::to_string(c.width));
      c.width = w;
    }
    // Optional beside the groups; when there, it is group 0's table.
    if (s.contains("block_table") && s.at("block_table") != groups.at(0))
      bad("step.block_table", "differs from step.groups[0]");
  } else {
    c.tables.push_back(table(member(s, S, "block_table"), "step.block_table", c.num_reqs, c.width));
  }

  const bool has_expected = j.contains("expected"), has_error = j.contains("error");
  if (has_expected && has_error) bad("", "has both 'expected' and 'error'");
  if (j.contains("expected_groups") && !(has_expected && c.multi_group))
    bad("expected_groups", "only with step.groups and 'expected'");
  if (!has_expected && !has_error) return c;  // a step alone (linmeta-stepgen): run, not check
  if (has_error) {
    const json& e = j.at("error");
    only_known_keys(e, "error", kErrorKeys);
    for (const char* info : {"where", "line"})  // the raise site: for the reader, not compared
      if (e.is_object() && e.contains(info)) (void)to_string(e.at(info), field_path("error", info));
    c.error = ReferenceError{
        to_string(member(e, "error", "type"), "error.type"),
        e.contains("message") ? to_string(e.at("message"), "error.message") : std::string()};
    return c;
  }
  c.expected = j.at("expected");
  if (!c.expected.is_object()) bad("expected", "expected an object, got " + shown(c.expected));
  if (c.multi_group) {
    const json& eg = member(j, "", "expected_groups");
    if (!eg.is_array() || eg.size() != c.tables.size())
      bad("expected_groups",
          "expected one object per group (" + std::to_string(c.tables.size()) + ")");
    for (size_t g = 0; g < eg.size(); ++g) {
      if (!eg[g].is_object())
        bad(at_index("expected_groups", g), "expected an object, got " + shown(eg[g]));
      c.expected_groups.push_back(eg[g]);
    }
    if (eg.at(0) != c.expected) bad("expected", "differs from expected_groups[0]");
  } else {
    c.expected_groups.push_back(c.expected);
  }
  return c;
}

json config_json(const Config& c) {
  json j = json::object();
  for_each_config_field(c, [&](const char* key, const auto& member) {
    const std::string k = key;
    // Not in case files: the token capacity comes from the step, chunk metadata from the
    // builder; the profile's options only with the profile, Mamba2's chunk size with Mamba2.
    if (derived_config_field(k)) return;
    if (c.profile == Profile::Seed && (k == "profile" || k == "prefill_backend")) return;
    if (k == "chunk_size" && c.chunk_size == 0) return;
    // Absent: the builder's default grid (null would be vLLM's None: no checkpoints).
    if (k == "prefill_checkpoint_alignment" && c.prefill_checkpoint_alignment == 0) return;
    j[k] = config_value(member);
  });
  return j;
}

json to_json(const Metadata& m, BuilderKind kind) {
  const Target t = m.target;
  json j = json::object();
  for_each_field(m, kind, [&](const OutputSpec& spec, const FieldRef& r) {
    // Where the field goes: a dotted name nests; vLLM's nums_dict is keyed by BLOCK_M.
    std::string name = spec.name;
    constexpr std::string_view kNumsDict = "nums_dict.";
    if (name.starts_with(kNumsDict))
      name =
          std::string(kNumsDict) + std::to_string(kConvBlock) + name.substr(kNumsDict.size() - 1);
    std::replace(name.begin(), name.end(), '.', '/');
    const std::string path = "/" + name;
    const json::json_pointer at(path);
    switch (r.type) {
      case FieldType::Count:
        j[at] = r.count();
        break;
      case FieldType::OptionalInt:
        j[at] = r.present() ? json(*r.optional_int()) : json(nullptr);
        break;
      case FieldType::Flag:
        j[at] = r.flag();
        break;
      case FieldType::Composite:
        j[at] = r.present() ? json::object() : json(nullptr);
        break;
      case FieldType::Table:  // the caller's block table: not recorded
        break;
      case FieldType::Array: {
        const Array& a = r.array();
        j[at] = array_json(a, spec.host_memory() ? Target::Host : t);
        if (!a.present || spec.shape == Shape::List) break;  // a list has no dtype
        j[json::json_pointer(path + "__dtype")] = dtype_name(a.dtype);
        if (a.ndim == 2 && a.rows == 0)
          j[json::json_pointer(path + "__shape")] = json::array({0, a.cols});
        break;
      }
    }
  });
  return j;
}

std::vector<json> run_case(const Case& c, Target target, bool independent) {
  Inputs in(c, target);
  Step s;
  s.num_reqs = c.num_reqs;
  s.num_actual_tokens = c.num_actual_tokens;
  s.query_start_loc_cpu = c.qsl;
  s.seq_lens_cpu_upper_bound = c.seq_lens_ub;
  if (!c.is_prefilling.empty())
    s.is_prefilling = {reinterpret_cast<const bool*>(c.is_prefilling.data()),
                       c.is_prefilling.size()};
  if (c.has_drafts) s.num_decode_draft_tokens = c.drafts;
  s.query_start_loc = in.qsl_;
  s.seq_lens = in.seq_lens_;
  s.num_accepted_tokens = in.accepted_;
  std::vector<BlockTable> tables;
  for (const auto* t : in.tables_) tables.push_back({t, c.width, c.width});
  s.block_table = tables[0];

  BuilderOptions opt;
  opt.target = target;
  std::vector<json> out;
  auto finish = [&](const Metadata& m) {
    if (target == Target::Cuda) cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    out.push_back(to_json(m, c.kind));
  };
  if (independent || tables.size() == 1) {
    for (const auto& t : tables) {
      MetadataBuilder b(c.kind, c.config, opt);
      s.block_table = t;
      finish(c.capture ? b.build_for_cudagraph_capture(s) : b.build(s));
    }
  } else {
    opt.num_groups = static_cast<int32_t>(tables.size());
    MetadataBuilder b(c.kind, c.config, opt);
    auto ms =
        c.capture ? b.build_groups_for_cudagraph_capture(s, tables) : b.build_groups(s, tables);
    for (const auto& m : ms) finish(m);
  }
  return out;
}

namespace {

bool annotation(const std::string& key) {
  const auto ends = [&](std::string_view suffix) {
    return key.size() > suffix.size() &&
           key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends("__dtype") || ends("__shape");
}

/// Nested objects (composites): every member the case records must match; members it does
/// not record are not compared (the seed cases record two of a checkpoint's six).
bool same_recorded(const json& expected, const json& got) {
  if (!expected.is_object() || !got.is_object()) return expected == got;
  for (auto it = expected.begin(); it != expected.end(); ++it)
    if (!got.contains(it.key()) || !same_recorded(it.value(), got.at(it.key()))) return false;
  return true;
}

}  // namespace

std::vector<Mismatch> compare(const json& expected, const json& got) {
  std::vector<Mismatch> out;
  if (!expected.is_object() || !got.is_object()) {
    out.push_back({"(all)",
                   expected.is_object() ? "an object" : shown(expected) + ", not an object",
                   got.is_object() ? "an object" : shown(got) + ", not an object"});
    return out;
  }
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    json g;
    try {
      g = it.key() == "conv1d"     ? conv1d_entry(got)
          : got.contains(it.key()) ? got.at(it.key())
                                   : json("<missing>");
    } catch (const std::exception& e) {  // got not of to_json()'s shape
      g = std::string("<") + e.what() + ">";
    }
    if (same_recorded(it.value(), g)) continue;
    if (it.key() == "flashinfer_prefill_seq_order" &&
        same_order_up_to_ties(it.value(), g,
                              expected.value("flashinfer_prefill_query_start_loc", json())))
      continue;
    out.push_back({it.key(), dumped(it.value()), dumped(g)});
  }
  // Fields the case does not record are None there (vllm-0.34 files record new fields only
  // when set; replayssm_align_block_size, an int, is 0 when unset); the seed format records the
  // conv1d arrays as `conv1d`, no dtypes, and not the host copy of the spec mask
  // (docs/case-format.md).
  for (auto it = got.begin(); it != got.end(); ++it) {
    const bool conv = it.key() == "nums_dict" || it.key() == "batch_ptr" ||
                      it.key() == "token_chunk_offset_ptr" || it.key() == "spec_sequence_masks_cpu";
    const bool unset =
        it.value().is_null() || (it.key() == "replayssm_align_block_size" && it.value() == 0);
    if (!conv && !annotation(it.key()) && !expected.contains(it.key()) && !unset)
      out.push_back({it.key(), "null (not recorded)", dumped(it.value())});
  }
  return out;
}

}  // namespace linmeta::cases

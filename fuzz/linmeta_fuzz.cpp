// libFuzzer target: decodes bytes into a builder kind, a configuration, a group count and a
// sequence of builder calls (fuzz/fuzz_program.hpp) and runs them on the host target.
//
// Oracle (any violation aborts, which libFuzzer reports as a finding):
// * no crash and no ASan / UBSan report (caller memory is sized exactly as the API
//   documents it, the padding between block-table rows is poisoned, and a step's device
//   arrays are freed right after its build, so a later read of them is a report);
// * linmeta::Error is the only exception that escapes the library, and never
//   linmeta::InternalError (a broken invariant of linmeta itself);
// * validate_config and the constructor agree; the constructor rejects exactly the group
//   counts outside 1..kMaxNumGroups;
// * after a throw, the metadata the builder returned last is unchanged and every byte
//   behind its views is unchanged ("nothing is written");
// * a successful build, build_groups or update_block_table makes no heap allocation on
//   the thread that runs it;
// * counts lie in [0, num_reqs] rows and [0, num_actual_tokens] tokens (sums included);
// * every group's metadata of build_groups equals a single-group build of the same step with
//   that group's table (another builder, field by field through the output table, values
//   read back), and build_groups rejects a step iff one of those single-group builds does;
// * update_block_table refuses metadata of any step but the last built one (an earlier step,
//   another builder, a blank or tampered step_id) and group numbers out of range, writing
//   nothing; when it accepts, it writes only that group's Scope::Group rows, and its result
//   equals a fresh single-group build of the same step with the new table (which rejects
//   the table iff update_block_table does).
#include <sanitizer/allocator_interface.h>
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_program.hpp"
#include "linmeta/linmeta.hpp"
#include "metadata_views.hpp"
#include "src/buffer_layout.hpp"
#include "src/capacity.hpp"

namespace linmeta::fuzz {
namespace {

// A builder whose buffers, plans and arena would exceed this is validated but not built
// (exec speed and RSS; two builders of the configuration live at once).
constexpr int64_t kMaxBuilderBytes = int64_t{4} << 20;
constexpr int64_t kMaxTableElements = int64_t{1} << 16;  // all tables of one call
constexpr int32_t kMaxWidth = 512;
constexpr int32_t kMaxStridePad = 16;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "linmeta_fuzz: FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// ---- heap allocations inside a call ---------------------------------------------
// Counted per thread: only allocations made by the thread that runs the call. libFuzzer's
// RSS thread (and any other thread) may allocate at any time; with a process-wide counter
// those were charged to the build that happened to be running (spurious findings).

constinit thread_local bool t_counting = false;
constinit thread_local int64_t t_allocs = 0;

void on_malloc(const volatile void*, size_t) {
  if (t_counting) ++t_allocs;
}
void on_free(const volatile void*) {}

/// LINMETA_FUZZ_ALLOC_NOISE=1: a thread that allocates all the time, as libFuzzer's RSS
/// thread may: the target must report nothing more (docs/fuzzing.md: the check of item 13).
[[noreturn]] void allocation_noise() {
  for (;;) {
    std::unique_ptr<int> p(new int(1));
    std::this_thread::yield();
  }
}

class CountAllocations {
 public:
  CountAllocations() {
    t_allocs = 0;
    t_counting = true;
  }
  ~CountAllocations() { t_counting = false; }
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;
  [[nodiscard]] int64_t allocations() const { return t_allocs; }
};

// ---- statistics (LINMETA_FUZZ_STATS=1: printed at exit) ---------------------------

bool g_stats = false;
bool g_trace = false;  ///< LINMETA_FUZZ_TRACE=1: every call and its outcome on stderr

[[gnu::format(printf, 1, 2)]] void trace(const char* format, ...) {
  if (!g_trace) return;
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
}
std::map<std::string, int64_t>& stats() {
  static auto* m = new std::map<std::string, int64_t>;
  return *m;
}
void stat(const std::string& what) {
  if (g_stats) ++stats()[what];
}
void stat(const char* what) {
  if (g_stats) ++stats()[what];
}
void print_stats() {
  std::fprintf(stderr, "linmeta_fuzz stats:\n");
  for (const auto& [k, v] : stats())
    std::fprintf(stderr, "  %10lld  %s\n", (long long)v, k.c_str());
}

/// Runs f; true when it throws linmeta::Error. An InternalError is a finding, any other
/// exception escapes (libFuzzer reports it).
template <class F>
bool rejects(F&& f, const char* what) {
  try {
    f();
  } catch (const InternalError& e) {
    finding(std::string(what) + " threw linmeta::InternalError: " + e.what());
  } catch (const Error& e) {
    trace("    %s rejects: %s\n", what, e.what());
    return true;
  }
  trace("    %s accepts\n", what);
  return false;
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// ---- caller memory --------------------------------------------------------------

int32_t wrap_add(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

/// A [rows, width] table with row_stride >= width: exactly (rows - 1) * stride + width
/// elements, the padding columns of every row poisoned.
class Table {
 public:
  Table(int32_t rows, int32_t width, int64_t stride, int32_t salt, bool null)
      : width_(width), stride_(stride), null_(null) {
    if (null || width < 1 || stride < width || stride > INT32_MAX) return;  // rejected: not read
    const int64_t n = (rows - 1) * stride + width;
    // 8-byte aligned rows (even stride) so that the poisoned padding is exact.
    data_.reset(new int32_t[static_cast<size_t>(n)]);
    size_ = n;
    for (int32_t r = 0; r < rows; ++r)  // entry (r, c) = (1000 r + c) ^ salt; padding unset
      for (int32_t c = 0; c < width; ++c)
        data_[static_cast<size_t>(r * stride + c)] = (1000 * r + c) ^ salt;
    for (int32_t r = 0; r + 1 < rows; ++r)
      ASAN_POISON_MEMORY_REGION(data_.get() + r * stride + width,
                                static_cast<size_t>(stride - width) * sizeof(int32_t));
  }
  ~Table() {
    if (data_) ASAN_UNPOISON_MEMORY_REGION(data_.get(), static_cast<size_t>(size_) * 4);
  }
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  void add_to(CallerMemory& m) const {
    m.add(data_.get(), static_cast<size_t>(size_) * sizeof(int32_t));
  }
  [[nodiscard]] BlockTable view() const {
    // An invalid table keeps a non-null pointer unless asked: it is never read.
    static const int32_t kDummy = 0;
    return {null_ ? nullptr : (data_ ? data_.get() : &kDummy), width_, stride_};
  }

 private:
  std::unique_ptr<int32_t[]> data_;
  int64_t size_ = 0;
  int32_t width_;
  int64_t stride_;
  bool null_;
};

using Tables = std::vector<std::unique_ptr<Table>>;

/// `count` tables of `rows` rows: widths and strides bounded so the harness never lies about
/// the memory behind a pointer, except for a stride pad of INT32_MIN: a row stride above
/// INT32_MAX, which validation must reject before anything reads the table.
Tables make_tables(const FuzzTable& t, int32_t rows, int32_t count, bool null) {
  const int64_t per_table = kMaxTableElements / std::max(count, 1);
  Tables out;
  for (int32_t g = 0; g < count; ++g) {
    const int64_t w =
        std::clamp<int64_t>(t.width + static_cast<int64_t>(g) * t.width_step, INT32_MIN, INT32_MAX);
    int32_t width = std::min(static_cast<int32_t>(w), kMaxWidth);
    int64_t pad = std::clamp(t.stride_pad, -1, kMaxStridePad);
    if (t.stride_pad == INT32_MIN) {
      pad = (int64_t{1} << 40) + (t.salt & 0xFFFF);
    } else if (width > 0 && pad >= 0) {
      pad += (width + pad) % 2;  // even stride: 8-byte aligned rows
      while (width > 1 && static_cast<int64_t>(rows) * (width + pad) > per_table) width /= 2;
    }
    out.push_back(
        std::make_unique<Table>(rows, width, width + pad, wrap_add(t.salt, 7919 * g), null));
  }
  return out;
}

std::vector<BlockTable> views_of(const Tables& tables) {
  std::vector<BlockTable> v;
  for (const auto& t : tables) v.push_back(t->view());
  return v;
}

size_t skewed(size_t n, int32_t skew) {
  const int64_t v = static_cast<int64_t>(n) + std::clamp(skew, -2, 2);
  return static_cast<size_t>(std::max<int64_t>(v, 0));
}

/// Host and "device" arrays of one build call; the device arrays are exactly as long as the
/// API says (num_reqs, num_reqs + 1) and take any int32 value.
struct StepArrays {
  std::vector<int32_t> qsl, seq_ub, drafts;
  std::vector<uint8_t> prefilling;
  std::unique_ptr<int32_t[]> seq_lens, accepted, device_qsl;
  int32_t num_reqs = 0;
  int32_t num_actual_tokens = 0;
  size_t rows = 0;  ///< of the device arrays
  bool has_prefilling = false, has_drafts = false, null_seq_lens = false;

  /// Whether a device value lies outside [-2^30, 2^30] (the old harness's limit).
  [[nodiscard]] bool beyond_2_30() const {
    auto beyond = [&](const int32_t* a) {
      if (a == nullptr) return false;
      for (size_t r = 0; r < rows; ++r)
        if (a[r] < -(1 << 30) || a[r] > (1 << 30)) return true;
      return false;
    };
    return beyond(null_seq_lens ? nullptr : seq_lens.get()) || beyond(accepted.get());
  }

  /// Records the memory of every array of the step and that of `tables` in `m` (host arrays
  /// too: a builder may hand one back, e.g. PLE ShortConv the draft counts).
  void add_to(CallerMemory& m, const Tables& tables) const {
    m.add(seq_lens.get(), rows * sizeof(int32_t));
    m.add(accepted.get(), rows * sizeof(int32_t));
    m.add(device_qsl.get(), (rows + 1) * sizeof(int32_t));
    m.add(qsl.data(), qsl.size() * sizeof(int32_t));
    m.add(seq_ub.data(), seq_ub.size() * sizeof(int32_t));
    m.add(drafts.data(), drafts.size() * sizeof(int32_t));
    m.add(prefilling.data(), prefilling.size());
    for (const auto& t : tables) t->add_to(m);
  }

  [[nodiscard]] Step step(const BlockTable& table) const {
    Step s;
    s.num_reqs = num_reqs;
    s.num_actual_tokens = num_actual_tokens;
    s.query_start_loc_cpu = qsl;
    s.seq_lens_cpu_upper_bound = seq_ub;
    if (has_prefilling)
      s.is_prefilling = {reinterpret_cast<const bool*>(prefilling.data()), prefilling.size()};
    if (has_drafts) s.num_decode_draft_tokens = drafts;
    s.query_start_loc = device_qsl.get();
    s.seq_lens = null_seq_lens ? nullptr : seq_lens.get();
    s.num_accepted_tokens = accepted.get();
    s.block_table = table;
    return s;
  }
};

std::unique_ptr<StepArrays> make_arrays(const FuzzCall& k) {
  auto m = std::make_unique<StepArrays>();
  const size_t n = rows_of(k.num_reqs);
  m->num_reqs = k.num_reqs;
  m->rows = n;
  m->qsl.resize(skewed(n + 1, k.qsl_len_skew));
  int32_t q = k.qsl0;
  for (size_t r = 0; r < m->qsl.size(); ++r) {
    m->qsl[r] = q;
    q = wrap_add(q, r < n ? k.qsl_steps[r] : 0);
  }
  m->num_actual_tokens = wrap_add(m->qsl.empty() ? 0 : m->qsl.back(), k.tokens_extra);
  m->seq_ub.resize(skewed(n, k.ub_len_skew));
  for (size_t r = 0; r < m->seq_ub.size(); ++r) m->seq_ub[r] = r < n ? k.seq_ub[r] : 0;
  m->has_prefilling = (k.flags & FuzzCall::HasPrefilling) != 0;
  if (m->has_prefilling) {
    m->prefilling.resize(skewed(n, k.prefilling_len_skew));
    for (size_t r = 0; r < m->prefilling.size(); ++r)
      m->prefilling[r] = r < n ? (k.prefilling[r] & 1) : 0;
  }
  m->has_drafts = (k.flags & FuzzCall::HasDrafts) != 0;
  if (m->has_drafts) {
    m->drafts.resize(skewed(n, k.drafts_len_skew));
    for (size_t r = 0; r < m->drafts.size(); ++r) m->drafts[r] = r < n ? k.drafts[r] : -1;
  }
  // Device arrays: the full int32 range (the finish step computes in 64 bits).
  static constexpr int32_t kExtreme[] = {INT32_MIN, INT32_MIN + 1, -1,       0,
                                         1,         INT32_MAX - 1, INT32_MAX};
  const bool extreme = (k.flags & FuzzCall::ExtremeDevice) != 0;
  auto pick = [&](size_t r, size_t shift) {
    return kExtreme[(r + shift + static_cast<uint32_t>(k.seq_ub[r])) % 7];
  };
  m->seq_lens.reset(new int32_t[n]);
  for (size_t r = 0; r < n; ++r)
    m->seq_lens[r] = extreme ? pick(r, 0)
                     : (k.flags & FuzzCall::DeviceSeqDiffers)
                         ? wrap_add(k.seq_ub[r], k.seq_delta[r])
                         : k.seq_ub[r];
  m->null_seq_lens = (k.flags & FuzzCall::NullSeqLens) != 0;
  if (k.flags & FuzzCall::HasAccepted) {
    m->accepted.reset(new int32_t[n]);
    for (size_t r = 0; r < n; ++r) m->accepted[r] = extreme ? pick(r, 3) : k.accepted[r];
  }
  if (!(k.flags & FuzzCall::NullDeviceQsl)) {  // the host values (linmeta never reads them)
    m->device_qsl.reset(new int32_t[n + 1]);
    for (size_t r = 0; r <= n; ++r)
      m->device_qsl[r] = m->qsl.empty() ? 0 : m->qsl[std::min(r, m->qsl.size() - 1)];
  }
  return m;
}

// ---- the oracle -----------------------------------------------------------------

/// What a caller can observe of the last successful build: the metadata and the bytes
/// behind every view the builder owns.
class Snapshot {
 public:
  explicit Snapshot(BuilderKind kind) : kind_(kind) {}

  /// Reads every view (ASan checks each extent).
  void take(std::span<const Metadata> ms, const CallerMemory& caller) {
    metadata_.assign(ms.begin(), ms.end());
    saved_.clear();
    for (size_t g = 0; g < metadata_.size(); ++g)
      for_each_view(
          metadata_[g], kind_, caller, [&](const OutputSpec& spec, const void* data, int64_t n) {
            const auto* p = static_cast<const uint8_t*>(data);
            saved_.push_back({static_cast<int32_t>(g), &spec, p, std::vector<uint8_t>(p, p + n)});
          });
  }
  /// Everything unchanged, except the Scope::Group rows of group `rewritten` (-1: none).
  void expect_unchanged(std::span<const Metadata> live, const char* after,
                        int32_t rewritten = -1) const {
    if (metadata_.empty()) return;
    if (live.size() != metadata_.size())
      finding(std::string(after) + " changed the number of metadata the last build returned");
    for (size_t g = 0; g < metadata_.size(); ++g)
      if (!(metadata_[g] == live[g]))
        finding(std::string(after) + " changed the metadata of the last build (group " +
                std::to_string(g) + ")");
    for (const Saved& s : saved_) {
      if (s.group == rewritten && s.spec->scope == Scope::Group) continue;
      if (std::memcmp(s.at, s.bytes.data(), s.bytes.size()) != 0)
        finding(std::string(after) + " wrote into " + s.spec->name + " of group " +
                std::to_string(s.group) + " of the last build");
    }
  }

 private:
  struct Saved {
    int32_t group;
    const OutputSpec* spec;
    const uint8_t* at;
    std::vector<uint8_t> bytes;
  };
  BuilderKind kind_;
  std::vector<Metadata> metadata_;
  std::vector<Saved> saved_;
};

void check_counts(const Metadata& m, const Step& s, BuilderKind kind) {
  const int64_t rows[] = {m.num_prefills, m.num_decodes, m.num_spec_decodes};
  const int64_t tokens[] = {m.num_prefill_tokens, m.num_decode_tokens, m.num_spec_decode_tokens};
  int64_t row_sum = 0, token_sum = 0;
  for (int64_t v : rows) {
    if (v < 0 || v > s.num_reqs) finding("a row count is outside [0, num_reqs]");
    row_sum += v;
  }
  for (int64_t v : tokens) {
    if (v < 0 || v > s.num_actual_tokens)
      finding("a token count is outside [0, num_actual_tokens]");
    token_sum += v;
  }
  if (row_sum > s.num_reqs) finding("the row counts add up to more than num_reqs");
  if (token_sum > s.num_actual_tokens)
    finding("the token counts add up to more than num_actual_tokens");
  if (is_gdn_family(kind) && m.num_actual_tokens != s.num_actual_tokens)
    finding("num_actual_tokens differs from the step");
  if (is_mamba_base(kind) && m.num_reqs != s.num_reqs) finding("num_reqs differs from the step");
}

/// Whether a valid configuration is small enough to construct here (two builders at once).
bool small_enough(const Config& c, BuilderKind kind, int32_t groups) {
  const detail::Capacity cap = detail::Capacity::of(c, kind);
  const detail::BufferLayout layout =
      detail::BufferLayout::of(cap, kind, c.full_cuda_graph, groups);
  // Plan storage (two, plus the one sizing the arena) and the arena: about the same words.
  const int64_t plan_words = 19 * static_cast<int64_t>(cap.rows) +
                             3 * static_cast<int64_t>(cap.conv_total) +
                             2 * static_cast<int64_t>(cap.mamba_chunks) + 64;
  return layout.total_bytes() + 4 * 4 * plan_words <= kMaxBuilderBytes;
}

void stat_fields(const char* what, const Metadata& m, BuilderKind kind) {
  if (!g_stats) return;
  for_each_field(m, kind, [&](const OutputSpec& spec, const FieldRef& r) {
    if (!r.present()) return;
    if (r.type == FieldType::Array && r.array().size() == 0) return;
    if (r.type == FieldType::Count && r.count() == 0) return;
    if (r.type == FieldType::Flag && !r.flag()) return;
    stat(std::string(what) + " field " + spec.name);
  });
}

std::string config_name(BuilderKind kind, const Config& c) {
  return std::string(names::builder_kind_name(kind)) + " " +
         std::string(names::profile_name(c.profile)) + " " +
         std::string(names::prefill_backend_name(c.prefill_backend)) + " " +
         std::string(names::cache_mode_name(c.mamba_cache_mode));
}

const char* given_name(Given g) {
  static const char* const kNames[] = {"current",       "other group", "previous", "blank",
                                       "other builder", "tampered",    "forged"};
  return kNames[static_cast<int>(g)];
}

/// One program's builder, the reference builder (same kind and configuration, one group)
/// and what the oracle remembers between calls.
class Session {
 public:
  Session(BuilderKind kind, const Config& c, MetadataBuilder& b)
      : kind_(kind), config_(c), b_(b), groups_(b.num_groups()), snap_(kind) {
    // Before any step array exists: builder memory never reuses a freed step array's address
    // (caller_ tells the two apart by address).
    if (rejects(
            [&] {
              ref_.emplace(kind_, config_, BuilderOptions{Target::Host, 1});
            },
            "the reference builder's constructor"))
      finding("the constructor rejects a configuration with one group that it accepts with " +
              std::to_string(groups_));
  }

  void call(const FuzzCall& k) {
    if (k.op == Op::Update)
      update(k);
    else if (k.op == Op::Move)
      move_builder();
    else
      build(k);
  }

 private:
  /// The step's arrays, recorded as caller memory for the rest of the program.
  std::unique_ptr<StepArrays> arrays_of(const FuzzCall& k, const Tables& tables) {
    auto a = make_arrays(k);
    a->add_to(caller_, tables);
    return a;
  }

  /// A single-group build on the reference builder; null when rejected.
  const Metadata* ref_build(const Step& s, bool capture) {
    MetadataBuilder& r = *ref_;
    const Metadata* out = nullptr;
    const bool rejected = rejects(
        [&] {
          CountAllocations count;
          out = capture ? &r.build_for_cudagraph_capture(s) : &r.build(s);
          if (count.allocations() != 0) finding("a successful build allocated on the heap");
        },
        "a reference build");
    if (rejected) return nullptr;
    other_ = *out;
    return out;
  }

  void build(const FuzzCall& k) {
    const bool groups = k.op == Op::BuildGroups || k.op == Op::CaptureGroups;
    const bool capture = k.op == Op::Capture || k.op == Op::CaptureGroups;
    const auto rows = static_cast<int32_t>(rows_of(k.num_reqs));
    const int32_t count =
        groups ? std::clamp(groups_ + std::clamp(k.tables_skew, -2, 2), 0, kMaxNumGroups + 2) : 1;
    const Tables tables = make_tables(k.table, rows, count, (k.flags & FuzzCall::NullTable) != 0);
    const auto arrays = arrays_of(k, tables);
    const std::vector<BlockTable> views = views_of(tables);
    const Step step = arrays->step(views.empty() ? BlockTable{} : views[0]);
    auto group_step = [&](size_t g) { return arrays->step(views[g]); };

    if (g_trace) {
      trace("%s num_reqs=%d num_actual_tokens=%d flags=%d\n  qsl=%s\n  seq_ub=%s\n",
            k.op == Op::Build         ? "build"
            : k.op == Op::Capture     ? "capture"
            : k.op == Op::BuildGroups ? "build_groups"
                                      : "capture_groups",
            k.num_reqs, arrays->num_actual_tokens, k.flags, list(arrays->qsl).c_str(),
            list(arrays->seq_ub).c_str());
      trace(
          "  seq_lens=%s\n  prefilling=%s drafts=%s accepted=%s\n",
          list(std::vector<int32_t>(arrays->seq_lens.get(), arrays->seq_lens.get() + arrays->rows))
              .c_str(),
          list(arrays->prefilling).c_str(), list(arrays->drafts).c_str(), list(k.accepted).c_str());
      for (const BlockTable& t : views)
        trace("  table width=%d row_stride=%lld%s\n", t.width, static_cast<long long>(t.row_stride),
              t.data == nullptr ? " null" : "");
    }
    std::span<const Metadata> got;
    const bool rejected = rejects(
        [&] {
          CountAllocations count;
          switch (k.op) {
            case Op::Build:
              got = {&b_.build(step), 1};
              break;
            case Op::Capture:
              got = {&b_.build_for_cudagraph_capture(step), 1};
              break;
            case Op::BuildGroups:
              got = b_.build_groups(step, views);
              break;
            default:
              got = b_.build_groups_for_cudagraph_capture(step, views);
              break;
          }
          if (count.allocations() != 0) finding("a successful build allocated on the heap");
        },
        "a build");
    if (rejected) {
      if (g_stats) stat("build rejected");
      snap_.expect_unchanged(live_, "a rejected build");
      // With one table per group, a rejected step is one some group's single build rejects.
      if (static_cast<int32_t>(views.size()) == groups_) {
        bool any = false;
        for (size_t g = 0; g < views.size() && !any; ++g)
          any = ref_build(group_step(g), capture) == nullptr;
        if (!any)
          finding(
              "a build rejects a step that a single-group build accepts with every group's "
              "table");
      }
      return;
    }
    if (g_stats)
      stat("build accepted " + config_name(kind_, config_) + (groups ? " groups" : "") +
           (capture ? " capture" : ""));
    if (g_stats && arrays->beyond_2_30()) stat("build accepted with device values beyond +-2^30");
    if (got.size() != static_cast<size_t>(groups_)) finding("a build returned a wrong group count");
    for (const Metadata& m : got) check_counts(m, step, kind_);
    for (size_t g = 0; g < got.size(); ++g) {
      const Metadata* single = ref_build(group_step(g), capture);
      if (single == nullptr)
        finding("a single-group build rejects group " + std::to_string(g) +
                "'s table, which the build accepted");
      const std::string diff = first_difference(got[g], caller_, *single, caller_, kind_, true);
      if (!diff.empty())
        finding("group " + std::to_string(g) +
                " differs from its single-group build of the same step: " + diff);
      stat_fields("build", got[g], kind_);
    }
    if (got.size() > 1 && g_stats) stat("build_groups equal to single-group builds");
    previous_ = std::move(current_);
    current_.assign(got.begin(), got.end());
    live_ = got;
    snap_.take(live_, caller_);
    last_call_ = k;
    last_capture_ = capture;
    // The step's device arrays and tables are released here: metadata views into them
    // (seq_lens, query_start_loc, recoverssm_commit.align.block_table) are never read again.
  }

  /// Every call on a moved-from builder throws linmeta::Error.
  static void expect_moved_from(MetadataBuilder& m, const char* which) {
    const Step s{};
    const BlockTable t{};
    auto must = [&](const char* call, auto&& f) {
      if (!rejects(f, call)) finding(std::string(call) + " on " + which + " did not throw");
    };
    must("build", [&] { m.build(s); });
    must("build_for_cudagraph_capture", [&] { m.build_for_cudagraph_capture(s); });
    must("build_groups", [&] { m.build_groups(s, {&t, 1}); });
    must("build_groups_for_cudagraph_capture", [&] {
      m.build_groups_for_cudagraph_capture(s, {&t, 1});
    });
    must("update_block_table", [&] { m.update_block_table(Metadata{}, t); });
    must("config", [&] { static_cast<void>(m.config()); });
    must("kind", [&] { static_cast<void>(m.kind()); });
    must("target", [&] { static_cast<void>(m.target()); });
    must("num_groups", [&] { static_cast<void>(m.num_groups()); });
    must("last_timing", [&] { static_cast<void>(m.last_timing()); });
    must("last_upload_bytes", [&] { static_cast<void>(m.last_upload_bytes()); });
    must("last_launch_param_bytes", [&] { static_cast<void>(m.last_launch_param_bytes()); });
    must("pinned_bytes", [&] { static_cast<void>(m.pinned_bytes()); });
    must("buffer_bytes", [&] { static_cast<void>(m.buffer_bytes()); });
    must("impl", [&] { static_cast<void>(m.impl()); });
  }

  /// Moves the builder out (construction) and back (assignment): the builder and the
  /// metadata it returned are unaffected; both moved-from builders throw on every call.
  void move_builder() {
    trace("move the builder out and back\n");
    MetadataBuilder moved(std::move(b_));
    expect_moved_from(b_, "a moved-from builder");
    b_ = std::move(moved);
    expect_moved_from(moved, "a builder moved from by assignment");
    if (b_.num_groups() != groups_ || b_.kind() != kind_) finding("moving the builder changed it");
    snap_.expect_unchanged(live_, "moving the builder");
  }

  void update(const FuzzCall& k) {
    if (live_.empty()) {
      const Tables t = make_tables(k.table, 1, 1, false);
      if (!rejects([&] { b_.update_block_table(Metadata{}, t[0]->view(), k.group); },
                   "update_block_table"))
        finding("update_block_table accepted a call before any build");
      return;
    }
    const auto rows = static_cast<int32_t>(rows_of(last_call_->num_reqs));
    const Tables tables = make_tables(k.table, rows, 1, false);
    tables[0]->add_to(caller_);
    const BlockTable table = tables[0]->view();
    const auto n = static_cast<int32_t>(live_.size());
    const bool in_range = k.group >= 0 && k.group < groups_;
    const int32_t pick = in_range ? k.group : 0;
    Metadata given = current_[static_cast<size_t>(pick)];
    bool foreign = false;  // metadata of another step: must be rejected
    bool forged = false;
    switch (k.given) {
      case Given::Current:
      case Given::Count:
        break;
      case Given::OtherGroup:
        given = current_[static_cast<size_t>((pick + 1) % n)];
        break;
      case Given::Previous:
        given = previous_.empty() ? Metadata{}
                                  : previous_[static_cast<size_t>(pick) % previous_.size()];
        foreign = true;
        break;
      case Given::Blank:
        given = Metadata{};
        foreign = true;
        break;
      case Given::OtherBuilder:
        given = other_ ? *other_ : Metadata{};
        foreign = true;
        break;
      case Given::Tampered:
        given.step_id = k.tamper == 0 ? 0 : given.step_id + static_cast<uint64_t>(k.tamper);
        foreign = true;
        break;
      case Given::Forged:
        if (!previous_.empty()) {
          given = previous_[static_cast<size_t>(pick) % previous_.size()];
          given.step_id = current_[static_cast<size_t>(pick)].step_id;
          forged = true;
        }
        break;
    }
    const Metadata given_copy = given;
    trace("update_block_table group=%d given=%s tamper=%d table width=%d row_stride=%lld\n",
          k.group, given_name(k.given), k.tamper, table.width,
          static_cast<long long>(table.row_stride));
    std::optional<Metadata> out;
    const bool rejected = rejects(
        [&] {
          CountAllocations count;
          out.emplace(b_.update_block_table(given, table, k.group));
          if (count.allocations() != 0) finding("update_block_table allocated on the heap");
        },
        "update_block_table");
    if (!(given == given_copy)) finding("update_block_table changed the metadata it was given");
    if (rejected) {
      if (g_stats)
        stat(std::string("update rejected: ") + given_name(k.given) +
             (in_range ? "" : " (group out of range)"));
      snap_.expect_unchanged(live_, "a rejected update_block_table");
      if (!foreign && !forged && in_range) {
        // A fresh build of the same step must reject this table too.
        const auto arrays = arrays_of(*last_call_, tables);
        if (ref_build(arrays->step(table), last_capture_) != nullptr)
          finding("update_block_table rejects a table that a build of the same step accepts");
      }
      return;
    }
    if (foreign)
      finding(std::string("update_block_table accepted metadata of another step (given: ") +
              given_name(k.given) + ")");
    if (!in_range) finding("update_block_table accepted group " + std::to_string(k.group));
    if (g_stats) stat(std::string("update accepted: ") + given_name(k.given));
    snap_.expect_unchanged(live_, "update_block_table", k.group);
    Snapshot read(kind_);
    read.take({&*out, 1}, caller_);  // reads every view of the result
    if (!forged) {
      const auto arrays = arrays_of(*last_call_, tables);
      const Metadata* fresh = ref_build(arrays->step(table), last_capture_);
      if (fresh == nullptr)
        finding("update_block_table accepts a table that a build of the same step rejects");
      const std::string diff = first_difference(*out, caller_, *fresh, caller_, kind_, false);
      if (!diff.empty())
        finding(
            "update_block_table's result differs from a build of the same step with the "
            "new table: " +
            diff);
    }
    snap_.take(live_, caller_);  // the group's gathers are rewritten in place
  }

  BuilderKind kind_;
  Config config_;
  MetadataBuilder& b_;
  int32_t groups_;
  std::optional<MetadataBuilder> ref_;  ///< the reference builder: one group
  CallerMemory caller_;  ///< every step array and table of the program so far (most freed)
  Snapshot snap_;
  std::span<const Metadata> live_;     ///< what the builder returned last
  std::vector<Metadata> current_;      ///< a copy of live_ (the builder rewrites live_ in place)
  std::vector<Metadata> previous_;     ///< what it returned the build before
  std::optional<Metadata> other_;      ///< the reference builder's last metadata
  std::optional<FuzzCall> last_call_;  ///< the last successful build (regenerated for updates)
  bool last_capture_ = false;
};

void run(const FuzzProgram& prog) {
  const FuzzConfig& fc = prog.config;
  const auto kind = static_cast<BuilderKind>(fc.kind);
  const Config& config = fc.config;
  if (g_trace) {
    std::string c;
    for_each_config_field(config, [&](const char* name, const auto& field) {
      using V = std::remove_cvref_t<decltype(field)>;
      int64_t v = 0;
      if constexpr (std::is_same_v<V, bool> || std::is_enum_v<V> || std::is_same_v<V, int32_t>)
        v = static_cast<int64_t>(field);
      else
        v = field.value;
      c += std::string(" ") + name + "=" + std::to_string(v);
    });
    trace("program: kind=%d num_groups=%d%s\n", fc.kind, fc.num_groups, c.c_str());
  }
  if (rejects([&] { validate_config(config, kind); }, "validate_config")) {
    // Invalid configurations must also fail the constructor (which validates first).
    if (!rejects([&] { MetadataBuilder b(kind, config); }, "the constructor"))
      finding("validate_config rejects a configuration the constructor accepts");
    stat("config rejected");
    return;
  }
  const int32_t groups = fc.num_groups;
  if (!small_enough(config, kind, std::clamp(groups, 1, kMaxNumGroups))) {
    stat("config too large to build here");
    return;
  }
  BuilderOptions options;
  options.target = Target::Host;
  options.num_groups = groups;
  std::optional<MetadataBuilder> builder;
  const bool rejected = rejects([&] { builder.emplace(kind, config, options); }, "the constructor");
  if (groups < 1 || groups > kMaxNumGroups) {
    if (!rejected) finding("the constructor accepts num_groups = " + std::to_string(groups));
    stat("num_groups rejected");
    return;
  }
  if (rejected) finding("the constructor rejects a configuration validate_config accepts");
  if (g_stats) stat("config built " + config_name(kind, config));
  Session session(kind, config, *builder);
  for (const FuzzCall& k : prog.calls) session.call(k);
}

}  // namespace
}  // namespace linmeta::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(linmeta::fuzz::on_malloc, linmeta::fuzz::on_free);
  const char* s = std::getenv("LINMETA_FUZZ_STATS");
  if (s != nullptr && s[0] != '\0' && s[0] != '0') {
    linmeta::fuzz::g_stats = true;
    std::atexit(linmeta::fuzz::print_stats);
  }
  const char* t = std::getenv("LINMETA_FUZZ_TRACE");
  linmeta::fuzz::g_trace = t != nullptr && t[0] != '\0' && t[0] != '0';
  const char* noise = std::getenv("LINMETA_FUZZ_ALLOC_NOISE");
  if (noise != nullptr && noise[0] != '\0' && noise[0] != '0')
    std::thread(linmeta::fuzz::allocation_noise).detach();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  linmeta::fuzz::run(linmeta::fuzz::decode(data, size));
  return 0;
}

// The fuzz input format: bytes <-> a FuzzProgram (a builder kind, a configuration, a group
// count, then a sequence of builder calls). The format is written once, as `describe()` over
// an IO that either reads (the fuzz target) or writes (the seed converter), so the two cannot
// drift. The configuration is described through linmeta's own Config field table
// (`for_each_config_field`): every Config field, present and future, is in the format.
//
// Values are raw: nothing here keeps them valid. Whatever a value would make the
// harness allocate is bounded later, by the harness (fuzz/linmeta_fuzz.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "linmeta/config.hpp"

namespace linmeta::fuzz {

/// Builder calls a program makes.
enum class Op : uint8_t {
  Build,          ///< build(step)
  Capture,        ///< build_for_cudagraph_capture(step)
  BuildGroups,    ///< build_groups(step, tables)
  CaptureGroups,  ///< build_groups_for_cudagraph_capture(step, tables)
  Update,         ///< update_block_table(metadata, table, group)
  Move,           ///< the builder moved out and back (every call on the moved-from one throws)
  Count
};

/// The metadata an update_block_table call is given.
enum class Given : uint8_t {
  Current,       ///< the last build's metadata of the group updated
  OtherGroup,    ///< the last build's metadata of the next group (the same step)
  Previous,      ///< the build before the last one's (stale: must be rejected)
  Blank,         ///< Metadata{} (step_id 0: must be rejected)
  OtherBuilder,  ///< the last metadata of another builder of the same kind (must be rejected)
  Tampered,      ///< the last build's with step_id changed by `tamper` (must be rejected)
  Forged,        ///< the build before the last one's, given the current step_id: memory safety
  Count
};

struct FuzzConfig {
  int32_t kind = 0;        ///< raw BuilderKind
  int32_t num_groups = 1;  ///< raw BuilderOptions::num_groups
  Config config;           ///< every field raw, enum values included
};

/// One block table per group: all groups share a row stride pad; group g's width is
/// width + g * width_step.
struct FuzzTable {
  int32_t width = 1;
  int32_t stride_pad = 0;  ///< row_stride = width + stride_pad (INT32_MIN: a stride > INT32_MAX)
  int32_t salt = 0;        ///< varies the entries between tables
  int32_t width_step = 0;  ///< width difference between consecutive groups
};

/// Arguments of one builder call. Step fields are used by the build ops, the
/// update fields by Op::Update.
struct FuzzCall {
  enum Flag : uint8_t {
    HasPrefilling = 1,
    HasDrafts = 2,
    HasAccepted = 4,
    DeviceSeqDiffers = 8,  ///< device seq_lens = upper bound + delta (wrapping int32)
    NullSeqLens = 16,
    NullTable = 32,
    NullDeviceQsl = 64,  ///< device query_start_loc null
    /// Device seq_lens and accepted counts from {INT32_MIN, INT32_MIN + 1, -1, 0, 1,
    /// INT32_MAX - 1, INT32_MAX} (chosen per row from the row and its upper bound)
    ExtremeDevice = 128,
  };
  Op op = Op::Build;
  uint8_t flags = 0;
  int32_t num_reqs = 1;
  int32_t qsl0 = 0;                ///< query_start_loc[0]
  std::vector<int32_t> qsl_steps;  ///< query_start_loc[r + 1] - [r] (wrapping int32)
  int32_t tokens_extra = 0;        ///< num_actual_tokens - query_start_loc[num_reqs] (wrapping)
  std::vector<int32_t> seq_ub;
  std::vector<int32_t> seq_delta;  ///< DeviceSeqDiffers
  std::vector<uint8_t> prefilling;
  std::vector<int32_t> drafts;
  std::vector<int32_t> accepted;  ///< device accepted counts, any int32
  /// Host span lengths beyond the rows (0: query_start_loc num_reqs + 1, others num_reqs).
  int32_t qsl_len_skew = 0, ub_len_skew = 0, prefilling_len_skew = 0, drafts_len_skew = 0;
  int32_t tables_skew = 0;  ///< build_groups: num_groups + skew tables
  FuzzTable table;
  // Op::Update
  int32_t group = 0;
  Given given = Given::Current;
  int32_t tamper = 0;  ///< Given::Tampered: step_id + tamper (0: step_id 0)
};

struct FuzzProgram {
  FuzzConfig config;
  std::vector<FuzzCall> calls;
};

/// Rows the harness materialises per step (bounded; num_reqs itself stays raw).
inline constexpr int32_t kMaxRows = 300;
/// Calls per program.
inline constexpr size_t kMaxCalls = 24;

// ---- value encoding ---------------------------------------------------------------
// One byte b < 0xF8 is b - 8 (-8..239); 0xF8 + 4 bytes: any int32; 0xF9 + 2 bytes:
// 0..65535; 0xFA: INT32_MAX; 0xFB: INT32_MIN; 0xFC..0xFF: b - 8 - 256 (-12..-9).

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  [[nodiscard]] bool done() const { return p_ == end_; }
  void byte(uint8_t& v) { v = next(); }
  void flag(bool& v) { v = (next() & 1) != 0; }
  void value(int32_t& v) {
    const uint8_t b = next();
    if (b < 0xF8) {
      v = b - 8;
    } else if (b == 0xF8) {
      uint32_t u = 0;
      for (int i = 0; i < 4; ++i) u |= static_cast<uint32_t>(next()) << (8 * i);
      std::memcpy(&v, &u, 4);
    } else if (b == 0xF9) {
      v = next();
      v |= next() << 8;
    } else if (b == 0xFA) {
      v = INT32_MAX;
    } else if (b == 0xFB) {
      v = INT32_MIN;
    } else {
      v = b - 8 - 256;
    }
  }
  /// n values (n already decoded, bounded by the caller).
  template <class T>
  void array(std::vector<T>& v, size_t n) {
    v.resize(n);
    for (auto& x : v) item(x);
  }
  static constexpr bool kReading = true;

 private:
  uint8_t next() { return p_ == end_ ? 0 : *p_++; }
  void item(int32_t& x) { value(x); }
  void item(uint8_t& x) { byte(x); }
  const uint8_t* p_;
  const uint8_t* end_;
};

class Writer {
 public:
  std::vector<uint8_t> bytes;
  void byte(const uint8_t& v) { bytes.push_back(v); }
  void flag(const bool& v) { bytes.push_back(v ? 1 : 0); }
  void value(const int32_t& v) {
    if (v >= -8 && v <= 239) {
      bytes.push_back(static_cast<uint8_t>(v + 8));
    } else if (v >= 0 && v <= 0xFFFF) {
      bytes.push_back(0xF9);
      bytes.push_back(static_cast<uint8_t>(v & 0xFF));
      bytes.push_back(static_cast<uint8_t>(v >> 8));
    } else if (v == INT32_MAX) {
      bytes.push_back(0xFA);
    } else if (v == INT32_MIN) {
      bytes.push_back(0xFB);
    } else {
      bytes.push_back(0xF8);
      uint32_t u = 0;
      std::memcpy(&u, &v, 4);
      for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(u >> (8 * i)));
    }
  }
  template <class T>
  void array(std::vector<T>& v, size_t n) {
    v.resize(n);
    for (auto& x : v) item(x);
  }
  static constexpr bool kReading = false;

 private:
  void item(const int32_t& x) { value(x); }
  void item(const uint8_t& x) { byte(x); }
};

/// Rows behind a call's arrays: num_reqs, bounded to [1, kMaxRows].
[[nodiscard]] inline size_t rows_of(int32_t num_reqs) {
  return static_cast<size_t>(num_reqs < 1 ? 1 : (num_reqs > kMaxRows ? kMaxRows : num_reqs));
}

/// An enumerator byte: any byte reads as one of the `count` enumerators.
template <class IO, class E>
void enumerator(IO& io, E& e, E count) {
  auto b = static_cast<uint8_t>(e);
  io.byte(b);
  e = static_cast<E>(b % static_cast<uint8_t>(count));
}

/// One field of Config's field table: an int32, a bool, an enum (its raw int32 value:
/// values outside the enumerators are fuzzed too) or an Unsettable int32.
template <class IO, class T>
void describe_config_field(IO& io, T&& field) {
  using V = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<V, bool>) {
    io.flag(field);
  } else if constexpr (std::is_enum_v<V>) {
    auto raw = static_cast<int32_t>(field);
    io.value(raw);
    field = static_cast<V>(raw);
  } else if constexpr (std::is_same_v<V, int32_t>) {
    io.value(field);
  } else {
    io.value(field.value);  // Unsettable<int32_t>
  }
}

template <class IO>
void describe(IO& io, FuzzConfig& c) {
  io.value(c.kind);
  io.value(c.num_groups);
  for_each_config_field(c.config,
                        [&](const char*, auto&& field) { describe_config_field(io, field); });
}

template <class IO>
void describe(IO& io, FuzzTable& t) {
  io.value(t.width);
  io.value(t.stride_pad);
  io.value(t.salt);
  io.value(t.width_step);
}

template <class IO>
void describe(IO& io, FuzzCall& k) {
  enumerator(io, k.op, Op::Count);
  if (k.op == Op::Move) return;
  if (k.op == Op::Update) {
    describe(io, k.table);
    io.value(k.group);
    enumerator(io, k.given, Given::Count);
    io.value(k.tamper);
    return;
  }
  io.byte(k.flags);
  io.value(k.num_reqs);
  const size_t n = rows_of(k.num_reqs);
  io.value(k.qsl0);
  io.array(k.qsl_steps, n);
  io.value(k.tokens_extra);
  io.array(k.seq_ub, n);
  if (k.flags & FuzzCall::DeviceSeqDiffers) io.array(k.seq_delta, n);
  if (k.flags & FuzzCall::HasPrefilling) io.array(k.prefilling, n);
  if (k.flags & FuzzCall::HasDrafts) io.array(k.drafts, n);
  if (k.flags & FuzzCall::HasAccepted) io.array(k.accepted, n);
  io.value(k.qsl_len_skew);
  io.value(k.ub_len_skew);
  io.value(k.prefilling_len_skew);
  io.value(k.drafts_len_skew);
  io.value(k.tables_skew);
  describe(io, k.table);
}

/// Bytes -> program (any bytes decode; missing bytes read as 0).
inline FuzzProgram decode(const uint8_t* data, size_t size) {
  Reader in(data, size);
  FuzzProgram p;
  describe(in, p.config);
  while (!in.done() && p.calls.size() < kMaxCalls) describe(in, p.calls.emplace_back());
  return p;
}

/// Program -> bytes (what decode() reads back as the same program).
inline std::vector<uint8_t> encode(FuzzProgram p) {
  Writer out;
  describe(out, p.config);
  for (auto& k : p.calls) describe(out, k);
  return out.bytes;
}

}  // namespace linmeta::fuzz

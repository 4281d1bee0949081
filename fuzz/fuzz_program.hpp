// The fuzz input format: bytes <-> a FuzzProgram (a configuration plus a sequence of
// builder calls). The format is written once, as `describe()` over an IO that either
// reads (the fuzz target) or writes (the seed converter), so the two cannot drift.
//
// Values are raw: nothing here keeps them valid. Whatever a value would make the
// harness allocate is bounded later, by the harness (fuzz/linmeta_fuzz.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace linmeta::fuzz {

/// Builder calls a program makes.
enum class Op : uint8_t {
  Build,          ///< build(step)
  Capture,        ///< build_for_cudagraph_capture(step)
  BuildGroups,    ///< build_groups(step, tables)
  CaptureGroups,  ///< build_groups_for_cudagraph_capture(step, tables)
  Update,         ///< update_block_table(metadata, table, group)
  Count
};

struct FuzzConfig {
  enum Flag : uint8_t { Kda = 1, FullGraph = 2, ChunkMetadata = 4, RecoverSsm = 8 };
  uint8_t flags = ChunkMetadata;
  int32_t num_spec = 0;
  int32_t max_num_seqs = 8;
  int32_t max_num_batched_tokens = 1024;
  int32_t max_cudagraph_capture_size = 0;
  int32_t mamba_cache_mode = 0;  ///< raw enum value
  int32_t block_size = 16;
  int32_t num_speculative_blocks = 0;
  int32_t num_prefill_checkpoint_blocks = 0;
  int32_t num_groups = 1;
};

/// One block table per group: all groups share a width and a row stride.
struct FuzzTable {
  int32_t width = 1;
  int32_t stride_pad = 0;  ///< row_stride = width + stride_pad
  int32_t salt = 0;        ///< varies the entries between tables
};

/// Arguments of one builder call. Step fields are used by the build ops, the
/// update fields by Op::Update.
struct FuzzCall {
  enum Flag : uint8_t {
    HasPrefilling = 1,
    HasDrafts = 2,
    HasAccepted = 4,
    DeviceSeqDiffers = 8,  ///< device seq_lens = upper bound + delta
    NullSeqLens = 16,
    NullTable = 32,
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
  std::vector<int32_t> accepted;
  /// Host span lengths beyond the rows (0: query_start_loc num_reqs + 1, others num_reqs).
  int32_t qsl_len_skew = 0, ub_len_skew = 0, prefilling_len_skew = 0, drafts_len_skew = 0;
  int32_t tables_skew = 0;  ///< build_groups: num_groups + skew tables
  FuzzTable table;
  // Op::Update
  int32_t group = 0;
  uint8_t which = 0;  ///< metadata passed: 0 the last build's, 1 the one before, 2 a blank one
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

template <class IO>
void describe(IO& io, FuzzConfig& c) {
  io.byte(c.flags);
  io.value(c.num_spec);
  io.value(c.max_num_seqs);
  io.value(c.max_num_batched_tokens);
  io.value(c.max_cudagraph_capture_size);
  io.value(c.mamba_cache_mode);
  io.value(c.block_size);
  io.value(c.num_speculative_blocks);
  io.value(c.num_prefill_checkpoint_blocks);
  io.value(c.num_groups);
}

template <class IO>
void describe(IO& io, FuzzTable& t) {
  io.value(t.width);
  io.value(t.stride_pad);
  io.value(t.salt);
}

template <class IO>
void describe(IO& io, FuzzCall& k) {
  uint8_t op = static_cast<uint8_t>(k.op);
  io.byte(op);
  k.op = static_cast<Op>(op % static_cast<uint8_t>(Op::Count));
  if (k.op == Op::Update) {
    describe(io, k.table);
    io.value(k.group);
    io.byte(k.which);
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

#include "vllm_session.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "conv_lists.hpp"
#include "instance_attrs.hpp"
#include "linmeta/outputs.hpp"
#include "metadata.hpp"
#include "step_inputs.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace linmeta::py {

namespace {

/// Views of a builder's buffers, made once per (address, shape, dtype, memory) and handed out
/// again on every later step with the same shape. A view with fewer rows than one made
/// before at the same address is sliced from it (no DLPack export).
class ViewCache {
 public:
  ViewCache(nb::object owner, int32_t device_id, ArrayType type)
      : owner_(std::move(owner)), device_id_(device_id), type_(type) {}

  nb::object get(const Array& a, bool device, int64_t rows = -1) {
    if (!a.present) return nb::none();
    const Key key{reinterpret_cast<uintptr_t>(a.data),
                  rows >= 0 ? rows : a.rows,
                  a.cols,
                  a.ndim,
                  a.dtype,
                  device};
    if (auto it = exact_.find(key); it != exact_.end()) return it->second;
    if (exact_.size() >= kMaxExact) exact_.clear();
    Key base_key = key;
    base_key.rows = 0;
    nb::object view;
    auto base = bases_.find(base_key);
    if (base != bases_.end() && base->second.rows >= key.rows && type_ != ArrayType::DLPack) {
      nb::object sl = nb::steal(PySlice_New(nb::int_(0).ptr(), nb::int_(key.rows).ptr(), nullptr));
      PyObject* r = PyObject_GetItem(base->second.view.ptr(), sl.ptr());
      if (r == nullptr) throw nb::python_error();
      view = nb::steal(r);
    } else {
      view = export_array(a.data, a.ndim, key.rows, a.cols, dlpack_dtype(a.dtype),
                          device ? kDLCUDA : kDLCPU, device ? device_id_ : 0, owner_, type_);
      bases_[base_key] = Base{key.rows, view};
    }
    exact_.emplace(key, view);
    return view;
  }

  [[nodiscard]] size_t size() const { return exact_.size(); }
  void clear() {
    exact_.clear();
    bases_.clear();
  }

 private:
  struct Key {
    uintptr_t ptr;
    int64_t rows;
    int32_t cols;
    int32_t ndim;
    DType dtype;
    bool device;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      size_t h = std::hash<uintptr_t>{}(k.ptr);
      h ^= std::hash<int64_t>{}(k.rows) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h ^= static_cast<size_t>(k.cols) * 31 + static_cast<size_t>(k.ndim) * 7 +
           static_cast<size_t>(k.dtype) * 3 + (k.device ? 5 : 0);
      return h;
    }
  };
  struct Base {
    int64_t rows;
    nb::object view;
  };
  static constexpr size_t kMaxExact = 4096;

  nb::object owner_;
  int32_t device_id_;
  ArrayType type_;
  std::unordered_map<Key, nb::object, KeyHash> exact_;
  std::unordered_map<Key, Base, KeyHash> bases_;
};

/// An optional host-time breakdown of VllmSession.call (`timing = True`; printed by
/// bench/python/profile_vllm_parts.py): nanoseconds per phase, summed over calls.
class PhaseClock {
 public:
  enum Phase : int32_t {
    Inputs,
    SameStep,
    Stream,
    Imports,
    Tables,
    Build,
    Bookkeeping,
    Fields,
    kCount
  };
  static constexpr std::array<const char*, kCount> kNames = {
      "inputs", "same_step",    "stream",      "imports",
      "tables", "native_build", "bookkeeping", "fields"};

  void start() {
    if (on) last_ = std::chrono::steady_clock::now();
  }
  void mark(Phase p) {
    if (!on) return;
    const auto t = std::chrono::steady_clock::now();
    ns[p] += std::chrono::duration_cast<std::chrono::nanoseconds>(t - last_).count();
    last_ = t;
  }

  bool on = false;
  std::array<int64_t, kCount> ns{};

 private:
  std::chrono::steady_clock::time_point last_;
};

/// The CommonAttentionMetadata attributes a call reads, in CallInputs' order.
constexpr const char* kCommonNames[] = {"query_start_loc_cpu",
                                        "seq_lens",
                                        "seq_lens_cpu_upper_bound",
                                        "query_start_loc",
                                        "is_prefilling",
                                        "num_actual_tokens",
                                        "num_reqs",
                                        "block_table_tensor"};

/// One call's step inputs: the arrays of a CommonAttentionMetadata plus the accepted and
/// draft counts, in a fixed order (the step fast path compares them one by one), and the
/// metadata's block table.
struct CallInputs {
  enum : int32_t { QslCpu, SeqLens, UpperBound, Qsl, IsPrefilling, Drafts, Accepted, kCount };
  static constexpr std::array<bool, kCount> kHost = {true, false, true, false, true, true, false};
  std::array<nb::object, kCount> arrays;
  nb::object num_actual_tokens, num_reqs, table;

  /// `common` reads kCommonNames.
  CallInputs(InstanceAttrs& common, nb::handle m, nb::handle accepted, nb::handle drafts) {
    enum : int32_t { NumActualTokens = 5, NumReqs, BlockTable, kRead };
    static_assert(std::size(kCommonNames) == kRead);
    std::array<nb::object, kRead> v;
    // Optional: the upper bound (older vLLM releases had only the exact host copy below),
    // is_prefilling, and the table (given apart to VllmSession.call).
    constexpr uint64_t optional = 1U << UpperBound | 1U << IsPrefilling | 1U << BlockTable;
    common.read(m, v, optional);
    for (const int32_t i : {QslCpu, SeqLens, UpperBound, Qsl, IsPrefilling})
      arrays[static_cast<size_t>(i)] = std::move(v[static_cast<size_t>(i)]);
    static const nb::str* exact = new nb::str("seq_lens_cpu");  // never destroyed
    if (arrays[UpperBound].is_none()) arrays[UpperBound] = get_attr(m, *exact);
    arrays[Drafts] = drafts.is_valid() ? nb::borrow(drafts) : nb::none();
    arrays[Accepted] = accepted.is_valid() ? nb::borrow(accepted) : nb::none();
    num_actual_tokens = std::move(v[NumActualTokens]);
    num_reqs = std::move(v[NumReqs]);
    table = std::move(v[BlockTable]);
  }

  [[nodiscard]] StepArgs args(nb::handle stream) const {
    return make_step_args(arrays[QslCpu], arrays[SeqLens], arrays[UpperBound], num_actual_tokens,
                          arrays[Qsl], arrays[IsPrefilling], arrays[Drafts], arrays[Accepted],
                          num_reqs, stream);
  }
};

/// Host arrays: equal dtype, shape and values. Device arrays: the same memory, shape, strides
/// and dtype (their contents are not read). Anything unusual compares unequal.
bool same_array(nb::handle a, nb::handle b, bool host) {
  if (a.is(b)) return true;
  if (a.is_none() || b.is_none()) return false;
  const ImportedArray x = import_array(a, "input", nullptr);
  const ImportedArray y = import_array(b, "input", nullptr);
  if (x.ndim != 1 || y.ndim != 1 || x.dtype != y.dtype || x.shape[0] != y.shape[0] ||
      x.device_type != y.device_type || x.device_id != y.device_id)
    return false;
  if (!host) return x.data == y.data && (x.shape[0] <= 1 || x.strides[0] == y.strides[0]);
  if (x.device_type != kDLCPU || (x.shape[0] > 1 && (x.strides[0] != 1 || y.strides[0] != 1)))
    return false;
  const size_t bytes = static_cast<size_t>(x.shape[0]) * ((x.dtype.bits + 7) / 8);
  return bytes == 0 || std::memcmp(x.data, y.data, bytes) == 0;
}

/// LaunchArgs known up front (VllmSession.call from Python).
class FixedLaunchArgs final : public LaunchArgs {
 public:
  FixedLaunchArgs(nb::handle stream, bool prefetch)
      : stream_(nb::borrow(stream)), prefetch_(prefetch) {}
  [[nodiscard]] nb::object stream() const override { return stream_; }
  [[nodiscard]] bool prefetch_tables() const override { return prefetch_; }

 private:
  nb::object stream_;
  bool prefetch_;
};

/// LaunchArgs whose stream comes from a callable, called when a call launches (None: no
/// stream); no table prefetch.
class CallbackLaunchArgs final : public LaunchArgs {
 public:
  explicit CallbackLaunchArgs(nb::handle stream_fn) : fn_(stream_fn) {}
  [[nodiscard]] nb::object stream() const override { return fn_.is_none() ? nb::none() : fn_(); }
  [[nodiscard]] bool prefetch_tables() const override { return false; }

 private:
  nb::handle fn_;
};

/// One builder's step state for the vLLM adapter (python/linmeta/vllm.py): the builder
/// objects of an engine (one per KV-cache group, `group` below) call `call` with their own
/// CommonAttentionMetadata; the first call of a step plans it and finishes every group in
/// one launch, the others of the same step are served from that plan (re-gathering their
/// state indices when their table differs from the one the launch used).
///
/// "Same step" (the test of seed 001's per-step cache, made stricter): the group was not
/// served since the last plan, the capture flag is the same, and the inputs are the very
/// objects of the plan or equal ones (host arrays by value, device arrays by memory);
/// num_actual_tokens and num_reqs equal.
///
/// Fields are returned as a new dict per call, keyed by vLLM's field names, starting from a copy
/// of the dataclass defaults, so that the adapter can install it as the instance __dict__. Which
/// fields: the scalars (kScalarFields) and the top-level rows of the output table
/// (linmeta/outputs.hpp) that the dataclass has, plus the composites under private keys that
/// the adapter turns into vLLM's objects:
///   "_conv"        (tot, nums host view, batch_ptr, token_chunk_offset_ptr), unless the
///                  session makes vLLM's nums_dict itself (configure's conv_block)
///   "_commit"      (state_indices, query_start_loc, request_indices, align or None)
///   "_checkpoint"  (checkpoint_offsets, state_indices)
///   "_flashinfer_checkpoint_plan"  (every_n_tokens, num_checkpoints, cu_starts, rows)
/// and "spec_sequence_masks_cpu" from the host mask ring when one is configured.
class VllmSession {
 public:
  explicit VllmSession(nb::handle builder)
      : builder_obj_(nb::borrow(builder)),
        b_(nb::inst_ptr<PyBuilder>(builder)),
        cache_(nb::borrow(builder), b_->device_id, b_->array_type) {}

  /// fields: the dataclass's field names (an iterable of str); defaults: the dict every result
  /// starts from; mask_ring: None or a contiguous host torch.bool tensor [slots, >=
  /// max_num_seqs] that receives the host spec mask of each step (a new row per step,
  /// cycling), returned as spec_sequence_masks_cpu when the step has spec decodes; grow: a
  /// step with more tokens than the builder's capacity is left to the caller (call returns
  /// None); conv_block: None, or the BLOCK_M key of vLLM's nums_dict: then a step with conv1d
  /// metadata gets vLLM's nums_dict, batch_ptr and token_chunk_offset_ptr in its fields (the
  /// host lists new CPU tensors once per plan, made by linmeta._torch_reader) instead of
  /// "_conv", when the dataclass has those fields and the reader is in use.
  void configure(nb::handle fields, nb::dict defaults, nb::object mask_ring, bool grow,
                 nb::object conv_block) {
    nb::set wanted;
    for (nb::handle f : fields) wanted.add(f);
    auto key = [&](const char* name) -> nb::object {
      nb::str k(name);
      return wanted.contains(k) ? nb::object(k) : nb::object();
    };
    for (size_t i = 0; i < kScalarFields.size(); ++i) scalar_keys_[i] = key(kScalarFields[i].name);
    for (const OutputSpec& spec : kOutputs) {
      nb::object& k = output_keys_[static_cast<size_t>(spec.id)];
      k = nb::object();
      // Nested rows come in their composites; the conv1d pointers with vLLM's program count.
      const bool composite = std::strchr(spec.name, '.') != nullptr || spec.id == Out::BatchPtr ||
                             spec.id == Out::TokenChunkOffsetPtr;
      if (spec.is_output() && !composite) k = key(spec.name);
    }
    masks_key_ = key("spec_sequence_masks_cpu");
    conv_ = ConvKeys{};
    if (!conv_block.is_none() && torch_conv_lists_available()) {
      conv_.nums_dict = key("nums_dict");
      conv_.batch_ptr = key("batch_ptr");
      conv_.offsets = key("token_chunk_offset_ptr");
      if (conv_.nums_dict.is_valid() && conv_.batch_ptr.is_valid() && conv_.offsets.is_valid())
        conv_.block = std::move(conv_block);
    }
    conv_lists_ = nb::none();
    conv_lists_plan_ = -1;
    defaults_ = std::move(defaults);
    last_.clear();
    ring_ = std::move(mask_ring);
    ring_views_.clear();
    ring_data_ = nullptr;
    grow_ = grow;
    if (!ring_.is_none()) {
      ImportedArray r = import_array(ring_, "mask_ring", nullptr);
      if (r.ndim != 2 || r.dtype.code != static_cast<uint8_t>(nb::dlpack::dtype_code::Bool) ||
          r.device_type != kDLCPU || r.strides[1] != 1)
        raise_error("VllmSession.configure: mask_ring must be a contiguous 2-D host bool array");
      ring_data_ = static_cast<bool*>(const_cast<void*>(r.data));
      ring_slots_ = static_cast<int32_t>(r.shape[0]);
      ring_width_ = r.shape[1];
      ring_stride_ = r.strides[0];
    }
  }

  /// Group `group`'s fields for a call of vLLM's build() (capture: build_for_cudagraph_capture)
  /// with CommonAttentionMetadata `m`, this group's block table (a null handle: `m`'s
  /// block_table_tensor) and the step's accepted /
  /// draft counts (int32 or None): served from the last plan when it is the same step, else
  /// planned afresh. None when this builder cannot take the step (`group` past its groups,
  /// or more tokens than its capacity with `grow`): the caller makes a larger builder.
  /// launch: the stream and whether a plan prefetches tables (it gathers the other groups'
  /// state indices from the tables they used the step before, when at least as large as this
  /// call's), read only when the call launches. int32_counts_only: None also when a step to
  /// plan has counts that are not int32 (the caller converts them).
  nb::object call(nb::handle m, nb::handle table, nb::handle accepted, nb::handle drafts,
                  bool capture, int32_t group, const LaunchArgs& launch, bool int32_counts_only) {
    clock_.start();
    const CallInputs in(common_, m, accepted, drafts);
    if (!table.is_valid()) table = in.table;
    clock_.mark(PhaseClock::Inputs);
    const auto G = static_cast<int32_t>(served_.size());
    if (group < 0) raise_error("VllmSession: group " + std::to_string(group) + " is negative");
    if (built_ && group < G && served_[static_cast<size_t>(group)] == 0 && capture == capture_ &&
        same_step(in)) {
      clock_.mark(PhaseClock::SameStep);
      serve_table(group, table, launch);
      clock_.mark(PhaseClock::Tables);
      nb::object out = fields(group);
      clock_.mark(PhaseClock::Fields);
      return out;
    }
    clock_.mark(PhaseClock::SameStep);
    const Config& cfg = b_->builder.config();
    if (group >= b_->builder.num_groups() ||
        (grow_ && to_int32(in.num_actual_tokens, "num_actual_tokens") > cfg.max_num_batched_tokens))
      return nb::none();
    if (!plan(in, table, capture, group, launch, int32_counts_only)) return nb::none();
    nb::object out = fields(group);
    clock_.mark(PhaseClock::Fields);
    return out;
  }

  /// Group `group`'s fields of the last plan with its state indices from `table`
  /// (update_block_table): re-gathered unless the launch gathered them from this table's
  /// memory already (as a served build() does); the stream is read only when a re-gather
  /// launches. Marks the group served.
  nb::object serve(int32_t group, nb::handle table, const LaunchArgs& launch) {
    check_group(group);
    if (table.is_valid() && !table.is_none())
      serve_table(group, table, launch);  // marks it served
    else
      served_[static_cast<size_t>(group)] = 1;
    return fields(group);
  }

  /// Plans made so far (a new value means a new step).
  [[nodiscard]] int64_t plans() const { return plans_; }
  /// num_actual_tokens of the last plan.
  [[nodiscard]] int32_t num_actual_tokens() const { return num_actual_tokens_; }
  [[nodiscard]] size_t cached_views() const { return cache_.size(); }
  /// Turns the phase breakdown on (counters reset) or off.
  void set_timing(bool on) {
    clock_.on = on;
    clock_.ns = {};
  }
  [[nodiscard]] bool timing() const { return clock_.on; }
  /// Nanoseconds per phase of call() since timing was turned on (a dict).
  [[nodiscard]] nb::dict phase_ns() const {
    nb::dict d;
    for (int32_t i = 0; i < PhaseClock::kCount; ++i)
      d[PhaseClock::kNames[static_cast<size_t>(i)]] = clock_.ns[static_cast<size_t>(i)];
    return d;
  }
  /// Result dicts made from the views so far (the others were copies of the last one).
  [[nodiscard]] int64_t dicts_made() const { return dicts_made_; }

 private:
  void check_group(int32_t group) const {
    if (!built_) raise_error("VllmSession: no step built yet");
    if (group < 0 || static_cast<size_t>(group) >= mds_.size())
      raise_error("VllmSession: group " + std::to_string(group) + " is outside [0, " +
                  std::to_string(mds_.size()) + ")");
  }

  /// Plans the step and finishes every group in one launch: `group` from `table`, the others
  /// from the same table or (prefetch) from the table each used the step before. False, with
  /// nothing changed, when `int32_counts_only` refuses the step's counts.
  bool plan(const CallInputs& in, nb::handle table, bool capture, int32_t group,
            const LaunchArgs& launch, bool int32_counts_only) {
    PreparedStep& p = prep_;
    p.reset();
    const nb::object stream = launch.stream();
    clock_.mark(PhaseClock::Stream);
    if (!prepare(p, *b_, in.args(stream), int32_counts_only)) return false;
    clock_.mark(PhaseClock::Imports);
    const bool prefetch = launch.prefetch_tables();
    const int32_t n = p.step.num_reqs;
    const BlockTable own = import_table(p, table, "block_table", n, b_->memory());
    const auto G = static_cast<size_t>(b_->builder.num_groups());
    const int64_t own_rows = p.arrays.back().shape[0];
    if (table_objs_.size() != G) {  // the first plan: nothing to prefetch from
      table_objs_.assign(G, nb::object());
      table_rows_.assign(G, 0);
      used_.assign(G, BlockTable{});
    }
    // A group's table of the last step when at least as large as this group's (rows and
    // columns): the gather's width check cannot fail on it where it passes on this one.
    prefetched_.assign(G, 0);
    p.tables.assign(G, own);
    for (size_t g = 0; prefetch && g < G; ++g) {
      if (g == static_cast<size_t>(group) || !table_objs_[g].is_valid() || table_rows_[g] < n ||
          used_[g].width < own.width)
        continue;
      prefetched_[g] = 1;
      p.tables[g] = used_[g];
    }
    p.step.block_table = p.tables[0];
    built_ = false;
    clock_.mark(PhaseClock::Tables);
    std::span<const Metadata> ms =
        capture ? b_->builder.build_groups_for_cudagraph_capture(p.step, p.tables, p.stream)
                : b_->builder.build_groups(p.step, p.tables, p.stream);
    clock_.mark(PhaseClock::Build);
    mds_.assign(ms.begin(), ms.end());
    num_reqs_ = n;
    num_actual_tokens_ = p.step.num_actual_tokens;
    built_ = true;
    ++plans_;
    inputs_ = in;
    capture_ = capture;
    used_ = p.tables;
    for (size_t g = 0; g < G; ++g) {
      if (prefetched_[g] != 0) continue;
      table_objs_[g] = nb::borrow(table);
      table_rows_[g] = own_rows;
    }
    served_.assign(G, 0);
    served_[static_cast<size_t>(group)] = 1;
    masks_ = nb::none();
    if (ring_data_ != nullptr && !mds_.empty() && mds_[0].num_spec_decodes > 0)
      masks_ = host_masks(p.step, capture);
    clock_.mark(PhaseClock::Bookkeeping);
    return true;
  }

  /// The inputs are the plan's objects, or equal ones (see the class comment).
  bool same_step(const CallInputs& in) const {
    if (!inputs_) return false;
    const CallInputs& last = *inputs_;
    // The plan's own int objects hold the plan's values (ints are immutable).
    if ((!in.num_actual_tokens.is(last.num_actual_tokens) &&
         to_int32(in.num_actual_tokens, "num_actual_tokens") != num_actual_tokens_) ||
        (!in.num_reqs.is(last.num_reqs) && to_int32(in.num_reqs, "num_reqs") != num_reqs_))
      return false;
    for (int32_t i = 0; i < CallInputs::kCount; ++i) {
      const auto k = static_cast<size_t>(i);
      if (!same_array(in.arrays[k], last.arrays[k], CallInputs::kHost[k])) return false;
    }
    return true;
  }

  /// Serves `group` from the plan: re-gathers its state indices unless the launch used this
  /// table's memory already.
  void serve_table(int32_t group, nb::handle table, const LaunchArgs& launch) {
    const auto g = static_cast<size_t>(group);
    if (!table.is(table_objs_[g])) {
      PreparedStep& p = table_prep_;  // regather() below resets it: `p` is not used after it
      p.reset();
      const BlockTable t = import_table(p, table, "block_table", num_reqs_, b_->memory());
      if (t.data != used_[g].data || t.row_stride != used_[g].row_stride ||
          t.width != used_[g].width) {
        regather(group, table, launch.stream());
      } else {
        table_objs_[g] = nb::borrow(table);
        table_rows_[g] = p.arrays.back().shape[0];
      }
    }
    served_[g] = 1;
  }

  void regather(int32_t group, nb::handle table, nb::handle stream) {
    PreparedStep& p = table_prep_;
    p.reset();
    p.stream = b_->builder.target() == Target::Cuda ? parse_stream(stream) : nullptr;
    const auto g = static_cast<size_t>(group);
    const BlockTable t = import_table(p, table, "block_table", num_reqs_, b_->memory());
    mds_[g] = b_->builder.update_block_table(mds_[g], t, group, p.stream);
    used_[g] = t;
    table_objs_[g] = nb::borrow(table);
    table_rows_[g] = p.arrays.back().shape[0];
  }

  /// The step's host spec mask in the next ring row, as a cached view of that row.
  nb::object host_masks(const Step& s, bool capture) {
    const int32_t n = s.num_reqs;
    if (n > ring_width_) raise_error("VllmSession: mask_ring is narrower than num_reqs");
    const int32_t slot = ring_next_;
    ring_next_ = (ring_next_ + 1) % ring_slots_;
    bool* row = ring_data_ + static_cast<int64_t>(slot) * ring_stride_;
    const int32_t* q = s.query_start_loc_cpu.data();
    if (!capture && !s.num_decode_draft_tokens.empty()) {
      const int32_t* d = s.num_decode_draft_tokens.data();
      for (int32_t r = 0; r < n; ++r) row[r] = d[r] >= 0;
    } else {  // capture build: drafts = query lengths - 1
      for (int32_t r = 0; r < n; ++r) row[r] = q[r + 1] - q[r] >= 1;
    }
    const int64_t key = static_cast<int64_t>(slot) << 32 | static_cast<uint32_t>(n);
    if (auto it = ring_views_.find(key); it != ring_views_.end()) return it->second;
    nb::object idx =
        nb::make_tuple(slot, nb::steal(PySlice_New(nb::int_(0).ptr(), nb::int_(n).ptr(), nullptr)));
    PyObject* v = PyObject_GetItem(ring_.ptr(), idx.ptr());
    if (v == nullptr) throw nb::python_error();
    nb::object view = nb::steal(v);
    ring_views_.emplace(key, view);
    return view;
  }

  /// Group `group`'s result dict: a copy of one of the last two made for this group when its
  /// metadata is the same (equal counts and views), else made anew. Two: the builder's host
  /// arrays (conv1d `nums`) alternate between two plans' memory, so a run of equal mixed
  /// steps has two metadata that each come back every other step.
  nb::object fields(int32_t group) {
    check_group(group);
    const auto g = static_cast<size_t>(group);
    if (last_.size() != mds_.size()) last_.assign(mds_.size(), LastFields{});
    LastFields& last = last_[g];
    const Metadata& m = mds_[g];
    nb::object out;
    size_t hit = last.results.size();
    for (const size_t i : {last.newest, 1 - last.newest})  // the newest first
      if (last.results[i].dict.is_valid() && same_metadata(last.results[i].m, m)) {
        hit = i;
        break;
      }
    if (hit < last.results.size()) {
      out = nb::steal(PyDict_Copy(last.results[hit].dict.ptr()));
      if (!out.is_valid()) throw nb::python_error();
      last.newest = hit;
    } else {
      out = make_fields(mds_[g]);
      ++dicts_made_;
      Result& r = last.results[1 - last.newest];  // replaces the older one
      r.m = m;
      r.dict = nb::steal(PyDict_Copy(out.ptr()));  // ours: the caller's dict is theirs
      if (!r.dict.is_valid()) throw nb::python_error();
      last.newest = 1 - last.newest;
    }
    if (!masks_.is_none() && masks_key_.is_valid() &&
        PyDict_SetItem(out.ptr(), masks_key_.ptr(), masks_.ptr()) != 0)
      throw nb::python_error();
    if (m.conv1d && conv_.block.is_valid()) put_nums_dict(out, *m.conv1d);
    return out;
  }

  /// a == b, a byte comparison first: equal bytes are equal fields (Metadata is trivially
  /// copyable and holds no floating point), and the copies compared here are usually
  /// byte-equal; padding that differs only sends the comparison to the fields.
  static bool same_metadata(const Metadata& a, const Metadata& b) {
    static_assert(std::is_trivially_copyable_v<Metadata>);
    return std::memcmp(&a, &b, sizeof(Metadata)) == 0 || a == b;
  }

  /// vLLM's compute_causal_conv1d_metadata dict {BLOCK_M: {...}} into `out` (whose
  /// batch_ptr / token_chunk_offset_ptr make_fields put there): a new dict per call, over the
  /// plan's host lists, made on the plan's first call that needs them (one set for all groups).
  void put_nums_dict(const nb::object& out, const Conv1dMetadata& cv) {
    if (conv_lists_plan_ != plans_ || conv_lists_.is_none()) {
      conv_lists_ = torch_conv_lists(static_cast<const int32_t*>(cv.nums.data), cv.nums.rows);
      if (conv_lists_.is_none()) raise_error("VllmSession: linmeta._torch_reader is not in use");
      conv_lists_plan_ = plans_;
    }
    PyObject* batch_ptr = PyDict_GetItemWithError(out.ptr(), conv_.batch_ptr.ptr());
    PyObject* offsets = PyDict_GetItemWithError(out.ptr(), conv_.offsets.ptr());
    if (batch_ptr == nullptr || offsets == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "batch_ptr");
      throw nb::python_error();
    }
    static const NumsDictKeys* keys = new NumsDictKeys;  // never destroyed, as names()
    const nb::object tot = nb::int_(cv.tot);
    const nb::object inner = nb::steal(PyDict_New());
    const nb::object outer = nb::steal(PyDict_New());
    if (!inner.is_valid() || !outer.is_valid()) throw nb::python_error();
    const std::pair<const nb::str&, PyObject*> items[] = {
        {keys->nums, PyTuple_GET_ITEM(conv_lists_.ptr(), 0)},
        {keys->tot, tot.ptr()},
        {keys->mlist, PyTuple_GET_ITEM(conv_lists_.ptr(), 1)},
        {keys->mlist_len, tot.ptr()},
        {keys->offsetlist, PyTuple_GET_ITEM(conv_lists_.ptr(), 2)},
        {keys->batch_ptr, batch_ptr},
        {keys->token_chunk_offset_ptr, offsets}};
    for (const auto& [k, v] : items)
      if (PyDict_SetItem(inner.ptr(), k.ptr(), v) != 0) throw nb::python_error();
    if (PyDict_SetItem(outer.ptr(), conv_.block.ptr(), inner.ptr()) != 0 ||
        PyDict_SetItem(out.ptr(), conv_.nums_dict.ptr(), outer.ptr()) != 0)
      throw nb::python_error();
  }
  /// The keys of vLLM's inner nums_dict, interned once.
  struct NumsDictKeys {
    nb::str nums{"nums"}, tot{"tot"}, mlist{"mlist"}, mlist_len{"mlist_len"},
        offsetlist{"offsetlist"}, batch_ptr{"batch_ptr"},
        token_chunk_offset_ptr{"token_chunk_offset_ptr"};
  };

  nb::object make_fields(Metadata& m) {
    const bool dev = m.target == Target::Cuda;
    nb::object out = nb::steal(defaults_.is_valid() ? PyDict_Copy(defaults_.ptr()) : PyDict_New());
    if (!out.is_valid()) throw nb::python_error();
    auto put = [&](const nb::object& key, const nb::object& v) {
      if (key.is_valid() && PyDict_SetItem(out.ptr(), key.ptr(), v.ptr()) != 0)
        throw nb::python_error();
    };
    auto put_private = [&](const char* key, const nb::object& v) {
      if (PyDict_SetItemString(out.ptr(), key, v.ptr()) != 0) throw nb::python_error();
    };
    for (size_t i = 0; i < kScalarFields.size(); ++i) put(scalar_keys_[i], kScalarFields[i].get(m));
    for (const OutputSpec& spec : kOutputs) {
      const nb::object& key = output_keys_[static_cast<size_t>(spec.id)];
      if (!key.is_valid()) continue;
      const Array* a = spec.field(m);
      put(key, a == nullptr ? nb::none() : cache_.get(*a, dev));
    }
    if (m.conv1d) {
      const Conv1dMetadata& cv = *m.conv1d;
      // vLLM's compute_causal_conv1d_metadata allocates 2 * max(1024, tot) programs.
      const int64_t programs = 2 * std::max<int64_t>(1024, cv.tot);
      if (programs > cv.batch_ptr.rows)
        raise_error("conv1d program capacity " + std::to_string(cv.batch_ptr.rows) +
                    " is below vLLM's 2 * max(1024, tot) = " + std::to_string(programs));
      nb::object batch_ptr = cache_.get(cv.batch_ptr, dev, programs);
      nb::object offsets = cache_.get(cv.token_chunk_offset_ptr, dev, programs);
      if (conv_.block.is_valid()) {  // nums_dict: per call (fields())
        put(conv_.batch_ptr, batch_ptr);
        put(conv_.offsets, offsets);
      } else {
        put_private("_conv",
                    nb::make_tuple(cv.tot, cache_.get(cv.nums, false), batch_ptr, offsets));
      }
    }
    if (m.recoverssm_commit) {
      const RecoverSsmCommit& rc = *m.recoverssm_commit;
      nb::object align = nb::none();
      if (rc.align)
        align =
            nb::make_tuple(cache_.get(rc.align->num_computed_tokens, dev), rc.align->block_size);
      put_private("_commit", nb::make_tuple(cache_.get(rc.state_indices, dev),
                                            cache_.get(rc.query_start_loc, dev),
                                            cache_.get(rc.request_indices, dev), align));
    }
    if (m.checkpoint)
      put_private("_checkpoint", nb::make_tuple(cache_.get(m.checkpoint->checkpoint_offsets, dev),
                                                cache_.get(m.checkpoint->state_indices, dev)));
    if (m.flashinfer_checkpoint_plan) {
      const FlashInferCheckpointPlan& fp = *m.flashinfer_checkpoint_plan;
      put_private("_flashinfer_checkpoint_plan",
                  nb::make_tuple(fp.every_n_tokens, fp.num_checkpoints,
                                 cache_.get(fp.cu_starts, dev), cache_.get(fp.rows, dev)));
    }
    return out;
  }

  nb::object builder_obj_;  ///< keeps the builder (and its buffers) alive
  PyBuilder* b_;
  ViewCache cache_;
  std::vector<Metadata> mds_;
  int32_t num_reqs_ = 0;
  bool built_ = false;
  std::array<nb::object, kScalarFields.size()> scalar_keys_{};  ///< invalid: not returned
  std::array<nb::object, kNumOutputs> output_keys_{};           ///< invalid: not returned
  nb::object masks_key_;
  struct ConvKeys {
    nb::object block;  ///< nums_dict's key (BLOCK_M); invalid: "_conv" for the adapter
    nb::object nums_dict, batch_ptr, offsets;
  };
  ConvKeys conv_;
  nb::object conv_lists_ = nb::none();  ///< (nums, mlist, offsetlist) of plan conv_lists_plan_
  int64_t conv_lists_plan_ = -1;
  nb::object defaults_;
  nb::object ring_ = nb::none();
  bool* ring_data_ = nullptr;
  int32_t ring_slots_ = 0;
  int32_t ring_next_ = 0;
  int64_t ring_width_ = 0;
  int64_t ring_stride_ = 0;
  std::unordered_map<int64_t, nb::object> ring_views_;
  nb::object masks_ = nb::none();
  struct Result {
    Metadata m;       ///< the metadata `dict` was made from
    nb::object dict;  ///< a private copy of that result
  };
  struct LastFields {
    std::array<Result, 2> results;
    size_t newest = 0;  ///< the one made or used last
  };
  std::vector<LastFields> last_;        ///< per group
  InstanceAttrs common_{kCommonNames};  ///< reads a CommonAttentionMetadata
  std::optional<CallInputs> inputs_;    ///< the last plan's inputs
  int32_t num_actual_tokens_ = 0;
  bool capture_ = false;
  bool grow_ = false;
  int64_t plans_ = 0;
  int64_t dicts_made_ = 0;
  PhaseClock clock_;
  PreparedStep prep_;                   ///< the last plan's imports (kept: no allocation per step)
  PreparedStep table_prep_;             ///< a served group's table import
  std::vector<uint8_t> served_;         ///< per group: served since the last plan
  std::vector<BlockTable> used_;        ///< per group: the table its state indices hold
  std::vector<nb::object> table_objs_;  ///< ... and the object it came from
  std::vector<int64_t> table_rows_;     ///< ... and that object's rows
  std::vector<uint8_t> prefetched_;     ///< per group: the last plan used its old table
};

/// vLLM's causal-conv1d host lists from the programs per sequence: mlist[p] = sequence of
/// program p (int64), offsetlist[p] = its chunk within the sequence (int32); host arrays of
/// sum(nums) entries, written in place.
void fill_conv_lists(nb::handle nums_obj, nb::handle mlist_obj, nb::handle offsets_obj) {
  const ImportedArray nums = import_array(nums_obj, "nums", nullptr);
  const ImportedArray mlist = import_array(mlist_obj, "mlist", nullptr);
  const ImportedArray offsets = import_array(offsets_obj, "offsetlist", nullptr);
  auto host_1d = [](const ImportedArray& a, const char* name, uint8_t bits) {
    if (!a.present || a.ndim != 1 || a.device_type != kDLCPU ||
        a.dtype.code != static_cast<uint8_t>(nb::dlpack::dtype_code::Int) || a.dtype.bits != bits ||
        (a.shape[0] > 1 && a.strides[0] != 1))
      raise_error(std::string("fill_conv_lists: ") + name + " must be a contiguous 1-D host int" +
                  std::to_string(bits) + " array");
  };
  host_1d(nums, "nums", 32);
  host_1d(mlist, "mlist", 64);
  host_1d(offsets, "offsetlist", 32);
  const auto* n = static_cast<const int32_t*>(nums.data);
  const int64_t tot = conv_programs(n, nums.shape[0]);
  if (mlist.shape[0] != tot || offsets.shape[0] != tot)
    raise_error("fill_conv_lists: mlist and offsetlist need sum(nums) = " + std::to_string(tot) +
                " entries");
  write_conv_lists(n, nums.shape[0], static_cast<int64_t*>(const_cast<void*>(mlist.data)),
                   static_cast<int32_t*>(const_cast<void*>(offsets.data)));
}

/// vLLM's conv1d host lists (nums int32, mlist int64, offsetlist int32) as new CPU torch
/// tensors from a host view of the programs per sequence, made in C++ by
/// linmeta._torch_reader; None when the reader is not in use (the caller makes them with
/// torch ops and fill_conv_lists).
nb::object conv_host_lists(nb::handle nums_obj, int64_t tot) {
  const ImportedArray nums = import_array(nums_obj, "nums", nullptr);
  if (!nums.present || nums.ndim != 1 || nums.device_type != kDLCPU || nums.dtype != kInt32 ||
      (nums.shape[0] > 1 && nums.strides[0] != 1))
    raise_error("conv_host_lists: nums must be a contiguous 1-D host int32 array");
  const auto* n = static_cast<const int32_t*>(nums.data);
  if (conv_programs(n, nums.shape[0]) != tot)
    raise_error("conv_host_lists: tot = " + std::to_string(tot) +
                " is not sum(nums) = " + std::to_string(conv_programs(n, nums.shape[0])));
  return torch_conv_lists(n, nums.shape[0]);
}

}  // namespace

nb::object get_attr(nb::handle obj, const nb::str& name) {
  PyObject* r = PyObject_GetAttr(obj.ptr(), name.ptr());
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
}

nb::object session_call(nb::handle session, nb::handle m, nb::handle table, nb::handle accepted,
                        nb::handle drafts, bool capture, int32_t group, const LaunchArgs& launch,
                        bool int32_counts_only) {
  if (!is_instance<VllmSession>(session)) raise_error("session_call: not a VllmSession");
  return nb::inst_ptr<VllmSession>(session)->call(m, table, accepted, drafts, capture, group,
                                                  launch, int32_counts_only);
}

nb::object session_serve(nb::handle session, int32_t group, nb::handle table,
                         const LaunchArgs& launch, nb::handle num_actual_tokens) {
  if (!is_instance<VllmSession>(session)) raise_error("session_serve: not a VllmSession");
  auto* s = nb::inst_ptr<VllmSession>(session);
  try {
    if (to_int32(num_actual_tokens, "num_actual_tokens") != s->num_actual_tokens())
      return nb::none();
    return s->serve(group, table, launch);
  } catch (const Error&) {
    return nb::none();
  }
}

void bind_vllm_session(nb::module_& m) {
  m.def("conv_host_lists", &conv_host_lists, "nums"_a, "tot"_a,
        "vLLM's causal-conv1d host lists (nums int32, mlist int64, offsetlist int32) as new CPU "
        "torch tensors from a host int32 array of the programs per sequence (tot: their sum), "
        "made in C++; None when linmeta._torch_reader is not in use.");
  m.def("fill_conv_lists", &fill_conv_lists, "nums"_a, "mlist"_a, "offsetlist"_a,
        "vLLM's causal-conv1d host lists (mlist int64, offsetlist int32) from the programs per "
        "sequence, written into the given host arrays of sum(nums) entries.");
  nb::class_<VllmSession>(
      m, "VllmSession",
      "Fast path of linmeta.vllm (internal): builds a step for every KV-cache group of a builder "
      "and serves each group's fields as a dict of cached views of the persistent buffers.")
      .def(nb::init<nb::handle>(), "builder"_a)
      .def(
          "call",
          [](VllmSession& s, nb::handle m, nb::handle table, nb::handle accepted, nb::handle drafts,
             bool capture, int32_t group, nb::handle stream, bool prefetch) {
            return s.call(m, table, accepted, drafts, capture, group,
                          FixedLaunchArgs(stream, prefetch), /*int32_counts_only=*/false);
          },
          "common_attn_metadata"_a, "table"_a, "accepted"_a.none(), "drafts"_a.none(), "capture"_a,
          "group"_a, "stream"_a.none(), "prefetch_tables"_a)
      .def("configure", &VllmSession::configure, "fields"_a, "defaults"_a, "mask_ring"_a.none(),
           "grow"_a, "conv_block"_a.none() = nb::none())
      .def(
          "serve",
          [](nb::handle self, int32_t group, nb::handle table, nb::handle stream_fn,
             nb::handle num_actual_tokens) {
            return session_serve(self, group, table, CallbackLaunchArgs(stream_fn),
                                 num_actual_tokens);
          },
          "group"_a, "table"_a.none(), "stream_fn"_a.none(), "num_actual_tokens"_a,
          "session_serve (vllm_session.hpp): group's fields re-gathered from `table` when "
          "needed, or None for metadata of another step (stream_fn: None or a callable "
          "returning the stream, called only when a re-gather launches).")
      .def_prop_ro("plans", &VllmSession::plans)
      .def_prop_ro("num_actual_tokens", &VllmSession::num_actual_tokens)
      .def_prop_ro("cached_views", &VllmSession::cached_views)
      .def_prop_ro("dicts_made", &VllmSession::dicts_made)
      .def_prop_rw("timing", &VllmSession::timing, &VllmSession::set_timing,
                   "Whether call() times its phases (setting it resets phase_ns).")
      .def_prop_ro("phase_ns", &VllmSession::phase_ns,
                   "Host nanoseconds per phase of call() since timing was set: inputs (reading "
                   "CommonAttentionMetadata), same_step, stream (reading the launch stream), "
                   "imports (the step's arrays), tables (block tables, prefetch), "
                   "native_build, bookkeeping, fields (the result dict).");
}

}  // namespace linmeta::py

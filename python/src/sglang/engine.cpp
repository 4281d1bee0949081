#include "engine.hpp"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../binding/dlpack_exchange.hpp"
#include "../binding/fields.hpp"
#include "../binding/gc_slots.hpp"
#include "../binding/step_inputs.hpp"
#include "linmeta/outputs.hpp"
#include "linmeta/sglang.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace linmeta::py {

namespace {

/// The interned str of string literal `name` (made once per literal, kept for the process:
/// an attribute lookup with it hashes nothing and compares by identity).
PyObject* name_of(const char* name) {
  static auto* const names = new std::vector<std::pair<const char*, PyObject*>>();
  for (const auto& [literal, str] : *names)
    if (literal == name) return str;
  PyObject* str = PyUnicode_InternFromString(name);
  if (str == nullptr) throw nb::python_error();
  names->emplace_back(name, str);
  return str;
}

/// `obj.name` (a string literal), or None when the attribute is absent.
nb::object attr_or_none(nb::handle obj, const char* name) {
  PyObject* v = PyObject_GetAttr(obj.ptr(), name_of(name));
  if (v == nullptr) {
    PyErr_Clear();
    return nb::none();
  }
  return nb::steal(v);
}

/// `obj.name` (a string literal); AttributeError when absent.
nb::object attr_of(nb::handle obj, const char* name) {
  PyObject* v = PyObject_GetAttr(obj.ptr(), name_of(name));
  if (v == nullptr) throw nb::python_error();
  return nb::steal(v);
}

/// SGLang's ForwardMode by its member name (the modes the linear-attention backends serve).
SglangMode mode_named(nb::handle mode, const char* field) {
  static const std::array<std::pair<const char*, SglangMode>, 6> kModes{{
      {"EXTEND", SglangMode::Extend},
      {"DECODE", SglangMode::Decode},
      {"MIXED", SglangMode::Mixed},
      {"IDLE", SglangMode::Idle},
      {"TARGET_VERIFY", SglangMode::TargetVerify},
      {"DRAFT_EXTEND_V2", SglangMode::DraftExtendV2},
  }};
  const std::string name = to_string(attr_of(mode, "name"), field);
  for (const auto& [n, m] : kModes)
    if (name == n) return m;
  raise_error(std::string("sglang: ") + field + " = " + name +
              " is no mode SGLang's linear-attention backends serve");
}

/// A Python list (or sequence) of ints into `out` (its capacity kept), as int32 or int64.
template <class T>
void ints_into(nb::handle seq, std::vector<T>& out, const char* name) {
  out.clear();
  for (nb::handle v : seq) {
    const long long x = PyLong_AsLongLong(v.ptr());
    if (x == -1 && PyErr_Occurred()) throw nb::python_error();
    if (sizeof(T) == 4 && (x < INT32_MIN || x > INT32_MAX))
      raise_error(std::string("sglang: ") + name + " holds " + std::to_string(x) +
                  ", outside int32");
    out.push_back(static_cast<T>(x));
  }
}

/// The top-level members of the composite row `parent` of kind `kind`, by SGLang's names.
struct Member {
  const OutputSpec* spec;
  nb::str name;
};
std::vector<Member> members_of(const OutputSpec& parent, BuilderKind kind) {
  std::vector<Member> out;
  const size_t n = std::strlen(parent.name);
  for (const OutputSpec& row : kOutputs)
    if (row.is_output() && row.has(kind) && std::strncmp(row.name, parent.name, n) == 0 &&
        row.name[n] == '.' && std::strchr(row.name + n + 1, '.') == nullptr)
      out.push_back({&row, interned(row.name + n + 1)});
  return out;
}

/// The native half of one linmeta.sglang backend object (engine.hpp).
class SglangEngine {
 public:
  /// builder: the object's own linmeta.MetadataBuilder of an SGLang kind; pool: SGLang's
  /// HybridReqToTokenPool (its req_index_to_mamba_index_mapping is read on every call);
  /// cache_chunk_size, conv_window, topk, conv_block_table (GDN: SGLang's is_cuda()),
  /// host_mirrors (ShortConv's needs_extend_host_mirrors): the backend's engine constants.
  SglangEngine(nb::handle builder, nb::object pool, int32_t cache_chunk_size, int32_t conv_window,
               int32_t topk, bool conv_block_table, bool host_mirrors)
      : builder_(nb::borrow(builder)), pool_(std::move(pool)) {
    if (!nb::isinstance<PyBuilder>(builder))
      throw nb::type_error("linmeta.sglang: Engine takes a linmeta.MetadataBuilder");
    b_ = nb::inst_ptr<PyBuilder>(builder_);
    kind_ = b_->builder.kind();
    if (!is_sglang(kind_))
      raise_error("linmeta.sglang: the Engine's builder must be of an SGLang kind");
    exporter_ = std::make_unique<FieldExporter>(builder_, b_->device_id, b_->array_type,
                                                /*fresh_views=*/true);
    step_.cache_chunk_size = cache_chunk_size;
    step_.conv_window = conv_window;
    step_.topk = topk;
    step_.conv_block_table = conv_block_table;
    step_.host_mirrors = host_mirrors;
    const auto rows = static_cast<size_t>(b_->builder.config().max_num_seqs);
    for (auto* v : {&ext_, &prefix_}) v->reserve(rows);
    track_seqlens_.reserve(rows);
    mask_.reserve(rows);
    members_ = members_of(output_spec(Out::Sglang), kind_);
    mixed_members_ = members_of(output_spec(Out::SglMixed), kind_);
  }

  /// The fields of SGLang's metadata object for ForwardBatch `fb` at entry point `entry`
  /// (SglangEntry); `graph`: None, or the backend's static buffers of the batch size
  /// (state indices, query_start_loc, track indices view [:bs] or None, retrieve next token,
  /// next sibling, parent token lists or None); `cache_indices_buf`: ShortConv's
  /// _cache_indices_buf (None before the graph state; its slice of the batch is handed out
  /// when the kind writes into it). The PrefillGraph entry (KDA): `graph` is the bucket's
  /// KDAPrefillGraphMetadata, whose tables it fills; returns None.
  nb::object build(nb::handle fb, int32_t entry, nb::handle graph, nb::handle cache_indices_buf) {
    const CallGuard guard(*b_, "build");
    callers_.clear();
    arrays_.clear();
    arrays_.reserve(16);  // addresses of its elements are kept: no reallocation below
    SglangStep& s = step_;
    s.entry = static_cast<SglangEntry>(entry);
    s.forward_mode = mode_named(attr_of(fb, "forward_mode"), "forward_mode");
    s.logical_mode = mode_named(attr_of(fb, "logical_forward_mode"), "logical_forward_mode");
    s.batch_size = to_int32(attr_of(fb, "batch_size"), "batch_size");
    const int32_t bs = s.batch_size;
    nb::object rpi = attr_of(fb, "req_pool_indices");
    stream_ = nullptr;
    if (b_->builder.target() == Target::Cuda && !producer_stream(rpi, b_->device_id, stream_))
      raise_error("linmeta.sglang: the cuda target needs torch tensors (DLPack C exchange API)");
    s.req_pool_indices = const_cast<int64_t*>(
        static_cast<const int64_t*>(device(rpi, "req_pool_indices", true, bs)));
    const nb::object map = attr_of(pool_, "req_index_to_mamba_index_mapping");
    const ImportedArray& m = import(map, "req_index_to_mamba_index_mapping", true, false, 1);
    s.mamba_map = static_cast<const int32_t*>(m.data);
    s.mamba_map_len = m.shape[0];
    nb::object ids = attr_or_none(fb, "input_ids");
    s.num_tokens = ids.is_none() ? 0 : to_int32(attr_of(ids, "shape")[0], "input_ids.shape[0]");
    nb::object ent = attr_of(fb, "extend_num_tokens");
    s.extend_num_tokens = ent.is_none() ? -1 : to_int32(ent, "extend_num_tokens");
    list(fb, "extend_seq_lens_cpu", ext_, s.extend_seq_lens);
    list(fb, "extend_prefix_lens_cpu", prefix_, s.extend_prefix_lens);
    nb::object pad = attr_or_none(fb, "num_padding");
    s.num_padding = pad.is_none() ? -1 : to_int32(pad, "num_padding");
    s.seq_lens = {};  // read by a replay that counts its padding only
    nb::object seq_cpu = s.entry == SglangEntry::GraphReplay && s.num_padding < 0
                             ? attr_or_none(fb, "seq_lens_cpu")
                             : nb::none();
    if (!seq_cpu.is_none()) {
      const ImportedArray& a = import(seq_cpu, "seq_lens_cpu", false, true);
      s.seq_lens = {static_cast<const int64_t*>(a.data), static_cast<size_t>(a.shape[0])};
    }
    s.tbo = !attr_or_none(fb, "tbo_parent_token_range").is_none();
    read_spec(fb);
    read_track(fb, bs);
    const bool prefill_graph = s.entry == SglangEntry::PrefillGraph;
    read_graph(prefill_graph ? nb::none() : graph);
    read_prefill_graph(fb, prefill_graph ? graph : nb::none());
    s.cache_indices_buf = nullptr;
    s.cache_indices_buf_len = 0;
    if (!cache_indices_buf.is_none()) {
      const ImportedArray& a = import(cache_indices_buf, "_cache_indices_buf", true, true);
      s.cache_indices_buf = static_cast<int64_t*>(const_cast<void*>(a.data));
      s.cache_indices_buf_len = a.shape[0];
    }
    Step step;
    step.sglang = &s;
    const Metadata& meta = b_->builder.build(step, stream_);
    if (prefill_graph) {
      arrays_.clear();
      callers_.clear();
      return nb::none();
    }
    exporter_->begin_result();
    nb::dict out = fields(meta, members_);
    // SGLang keeps the batch's own list.
    if (meta.sglang && meta.sglang->mixed_metadata)
      nb::borrow<nb::dict>(out["mixed_metadata"])["extend_seq_lens_cpu"] =
          attr_of(fb, "extend_seq_lens_cpu");
    arrays_.clear();
    callers_.clear();
    return out;
  }

  int traverse(visitproc visit, void* arg) const {
    Py_VISIT(builder_.ptr());
    Py_VISIT(pool_.ptr());
    return exporter_ ? exporter_->traverse(visit, arg) : 0;
  }
  void clear() {
    pool_ = nb::object();
    if (exporter_) exporter_->clear();
  }

 private:
  /// Imports `obj` (kept alive until the call ends); `on_device`: target memory, else host.
  /// `at_least`: elements the step reads from it (fewer: linmeta.Error, no read past it).
  const ImportedArray& import(nb::handle obj, const char* name, bool on_device, bool int64,
                              int64_t at_least = 0) {
    return import_as(obj, name, on_device, int64 ? kInt64 : kInt32, at_least);
  }
  const ImportedArray& import_as(nb::handle obj, const char* name, bool on_device,
                                 nb::dlpack::dtype want, int64_t at_least) {
    ImportedArray& a = arrays_.emplace_back();
    import_array_into(a, obj, name, stream_);
    const TargetMemory mem = b_->memory();
    if (a.dtype != want)
      throw nb::type_error((std::string("linmeta.sglang: ") + name + " must be " +
                            dtype_name(want) + ", got " + dtype_name(a.dtype))
                               .c_str());
    const bool host_mem = a.device_type == kDLCPU || a.device_type == kDLCUDAHost;
    if (on_device && mem.target == Target::Cuda && a.device_type != kDLCUDA)
      raise_error(std::string("sglang: ") + name + " must be CUDA memory on the cuda target");
    if (on_device && mem.target == Target::Host && !host_mem)
      raise_error(std::string("sglang: ") + name + " must be host memory on the host target");
    if (!on_device && !host_mem)
      raise_error(std::string("sglang: ") + name + " must be host memory");
    int64_t expect = 1;
    for (int32_t d = a.ndim - 1; d >= 0; --d) {
      if (a.shape[d] > 1 && a.strides[d] != expect)
        raise_error(std::string("sglang: ") + name + " must be contiguous");
      expect *= a.shape[d];
    }
    if (expect < at_least)
      raise_error(std::string("sglang: ") + name + " has " + std::to_string(expect) +
                  " elements, the step reads " + std::to_string(at_least));
    callers_.push_back({a.data, nb::borrow(obj), a.ndim == 1 ? a.shape[0] : -1});
    return a;
  }
  const void* device(nb::handle obj, const char* name, bool int64, int64_t at_least) {
    return import(obj, name, true, int64, at_least).data;
  }

  /// A host list attribute into `store` and `span` (empty for None).
  template <class T>
  void list(nb::handle fb, const char* name, std::vector<T>& store, std::span<const T>& span) {
    nb::object v = attr_or_none(fb, name);
    span = {};
    if (v.is_none()) return;
    ints_into(v, store, name);
    span = store;
  }

  void read_spec(nb::handle fb) {
    SglangStep& s = step_;
    nb::object spec = attr_or_none(fb, "spec_info");
    s.has_spec_info = !spec.is_none();
    s.draft_token_num = 1;
    s.retrieve_next_token = s.retrieve_next_sibling = nullptr;
    s.retrieve_rows = 0;
    if (!s.has_spec_info) return;
    nb::object k = attr_or_none(spec, "draft_token_num");
    s.draft_token_num = k.is_none() ? 1 : to_int32(k, "spec_info.draft_token_num");
    nb::object rnt = attr_or_none(spec, "retrieve_next_token");
    nb::object rns = attr_or_none(spec, "retrieve_next_sibling");
    const auto tree = [&](const nb::object& t, const char* name) -> const int64_t* {
      const ImportedArray& a = import(t, name, true, true);
      if (a.ndim != 2 || a.shape[1] != s.draft_token_num)
        raise_error(std::string("sglang: ") + name +
                    " must be [rows, draft_token_num = " + std::to_string(s.draft_token_num) + "]");
      if (s.retrieve_rows > 0 && a.shape[0] != s.retrieve_rows)
        raise_error(
            "sglang: spec_info.retrieve_next_sibling has another row count than "
            "retrieve_next_token");
      s.retrieve_rows = static_cast<int32_t>(std::min<int64_t>(a.shape[0], INT32_MAX));
      return static_cast<const int64_t*>(a.data);
    };
    if (!rnt.is_none()) s.retrieve_next_token = tree(rnt, "spec_info.retrieve_next_token");
    if (!rns.is_none()) s.retrieve_next_sibling = tree(rns, "spec_info.retrieve_next_sibling");
  }

  /// Tracking: the host mask and seqlens from the scheduler's lists, else ONE device->host
  /// copy of the device tensors (docs/sglang.md, "Costs").
  void read_track(nb::handle fb, int32_t bs) {
    SglangStep& s = step_;
    nb::object mask = attr_or_none(fb, "mamba_track_mask");
    nb::object indices = attr_or_none(fb, "mamba_track_indices");
    s.track = !mask.is_none();
    s.track_indices =
        indices.is_none()
            ? nullptr
            : static_cast<const int64_t*>(device(indices, "mamba_track_indices", true, bs));
    s.track_mask = {};
    s.track_seqlens = {};
    s.track_lists = false;
    track_seqlens_.clear();
    if (!s.track) return;
    nb::object mask_cpu = attr_or_none(fb, "mamba_prefill_track_mask_cpu");
    nb::object seq_cpu = attr_or_none(fb, "mamba_track_seqlens_cpu");
    nb::object seqlens = attr_or_none(fb, "mamba_track_seqlens");
    const auto full = [bs](const nb::object& l) {
      return !l.is_none() && static_cast<int32_t>(nb::len(l)) == bs;
    };
    s.track_lists = full(mask_cpu) && full(seq_cpu);
    if (full(mask_cpu) && (full(seq_cpu) || seqlens.is_none())) {
      ints_into(mask_cpu, mask_, "mamba_prefill_track_mask_cpu");
      if (full(seq_cpu)) ints_into(seq_cpu, track_seqlens_, "mamba_track_seqlens_cpu");
    } else if (seqlens.is_none()) {
      ints_into(mask.attr("tolist")(), mask_, "mamba_track_mask");  // one copy
    } else {
      // One copy of both: [mask as int64, seqlens].
      nb::object torch = nb::module_::import_("torch");
      nb::object both =
          torch.attr("cat")(nb::make_tuple(mask.attr("to")(seqlens.attr("dtype")), seqlens));
      std::vector<int64_t> v;
      ints_into(both.attr("tolist")(), v, "mamba_track_mask, mamba_track_seqlens");
      mask_.assign(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2));
      track_seqlens_.assign(v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
    }
    mask_bool_.assign(mask_.begin(), mask_.end());
    s.track_mask = {reinterpret_cast<const bool*>(mask_bool_.data()), mask_bool_.size()};
    if (!track_seqlens_.empty()) s.track_seqlens = track_seqlens_;
  }

  void read_graph(nb::handle graph) {
    SglangGraphBuffers& g = step_.graph;
    g = SglangGraphBuffers{};
    if (graph.is_none()) return;
    const int64_t bs = step_.batch_size, k = step_.draft_token_num;
    const auto buf = [&](size_t i, const char* name, bool int64, int64_t n) -> void* {
      nb::object o = graph[i];
      if (o.is_none()) return nullptr;
      return const_cast<void*>(device(o, name, int64, n));
    };
    g.state_indices = static_cast<int32_t*>(buf(0, "state_indices_list[bs - 1]", false, bs));
    g.query_start_loc =
        static_cast<int32_t*>(buf(1, "query_start_loc_list[bs - 1]", false, bs + 1));
    g.track_indices = static_cast<int64_t*>(buf(2, "mamba_track_indices_buf[:bs]", true, bs));
    g.retrieve_next_token =
        static_cast<int32_t*>(buf(3, "retrieve_next_token_list[bs - 1]", false, bs * k));
    g.retrieve_next_sibling =
        static_cast<int32_t*>(buf(4, "retrieve_next_sibling_list[bs - 1]", false, bs * k));
    g.retrieve_parent_token =
        static_cast<int32_t*>(buf(5, "retrieve_parent_token_list[bs - 1]", false, bs * k));
  }

  /// KDA's prefill-graph entry: the bucket's KDAPrefillGraphMetadata `meta` (its buffers,
  /// written by the build) and the batch's _original_batch_size.
  void read_prefill_graph(nb::handle fb, nb::handle meta) {
    SglangStep& s = step_;
    SglangPrefillGraph& pg = s.prefill_graph;
    pg = SglangPrefillGraph{};
    s.original_batch_size = -1;
    if (meta.is_none()) return;
    nb::object real = attr_or_none(fb, "_original_batch_size");
    s.original_batch_size = real.is_none() ? -1 : to_int32(real, "_original_batch_size");
    pg.num_tokens = to_int32(attr_of(meta, "num_tokens"), "prefill_graph.num_tokens");
    pg.max_seqs = to_int32(attr_of(meta, "max_seqs"), "prefill_graph.max_seqs");
    pg.track = nb::cast<bool>(attr_of(meta, "track"));
    const int64_t rows = std::max(pg.max_seqs, 0);
    const ImportedArray& packed =
        import(attr_of(meta, "packed"), "prefill_graph.packed", true, false);
    pg.packed = static_cast<int32_t*>(const_cast<void*>(packed.data));
    pg.packed_len = packed.shape[0];
    if (packed.ndim != 1) raise_error("sglang: prefill_graph.packed must be one-dimensional");
    nb::object host = attr_or_none(meta, "host");
    if (!host.is_none())
      pg.host = static_cast<int32_t*>(
          const_cast<void*>(import(host, "prefill_graph.host", false, false, pg.packed_len).data));
    pg.cache_indices = static_cast<int32_t*>(const_cast<void*>(
        device(attr_of(meta, "cache_indices"), "prefill_graph.cache_indices", false, rows)));
    pg.has_initial_state = static_cast<bool*>(
        const_cast<void*>(import_as(attr_of(meta, "has_initial_state"),
                                    "prefill_graph.has_initial_state", true, kBool, rows)
                              .data));
    nb::object dst = attr_or_none(meta, "track_dst");
    if (!dst.is_none())
      pg.track_dst = static_cast<int64_t*>(
          const_cast<void*>(device(dst, "prefill_graph.track_dst", true, rows)));
  }

  /// The dict of `members` (composites as dicts); arrays at a caller object's address are
  /// that object.
  nb::dict fields(const Metadata& meta, const std::vector<Member>& members) {
    nb::dict d;
    const CallerArrays none{};
    for (const Member& mb : members) {
      const FieldRef r = mb.spec->field(const_cast<Metadata&>(meta));
      if (r.type == FieldType::Composite) {
        d[mb.name] = r && r.present() ? nb::object(fields(meta, mixed_members_)) : nb::none();
        continue;
      }
      if (r && r.type == FieldType::Array && r.array().present) {
        const Array& a = r.array();
        bool found = false;
        for (const Caller& c : callers_)
          if (c.data == a.data) {
            // A 1-D caller buffer the kind filled in part (ShortConv's _cache_indices_buf):
            // the slice of the batch, as SGLang's buf[:n].
            d[mb.name] =
                c.rows >= 0 && a.ndim == 1 && a.rows < c.rows ? prefix(c.obj, a.rows) : c.obj;
            found = true;
            break;
          }
        if (found) continue;
      }
      d[mb.name] = exporter_->value(*mb.spec, meta, none);
    }
    return d;
  }

  /// obj[:rows], a new view.
  static nb::object prefix(const nb::object& obj, int64_t rows) {
    PyObject* stop = PyLong_FromLongLong(rows);
    if (stop == nullptr) throw nb::python_error();
    PyObject* sl = PySlice_New(nullptr, stop, nullptr);
    Py_DECREF(stop);
    if (sl == nullptr) throw nb::python_error();
    PyObject* v = PyObject_GetItem(obj.ptr(), sl);
    Py_DECREF(sl);
    if (v == nullptr) throw nb::python_error();
    return nb::steal(v);
  }

  /// A caller's array of this call: its address, the object, its 1-D length (-1: 2-D).
  struct Caller {
    const void* data;
    nb::object obj;
    int64_t rows;
  };

  nb::object builder_;
  PyBuilder* b_ = nullptr;
  BuilderKind kind_{};
  nb::object pool_;
  std::unique_ptr<FieldExporter> exporter_;
  std::vector<Member> members_, mixed_members_;
  SglangStep step_;
  Stream stream_ = nullptr;
  std::vector<ImportedArray> arrays_;
  std::vector<Caller> callers_;
  std::vector<int32_t> ext_, prefix_;
  std::vector<int64_t> mask_, track_seqlens_;
  std::vector<uint8_t> mask_bool_;
};

}  // namespace

void bind_sglang(nb::module_& m) {
  nb::module_ sub = m.def_submodule("sglang", "The native half of linmeta.sglang.");
  nb::class_<SglangEngine>(sub, "Engine", nb::type_slots(GcSlots<SglangEngine>::slots),
                           nb::is_weak_referenceable(),
                           "The native half of one linmeta.sglang backend object, over its own "
                           "linmeta.MetadataBuilder (python/src/sglang/engine.hpp).")
      .def(nb::init<nb::handle, nb::object, int32_t, int32_t, int32_t, bool, bool>(), "builder"_a,
           "pool"_a, "cache_chunk_size"_a, "conv_window"_a, "topk"_a, "conv_block_table"_a,
           "host_mirrors"_a = false)
      .def("build", &SglangEngine::build, "forward_batch"_a, "entry"_a, "graph"_a.none(),
           "cache_indices_buf"_a.none() = nb::none());
}

}  // namespace linmeta::py

// linmeta._linmeta: Python bindings of the GDN / KDA metadata builders.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "arrays.hpp"
#include "linmeta/linmeta.hpp"
#include "metadata.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace linmeta::py {

namespace {

CacheMode parse_cache_mode(const std::string& s) {
  if (s == "none") return CacheMode::None;
  if (s == "all") return CacheMode::All;
  if (s == "align") return CacheMode::Align;
  raise_error("mamba_cache_mode = '" + s + "' must be 'none', 'all' or 'align'");
}

const char* cache_mode_name(CacheMode m) {
  switch (m) {
    case CacheMode::All:
      return "all";
    case CacheMode::Align:
      return "align";
    default:
      return "none";
  }
}

Target parse_target(const std::string& s) {
  if (s == "host" || s == "cpu") return Target::Host;
  if (s == "cuda") return Target::Cuda;
  raise_error("target = '" + s + "' must be 'host' or 'cuda'");
}

/// `stream`: None, an int cudaStream_t handle (0 = legacy default stream) or an
/// object with a `cuda_stream` attribute (torch.cuda.Stream).
Stream parse_stream(nb::handle s) {
  if (!s.is_valid() || s.is_none()) return nullptr;
  nb::handle v = s;
  nb::object attr;
  if (!PyLong_Check(s.ptr()) && nb::hasattr(s, "cuda_stream")) {
    attr = s.attr("cuda_stream");
    v = attr;
  }
  if (!PyLong_Check(v.ptr()))
    throw nb::type_error(
        "linmeta: stream must be an int cudaStream_t handle (e.g. "
        "torch.cuda.current_stream().cuda_stream), a torch.cuda.Stream or None");
  const unsigned long long h = PyLong_AsUnsignedLongLong(v.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    raise_error("stream handle is out of range");
  }
  return reinterpret_cast<Stream>(static_cast<uintptr_t>(h));
}

struct PyBuilder {
  PyBuilder(BuilderKind kind, const Config& config, const BuilderOptions& options, int32_t device,
            ArrayType type)
      : builder(kind, config, options), device_id(device), array_type(type) {}

  MetadataBuilder builder;
  int32_t device_id;  ///< cuda target: the device holding the buffers
  ArrayType array_type;

  [[nodiscard]] TargetMemory memory() const { return {builder.target(), device_id}; }
};

struct PyGdnBuilder : PyBuilder {
  using PyBuilder::PyBuilder;
};
struct PyKdaBuilder : PyBuilder {
  using PyBuilder::PyBuilder;
};

/// The Python arguments of one step.
struct StepArgs {
  nb::handle query_start_loc_cpu, seq_lens, seq_lens_cpu_upper_bound, num_actual_tokens;
  nb::handle query_start_loc, is_prefilling, num_decode_draft_tokens_cpu, num_accepted_tokens,
      num_reqs;
  nb::handle stream;
};

/// A step ready for the C++ builder; holds the imported arrays alive.
struct PreparedStep {
  Step step;
  std::deque<ImportedArray> arrays;  // stable addresses while more are added
  std::vector<BlockTable> tables;
  std::vector<nb::object> table_objects;
  Stream stream = nullptr;
};

int32_t to_int32(nb::handle v, const char* name) {
  if (!PyLong_Check(v.ptr()) && !PyIndex_Check(v.ptr()))
    throw nb::type_error(("linmeta: " + std::string(name) + " must be an int").c_str());
  const long long x = PyLong_AsLongLong(nb::int_(v).ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    raise_error(std::string(name) + " is out of range");
  }
  if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
    raise_error(std::string(name) + " = " + std::to_string(x) + " does not fit in int32");
  return static_cast<int32_t>(x);
}

void check_length(const ImportedArray& a, const char* name, int64_t need, bool exact,
                  const char* what) {
  if (exact ? a.shape[0] != need : a.shape[0] < need)
    raise_error(std::string(name) + " has " + std::to_string(a.shape[0]) + " entries, expected " +
                (exact ? "" : "at least ") + what + " = " + std::to_string(need));
}

BlockTable import_table(PreparedStep& p, nb::handle obj, const char* name, int32_t num_reqs,
                        const TargetMemory& mem) {
  if (!obj.is_valid() || obj.is_none()) raise_error(std::string(name) + " is required");
  ImportedArray a = import_array(obj, name, p.stream);
  require(a, name, {.device = true, .boolean = false, .ndim = 2}, mem);
  if (a.shape[0] < num_reqs)
    raise_error(std::string(name) + " has " + std::to_string(a.shape[0]) +
                " rows, the step has num_reqs = " + std::to_string(num_reqs));
  if (a.shape[1] > std::numeric_limits<int32_t>::max())
    raise_error(std::string(name) + " is too wide (" + std::to_string(a.shape[1]) + " columns)");
  BlockTable t;
  t.data = static_cast<const int32_t*>(a.data);
  t.width = static_cast<int32_t>(a.shape[1]);
  t.row_stride = a.shape[0] > 1 ? a.strides[0] : std::max<int64_t>(a.strides[0], a.shape[1]);
  p.arrays.push_back(std::move(a));
  p.table_objects.push_back(nb::borrow(obj));
  return t;
}

/// Imports and checks every step input (no copies; nothing is written).
void prepare(PreparedStep& p, const PyBuilder& b, const StepArgs& a) {
  const TargetMemory mem = b.memory();
  p.stream = mem.target == Target::Cuda ? parse_stream(a.stream) : nullptr;
  if (mem.target == Target::Host) (void)parse_stream(a.stream);  // still type-check it
  Step& s = p.step;

  auto imp = [&](nb::handle obj, const char* name, Requirement req,
                 bool required) -> ImportedArray* {
    if (!obj.is_valid() || obj.is_none()) {
      if (required) raise_error(std::string(name) + " is required");
      return nullptr;
    }
    ImportedArray arr = import_array(obj, name, p.stream);
    require(arr, name, req, mem);
    p.arrays.push_back(std::move(arr));
    return &p.arrays.back();
  };
  const Requirement host_i32{.device = false, .boolean = false, .ndim = 1};
  const Requirement dev_i32{.device = true, .boolean = false, .ndim = 1};
  const Requirement host_bool{.device = false, .boolean = true, .ndim = 1};

  const ImportedArray* qsl_cpu = imp(a.query_start_loc_cpu, "query_start_loc_cpu", host_i32, true);
  const bool explicit_n = a.num_reqs.is_valid() && !a.num_reqs.is_none();
  int32_t n;
  if (explicit_n) {
    n = to_int32(a.num_reqs, "num_reqs");
    if (n < 0) raise_error("num_reqs = " + std::to_string(n) + " is negative");
    check_length(*qsl_cpu, "query_start_loc_cpu", int64_t{n} + 1, false, "num_reqs + 1");
  } else {
    if (qsl_cpu->shape[0] < 1)
      raise_error("query_start_loc_cpu is empty (it holds num_reqs + 1 entries)");
    if (qsl_cpu->shape[0] - 1 > std::numeric_limits<int32_t>::max())
      raise_error("query_start_loc_cpu is too long");
    n = static_cast<int32_t>(qsl_cpu->shape[0] - 1);
  }
  const bool exact = !explicit_n;
  s.num_reqs = n;
  s.num_actual_tokens = to_int32(a.num_actual_tokens, "num_actual_tokens");
  s.query_start_loc_cpu = {static_cast<const int32_t*>(qsl_cpu->data), static_cast<size_t>(n) + 1};

  const ImportedArray* ub =
      imp(a.seq_lens_cpu_upper_bound, "seq_lens_cpu_upper_bound", host_i32, true);
  check_length(*ub, "seq_lens_cpu_upper_bound", n, exact, "num_reqs");
  s.seq_lens_cpu_upper_bound = {static_cast<const int32_t*>(ub->data), static_cast<size_t>(n)};

  if (const ImportedArray* ip = imp(a.is_prefilling, "is_prefilling", host_bool, false)) {
    check_length(*ip, "is_prefilling", n, exact, "num_reqs");
    s.is_prefilling = {static_cast<const bool*>(ip->data), static_cast<size_t>(n)};
  }
  if (const ImportedArray* dr =
          imp(a.num_decode_draft_tokens_cpu, "num_decode_draft_tokens_cpu", host_i32, false)) {
    check_length(*dr, "num_decode_draft_tokens_cpu", n, exact, "num_reqs");
    s.num_decode_draft_tokens = {static_cast<const int32_t*>(dr->data), static_cast<size_t>(n)};
  }

  // Device (target-memory) arrays. On the host target query_start_loc defaults to the host copy.
  if (a.query_start_loc.is_valid() && !a.query_start_loc.is_none()) {
    const ImportedArray* q = imp(a.query_start_loc, "query_start_loc", dev_i32, true);
    check_length(*q, "query_start_loc", int64_t{n} + 1, exact, "num_reqs + 1");
    s.query_start_loc = static_cast<const int32_t*>(q->data);
  } else if (mem.target == Target::Host) {
    s.query_start_loc = s.query_start_loc_cpu.data();
  } else {
    raise_error("query_start_loc (device) is required on the cuda target");
  }
  const ImportedArray* sl = imp(a.seq_lens, "seq_lens", dev_i32, true);
  check_length(*sl, "seq_lens", n, exact, "num_reqs");
  s.seq_lens = static_cast<const int32_t*>(sl->data);
  if (const ImportedArray* acc =
          imp(a.num_accepted_tokens, "num_accepted_tokens", dev_i32, false)) {
    check_length(*acc, "num_accepted_tokens", n, exact, "num_reqs");
    s.num_accepted_tokens = static_cast<const int32_t*>(acc->data);
  }
}

nb::object make_metadata(const Metadata& m, nb::handle builder_obj, const PyBuilder& b,
                         nb::object table, int32_t group, int32_t num_reqs) {
  return nb::cast(PyMetadata(m, nb::borrow(builder_obj), std::move(table), group, num_reqs,
                             b.device_id, b.array_type));
}

nb::object build_one(nb::pointer_and_handle<PyBuilder> self, const StepArgs& a,
                     nb::handle block_table, bool capture) {
  PyBuilder& b = *self.p;
  PreparedStep p;
  prepare(p, b, a);
  p.step.block_table = import_table(p, block_table, "block_table", p.step.num_reqs, b.memory());
  const Metadata& m = capture ? b.builder.build_for_cudagraph_capture(p.step, p.stream)
                              : b.builder.build(p.step, p.stream);
  return make_metadata(m, self.h, b, p.table_objects[0], 0, p.step.num_reqs);
}

nb::list build_groups(nb::pointer_and_handle<PyBuilder> self, const StepArgs& a,
                      nb::handle block_tables, bool capture) {
  PyBuilder& b = *self.p;
  PreparedStep p;
  prepare(p, b, a);
  if (!block_tables.is_valid() || block_tables.is_none() || !PySequence_Check(block_tables.ptr()))
    throw nb::type_error(
        "linmeta: block_tables must be a sequence of block tables, one per KV-cache group");
  nb::object seq = nb::borrow(block_tables);
  const size_t G = nb::len(seq);
  for (size_t g = 0; g < G; ++g) {
    const std::string name = "block_tables[" + std::to_string(g) + "]";
    nb::object t = seq[g];
    p.tables.push_back(import_table(p, t, name.c_str(), p.step.num_reqs, b.memory()));
  }
  if (!p.tables.empty()) p.step.block_table = p.tables[0];
  std::span<const Metadata> ms =
      capture ? b.builder.build_groups_for_cudagraph_capture(p.step, p.tables, p.stream)
              : b.builder.build_groups(p.step, p.tables, p.stream);
  nb::list out;
  for (size_t g = 0; g < ms.size(); ++g)
    out.append(make_metadata(ms[g], self.h, b, p.table_objects[g], static_cast<int32_t>(g),
                             p.step.num_reqs));
  return out;
}

nb::dict config_dict(const Config& c) {
  nb::dict d;
  d["num_spec"] = c.num_spec;
  d["max_num_seqs"] = c.max_num_seqs;
  d["max_num_batched_tokens"] = c.max_num_batched_tokens;
  d["full_cuda_graph"] = c.full_cuda_graph;
  d["max_cudagraph_capture_size"] = c.max_cudagraph_capture_size > 0
                                        ? nb::object(nb::int_(c.max_cudagraph_capture_size))
                                        : nb::none();
  d["mamba_cache_mode"] = cache_mode_name(c.mamba_cache_mode);
  d["block_size"] = c.block_size;
  d["num_speculative_blocks"] = c.num_speculative_blocks;
  d["chunk_metadata"] = c.chunk_metadata;
  d["use_recoverssm"] = c.use_recoverssm;
  d["num_prefill_checkpoint_blocks"] = c.num_prefill_checkpoint_blocks;
  return d;
}

const char* kBuildDoc =
    "Builds this step's metadata (group 0 of a single-group builder).\n\n"
    "Host arrays (CPU memory): query_start_loc_cpu [num_reqs + 1] int32, seq_lens_cpu_upper_bound\n"
    "[num_reqs] int32, is_prefilling [num_reqs] bool (optional), num_decode_draft_tokens_cpu "
    "[num_reqs]\n"
    "int32 (optional). Device arrays (the target's memory): query_start_loc [num_reqs + 1] int32 "
    "(may be\n"
    "omitted on the host target), seq_lens [num_reqs] int32, num_accepted_tokens [num_reqs] int32\n"
    "(optional), block_table [>= num_reqs, W] int32 with contiguous rows. num_actual_tokens: "
    "padded\n"
    "token count. num_reqs: defaults to len(query_start_loc_cpu) - 1; when given, arrays may be "
    "longer.\n"
    "stream: cudaStream_t as an int (torch.cuda.current_stream().cuda_stream) or a "
    "torch.cuda.Stream.\n"
    "Arrays are read without copies; they must stay alive until the enqueued work has run.";

template <class Cls>
void def_build_methods(Cls& cls) {
  auto step_args = [](nb::handle qsl_cpu, nb::handle seq_lens, nb::handle ub, nb::handle nat,
                      nb::handle qsl, nb::handle ip, nb::handle drafts, nb::handle accepted,
                      nb::handle num_reqs, nb::handle stream) {
    StepArgs a;
    a.query_start_loc_cpu = qsl_cpu;
    a.seq_lens = seq_lens;
    a.seq_lens_cpu_upper_bound = ub;
    a.num_actual_tokens = nat;
    a.query_start_loc = qsl;
    a.is_prefilling = ip;
    a.num_decode_draft_tokens_cpu = drafts;
    a.num_accepted_tokens = accepted;
    a.num_reqs = num_reqs;
    a.stream = stream;
    return a;
  };
#define LINMETA_STEP_PARAMS                                                                        \
  nb::handle query_start_loc_cpu, nb::handle seq_lens, nb::handle seq_lens_cpu_upper_bound,        \
      nb::handle num_actual_tokens, nb::handle query_start_loc, nb::handle is_prefilling,          \
      nb::handle num_decode_draft_tokens_cpu, nb::handle num_accepted_tokens, nb::handle num_reqs, \
      nb::handle stream
#define LINMETA_STEP_ARGS                                                                     \
  step_args(query_start_loc_cpu, seq_lens, seq_lens_cpu_upper_bound, num_actual_tokens,       \
            query_start_loc, is_prefilling, num_decode_draft_tokens_cpu, num_accepted_tokens, \
            num_reqs, stream)
#define LINMETA_STEP_NAMES                                                                  \
  "query_start_loc_cpu"_a.none(), "seq_lens"_a.none(), "seq_lens_cpu_upper_bound"_a.none(), \
      "num_actual_tokens"_a,                                                                \
      "query_start_loc"_a.none() = nb::none(), "is_prefilling"_a.none() = nb::none(),       \
      "num_decode_draft_tokens_cpu"_a.none() = nb::none(),                                  \
      "num_accepted_tokens"_a.none() = nb::none(), "num_reqs"_a.none() = nb::none(),        \
      "stream"_a.none() = 0

  cls.def(
      "build",
      [step_args](nb::pointer_and_handle<PyBuilder> self, nb::handle block_table,
                  LINMETA_STEP_PARAMS) {
        return build_one(self, LINMETA_STEP_ARGS, block_table, false);
      },
      nb::kw_only(), "block_table"_a.none(), LINMETA_STEP_NAMES, kBuildDoc);
  cls.def(
      "build_for_cudagraph_capture",
      [step_args](nb::pointer_and_handle<PyBuilder> self, nb::handle block_table,
                  LINMETA_STEP_PARAMS) {
        return build_one(self, LINMETA_STEP_ARGS, block_table, true);
      },
      nb::kw_only(), "block_table"_a.none(), LINMETA_STEP_NAMES,
      "vLLM's capture build: num_accepted_tokens = query lengths, drafts = query lengths - 1, then "
      "a "
      "normal build. Requires num_reqs and num_actual_tokens <= decode_cudagraph_max_bs.");
  cls.def(
      "build_groups",
      [step_args](nb::pointer_and_handle<PyBuilder> self, nb::handle block_tables,
                  LINMETA_STEP_PARAMS) {
        return build_groups(self, LINMETA_STEP_ARGS, block_tables, false);
      },
      nb::kw_only(), "block_tables"_a.none(), LINMETA_STEP_NAMES,
      "Plans the step once and builds every KV-cache group from its own block table "
      "(len(block_tables) == num_groups). Returns a list with one Metadata per group.");
  cls.def(
      "build_groups_for_cudagraph_capture",
      [step_args](nb::pointer_and_handle<PyBuilder> self, nb::handle block_tables,
                  LINMETA_STEP_PARAMS) {
        return build_groups(self, LINMETA_STEP_ARGS, block_tables, true);
      },
      nb::kw_only(), "block_tables"_a.none(), LINMETA_STEP_NAMES,
      "build_groups() as a capture build.");
#undef LINMETA_STEP_PARAMS
#undef LINMETA_STEP_ARGS
#undef LINMETA_STEP_NAMES
}

template <class T>
void def_kind(nb::module_& m, nb::class_<PyBuilder>& /*base*/, const char* name, BuilderKind kind,
              const char* doc) {
  nb::class_<T, PyBuilder>(m, name, doc)
      .def(
          "__init__",
          [kind](T* self, int32_t num_spec, int32_t max_num_seqs, int32_t max_num_batched_tokens,
                 bool full_cuda_graph, std::optional<int32_t> max_cudagraph_capture_size,
                 const std::string& mamba_cache_mode, int32_t block_size,
                 int32_t num_speculative_blocks, bool chunk_metadata, bool use_recoverssm,
                 int32_t num_prefill_checkpoint_blocks, const std::string& target,
                 int32_t num_groups, const std::string& array_type, int32_t staging_slots,
                 int32_t capture_slots) {
            Config c;
            c.num_spec = num_spec;
            c.max_num_seqs = max_num_seqs;
            c.max_num_batched_tokens = max_num_batched_tokens;
            c.full_cuda_graph = full_cuda_graph;
            c.max_cudagraph_capture_size = max_cudagraph_capture_size.value_or(0);
            c.mamba_cache_mode = parse_cache_mode(mamba_cache_mode);
            c.block_size = block_size;
            c.num_speculative_blocks = num_speculative_blocks;
            c.chunk_metadata = chunk_metadata;
            c.use_recoverssm = use_recoverssm;
            c.num_prefill_checkpoint_blocks = num_prefill_checkpoint_blocks;
            BuilderOptions o;
            o.target = parse_target(target);
            o.num_groups = num_groups;
            o.staging_slots = staging_slots;
            o.capture_slots = capture_slots;
            const ArrayType at = parse_array_type(array_type);
            if (at == ArrayType::Numpy && o.target == Target::Cuda)
              raise_error(
                  "array_type = 'numpy' needs target = 'host' (numpy arrays live in host memory)");
            int dev = 0;
            if (o.target == Target::Cuda && cudaGetDevice(&dev) != cudaSuccess) {
              cudaGetLastError();
              dev = 0;
            }
            new (self) T(kind, c, o, dev, at);
          },
          nb::kw_only(), "num_spec"_a = 0, "max_num_seqs"_a = 256,
          "max_num_batched_tokens"_a = 8192, "full_cuda_graph"_a = false,
          "max_cudagraph_capture_size"_a = nb::none(), "mamba_cache_mode"_a = "none",
          "block_size"_a = 16, "num_speculative_blocks"_a = 0, "chunk_metadata"_a = true,
          "use_recoverssm"_a = false, "num_prefill_checkpoint_blocks"_a = 0, "target"_a = "host",
          "num_groups"_a = 1, "array_type"_a = "dlpack", "staging_slots"_a = 4,
          "capture_slots"_a = 8);
}

// ----------------------------------------------------------------------------------------------
// The vLLM adapter's fast path (python/linmeta/vllm): one call per scheduler step and group,
// inputs read in place, outputs as cached views of the builder's persistent buffers.

/// Views of a builder's buffers, made once per (address, shape, dtype, memory) and handed out
/// again on every later step with the same shape. A view with fewer rows than one made
/// before at the same address is sliced from it (no DLPack export).
class ViewCache {
 public:
  ViewCache(nb::object owner, int32_t device_id, ArrayType type)
      : owner_(std::move(owner)), device_id_(device_id), type_(type) {}

  template <class T>
  nb::object get(const Array<T>& a, bool device, int64_t rows = -1) {
    if (!a.present) return nb::none();
    constexpr bool kBool = std::is_same_v<T, bool>;
    const Key key{reinterpret_cast<uintptr_t>(a.data),
                  rows >= 0 ? rows : a.rows,
                  a.cols,
                  a.ndim,
                  kBool,
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
      const nb::dlpack::dtype dt =
          kBool ? nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Bool), 8, 1}
                : nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Int), 32, 1};
      view = export_array(a.data, a.ndim, key.rows, a.cols, dt, device ? kDLCUDA : kDLCPU,
                          device ? device_id_ : 0, owner_, type_);
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
    bool boolean;
    bool device;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      size_t h = std::hash<uintptr_t>{}(k.ptr);
      h ^= std::hash<int64_t>{}(k.rows) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h ^= static_cast<size_t>(k.cols) * 31 + static_cast<size_t>(k.ndim) * 7 +
           (k.boolean ? 3 : 0) + (k.device ? 5 : 0);
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

/// One builder's step state for the vLLM adapter: build every group once per step, then serve
/// each group's fields (re-gathering its state indices when its table differs).
///
/// Fields are returned as a new dict per call, keyed by the names given to configure() (the
/// engine's dataclass field names; positions as in kFieldCount below), starting from a copy of
/// the dataclass defaults, so that the adapter can install it as the instance __dict__.
class VllmSession {
 public:
  /// Positions of the fields, in the order of the `names` tuple of configure().
  enum Pos : int32_t {
    kNumPrefills,
    kNumPrefillTokens,
    kNumDecodes,
    kNumDecodeTokens,
    kNumSpecDecodes,
    kNumSpecDecodeTokens,
    kNumActualTokens,
    kUniform,
    kHasInitialState,
    kChunkIndices,
    kChunkOffsets,
    kPrefillQsl,
    kPrefillStateIndices,
    kPrefillHasInitialState,
    kSpecQsl,
    kNonSpecQsl,
    kSpecStateIndices,
    kNonSpecStateIndices,
    kSpecSequenceMasks,
    kSpecTokenIndx,
    kNonSpecTokenIndx,
    kNumAccepted,
    kConv,        ///< (tot, nums host view, batch_ptr, token_chunk_offset_ptr) or None
    kCommit,      ///< (state_indices, query_start_loc, request_indices, align) or None
    kCheckpoint,  ///< (checkpoint_offsets, state_indices) or None
    kMasksCpu,    ///< host bool [num_reqs]: drafts >= 0 (capture: query length >= 1)
    kFieldCount,
  };

  explicit VllmSession(nb::handle builder)
      : builder_obj_(nb::borrow(builder)),
        b_(nb::inst_ptr<PyBuilder>(builder)),
        cache_(nb::borrow(builder), b_->device_id, b_->array_type) {}

  /// names: kFieldCount entries, a str (the dict key) or None (not returned). defaults: the
  /// dict every result starts from. mask_ring: None or a contiguous host torch.bool tensor
  /// [slots, >= max_num_seqs] that receives the host spec mask of each step (a new row per
  /// step, cycling), returned under names[kMasksCpu] when the step has spec decodes.
  void configure(nb::tuple names, nb::dict defaults, nb::object mask_ring) {
    if (nb::len(names) != kFieldCount)
      raise_error("VllmSession.configure: names needs " + std::to_string(kFieldCount) + " entries");
    for (int32_t i = 0; i < kFieldCount; ++i) names_[static_cast<size_t>(i)] = names[i];
    defaults_ = std::move(defaults);
    ring_ = std::move(mask_ring);
    ring_views_.clear();
    ring_data_ = nullptr;
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

  /// Plans the step once, finishes every group from `tables` (one per group) and returns
  /// group `group`'s fields.
  nb::object build(const StepArgs& a, nb::handle tables, bool capture, int32_t group) {
    PreparedStep p;
    prepare(p, *b_, a);
    if (!PyTuple_Check(tables.ptr()) && !PyList_Check(tables.ptr()))
      throw nb::type_error("linmeta: tables must be a tuple or list of block tables");
    const auto G = static_cast<size_t>(PySequence_Fast_GET_SIZE(tables.ptr()));
    PyObject** items = PySequence_Fast_ITEMS(tables.ptr());
    for (size_t g = 0; g < G; ++g)
      p.tables.push_back(
          import_table(p, nb::handle(items[g]), "block_table", p.step.num_reqs, b_->memory()));
    if (!p.tables.empty()) p.step.block_table = p.tables[0];
    built_ = false;
    std::span<const Metadata> ms =
        capture ? b_->builder.build_groups_for_cudagraph_capture(p.step, p.tables, p.stream)
                : b_->builder.build_groups(p.step, p.tables, p.stream);
    mds_.assign(ms.begin(), ms.end());
    num_reqs_ = p.step.num_reqs;
    built_ = true;
    remember(a, p, tables, capture, group);
    masks_ = nb::none();
    if (ring_data_ != nullptr && !mds_.empty() && mds_[0].num_spec_decodes > 0)
      masks_ = host_masks(p.step, capture);
    return fields(group);
  }

  /// Group `group`'s fields of the last build; with a table, its state indices are first
  /// re-gathered from that table (update_block_table). Marks the group served.
  nb::object serve(int32_t group, nb::handle table, nb::handle stream) {
    check_group(group);
    if (table.is_valid() && !table.is_none()) regather(group, table, stream);
    served_ |= uint64_t{1} << group;
    return fields(group);
  }

  /// The served-group fast path: when this call passes the very objects of the last build
  /// (identity; counts equal) and `group` was not served yet in this step, serves it —
  /// re-gathering its state indices unless the build already used this table — and returns
  /// its fields. Otherwise returns None (the caller decides: equal values or a new step).
  nb::object step(const StepArgs& a, nb::handle table, bool capture, int32_t group) {
    if (!built_ || group < 0 || static_cast<size_t>(group) >= mds_.size() ||
        (served_ >> group & 1) != 0 || capture != capture_)
      return nb::none();
    const nb::handle in[kInputs] = {
        a.query_start_loc_cpu, a.seq_lens,      a.seq_lens_cpu_upper_bound,
        a.query_start_loc,     a.is_prefilling, a.num_decode_draft_tokens_cpu,
        a.num_accepted_tokens};
    for (int32_t i = 0; i < kInputs; ++i)
      if (!in[i].is(inputs_[static_cast<size_t>(i)])) return nb::none();
    if (to_int32(a.num_actual_tokens, "num_actual_tokens") != num_actual_tokens_ ||
        to_int32(a.num_reqs, "num_reqs") != num_reqs_)
      return nb::none();
    const auto g = static_cast<size_t>(group);
    if (!table.is(table_objs_[g])) {
      PreparedStep p;
      const BlockTable t = import_table(p, table, "block_table", num_reqs_, b_->memory());
      if (t.data != used_[g].data || t.row_stride != used_[g].row_stride ||
          t.width != used_[g].width)
        regather(group, table, a.stream);
    }
    served_ |= uint64_t{1} << group;
    return fields(group);
  }

  [[nodiscard]] size_t cached_views() const { return cache_.size(); }

 private:
  void check_group(int32_t group) const {
    if (!built_) raise_error("VllmSession: no step built yet");
    if (group < 0 || static_cast<size_t>(group) >= mds_.size())
      raise_error("VllmSession: group " + std::to_string(group) + " is outside [0, " +
                  std::to_string(mds_.size()) + ")");
  }

  static constexpr int32_t kInputs = 7;

  void regather(int32_t group, nb::handle table, nb::handle stream) {
    PreparedStep p;
    p.stream = b_->builder.target() == Target::Cuda ? parse_stream(stream) : nullptr;
    const auto g = static_cast<size_t>(group);
    const BlockTable t = import_table(p, table, "block_table", num_reqs_, b_->memory());
    mds_[g] = b_->builder.update_block_table(mds_[g], t, group, p.stream);
    used_[g] = t;
    table_objs_[g] = nb::borrow(table);
  }

  /// What identifies the step just built (the step() fast path compares these objects).
  void remember(const StepArgs& a, const PreparedStep& p, nb::handle tables, bool capture,
                int32_t group) {
    const nb::handle in[kInputs] = {
        a.query_start_loc_cpu, a.seq_lens,      a.seq_lens_cpu_upper_bound,
        a.query_start_loc,     a.is_prefilling, a.num_decode_draft_tokens_cpu,
        a.num_accepted_tokens};
    for (int32_t i = 0; i < kInputs; ++i)
      inputs_[static_cast<size_t>(i)] = in[i].is_valid() ? nb::borrow(in[i]) : nb::none();
    num_actual_tokens_ = p.step.num_actual_tokens;
    capture_ = capture;
    used_ = p.tables;
    table_objs_.assign(used_.size(), nb::object());
    PyObject** items = PySequence_Fast_ITEMS(tables.ptr());
    for (size_t g = 0; g < used_.size(); ++g) table_objs_[g] = nb::borrow(items[g]);
    served_ = group >= 0 && group < 64 ? uint64_t{1} << group : 0;
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

  nb::object fields(int32_t group) {
    check_group(group);
    const Metadata& m = mds_[static_cast<size_t>(group)];
    const bool dev = m.target == Target::Cuda;
    nb::object out = nb::steal(defaults_.is_valid() ? PyDict_Copy(defaults_.ptr()) : PyDict_New());
    if (!out.is_valid()) throw nb::python_error();
    auto put = [&](Pos pos, nb::object v) {
      const nb::object& key = names_[static_cast<size_t>(pos)];
      if (key.is_valid() && !key.is_none() && PyDict_SetItem(out.ptr(), key.ptr(), v.ptr()) != 0)
        throw nb::python_error();
    };
    put(kNumPrefills, nb::int_(m.num_prefills));
    put(kNumPrefillTokens, nb::int_(m.num_prefill_tokens));
    put(kNumDecodes, nb::int_(m.num_decodes));
    put(kNumDecodeTokens, nb::int_(m.num_decode_tokens));
    put(kNumSpecDecodes, nb::int_(m.num_spec_decodes));
    put(kNumSpecDecodeTokens, nb::int_(m.num_spec_decode_tokens));
    put(kNumActualTokens, nb::int_(m.num_actual_tokens));
    put(kUniform, m.uniform_spec_sequence_length
                      ? nb::object(nb::int_(*m.uniform_spec_sequence_length))
                      : nb::none());
    put(kHasInitialState, cache_.get(m.has_initial_state, dev));
    put(kChunkIndices, cache_.get(m.chunk_indices, dev));
    put(kChunkOffsets, cache_.get(m.chunk_offsets, dev));
    put(kPrefillQsl, cache_.get(m.prefill_query_start_loc, dev));
    put(kPrefillStateIndices, cache_.get(m.prefill_state_indices, dev));
    put(kPrefillHasInitialState, cache_.get(m.prefill_has_initial_state, dev));
    put(kSpecQsl, cache_.get(m.spec_query_start_loc, dev));
    put(kNonSpecQsl, cache_.get(m.non_spec_query_start_loc, dev));
    put(kSpecStateIndices, cache_.get(m.spec_state_indices_tensor, dev));
    put(kNonSpecStateIndices, cache_.get(m.non_spec_state_indices_tensor, dev));
    put(kSpecSequenceMasks, cache_.get(m.spec_sequence_masks, dev));
    put(kSpecTokenIndx, cache_.get(m.spec_token_indx, dev));
    put(kNonSpecTokenIndx, cache_.get(m.non_spec_token_indx, dev));
    put(kNumAccepted, cache_.get(m.num_accepted_tokens, dev));
    if (m.conv1d) {
      const Conv1dMetadata& cv = *m.conv1d;
      // vLLM's compute_causal_conv1d_metadata allocates 2 * max(1024, tot) programs.
      const int64_t programs = 2 * std::max<int64_t>(1024, cv.tot);
      if (programs > cv.batch_ptr.rows)
        raise_error("conv1d program capacity " + std::to_string(cv.batch_ptr.rows) +
                    " is below vLLM's 2 * max(1024, tot) = " + std::to_string(programs));
      put(kConv, nb::make_tuple(cv.tot, cache_.get(cv.nums, false),
                                cache_.get(cv.batch_ptr, dev, programs),
                                cache_.get(cv.token_chunk_offset_ptr, dev, programs)));
    }
    if (m.recoverssm_commit) {
      const RecoverSsmCommit& rc = *m.recoverssm_commit;
      nb::object align = nb::none();
      if (rc.align)
        align =
            nb::make_tuple(cache_.get(rc.align->num_computed_tokens, dev), rc.align->block_size);
      put(kCommit,
          nb::make_tuple(cache_.get(rc.state_indices, dev), cache_.get(rc.query_start_loc, dev),
                         cache_.get(rc.request_indices, dev), align));
    }
    if (m.checkpoint)
      put(kCheckpoint, nb::make_tuple(cache_.get(m.checkpoint->checkpoint_offsets, dev),
                                      cache_.get(m.checkpoint->state_indices, dev)));
    if (!masks_.is_none()) put(kMasksCpu, masks_);
    return out;
  }

  nb::object builder_obj_;  ///< keeps the builder (and its buffers) alive
  PyBuilder* b_;
  ViewCache cache_;
  std::vector<Metadata> mds_;
  int32_t num_reqs_ = 0;
  bool built_ = false;
  std::array<nb::object, kFieldCount> names_{};
  nb::object defaults_;
  nb::object ring_ = nb::none();
  bool* ring_data_ = nullptr;
  int32_t ring_slots_ = 0;
  int32_t ring_next_ = 0;
  int64_t ring_width_ = 0;
  int64_t ring_stride_ = 0;
  std::unordered_map<int64_t, nb::object> ring_views_;
  nb::object masks_ = nb::none();
  std::array<nb::object, kInputs> inputs_{};
  int32_t num_actual_tokens_ = 0;
  bool capture_ = false;
  uint64_t served_ = 0;
  std::vector<BlockTable> used_;
  std::vector<nb::object> table_objs_;
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
  int64_t tot = 0;
  for (int64_t i = 0; i < nums.shape[0]; ++i) tot += std::max(n[i], 0);
  if (mlist.shape[0] != tot || offsets.shape[0] != tot)
    raise_error("fill_conv_lists: mlist and offsetlist need sum(nums) = " + std::to_string(tot) +
                " entries");
  auto* ml = static_cast<int64_t*>(const_cast<void*>(mlist.data));
  auto* off = static_cast<int32_t*>(const_cast<void*>(offsets.data));
  int64_t p = 0;
  for (int64_t i = 0; i < nums.shape[0]; ++i)
    for (int32_t c = 0; c < n[i]; ++c, ++p) {
      ml[p] = i;
      off[p] = c;
    }
}

void bind_vllm_session(nb::module_& m) {
  m.def("fill_conv_lists", &fill_conv_lists, "nums"_a, "mlist"_a, "offsetlist"_a,
        "vLLM's causal-conv1d host lists (mlist int64, offsetlist int32) from the programs per "
        "sequence, written into the given host arrays of sum(nums) entries.");
  nb::class_<VllmSession>(
      m, "VllmSession",
      "Fast path of linmeta.vllm (internal): builds a step for every KV-cache group of a builder "
      "and serves each group's fields as a tuple of cached views of the persistent buffers.")
      .def(nb::init<nb::handle>(), "builder"_a)
      .def(
          "build",
          [](VllmSession& s, nb::handle qsl_cpu, nb::handle seq_lens, nb::handle ub,
             nb::handle num_actual_tokens, nb::handle qsl, nb::handle is_prefilling,
             nb::handle drafts, nb::handle accepted, nb::handle num_reqs, nb::handle stream,
             nb::handle tables, bool capture, int32_t group) {
            StepArgs a;
            a.query_start_loc_cpu = qsl_cpu;
            a.seq_lens = seq_lens;
            a.seq_lens_cpu_upper_bound = ub;
            a.num_actual_tokens = num_actual_tokens;
            a.query_start_loc = qsl;
            a.is_prefilling = is_prefilling;
            a.num_decode_draft_tokens_cpu = drafts;
            a.num_accepted_tokens = accepted;
            a.num_reqs = num_reqs;
            a.stream = stream;
            return s.build(a, tables, capture, group);
          },
          "query_start_loc_cpu"_a.none(), "seq_lens"_a.none(), "seq_lens_cpu_upper_bound"_a.none(),
          "num_actual_tokens"_a, "query_start_loc"_a.none(), "is_prefilling"_a.none(),
          "num_decode_draft_tokens_cpu"_a.none(), "num_accepted_tokens"_a.none(),
          "num_reqs"_a.none(), "stream"_a.none(), "tables"_a, "capture"_a, "group"_a)
      .def(
          "step",
          [](VllmSession& s, nb::handle qsl_cpu, nb::handle seq_lens, nb::handle ub,
             nb::handle num_actual_tokens, nb::handle qsl, nb::handle is_prefilling,
             nb::handle drafts, nb::handle accepted, nb::handle num_reqs, nb::handle stream,
             nb::handle table, bool capture, int32_t group) {
            StepArgs a;
            a.query_start_loc_cpu = qsl_cpu;
            a.seq_lens = seq_lens;
            a.seq_lens_cpu_upper_bound = ub;
            a.num_actual_tokens = num_actual_tokens;
            a.query_start_loc = qsl;
            a.is_prefilling = is_prefilling;
            a.num_decode_draft_tokens_cpu = drafts;
            a.num_accepted_tokens = accepted;
            a.num_reqs = num_reqs;
            a.stream = stream;
            return s.step(a, table, capture, group);
          },
          "query_start_loc_cpu"_a.none(), "seq_lens"_a.none(), "seq_lens_cpu_upper_bound"_a.none(),
          "num_actual_tokens"_a, "query_start_loc"_a.none(), "is_prefilling"_a.none(),
          "num_decode_draft_tokens_cpu"_a.none(), "num_accepted_tokens"_a.none(),
          "num_reqs"_a.none(), "stream"_a.none(), "table"_a.none(), "capture"_a, "group"_a)
      .def("configure", &VllmSession::configure, "names"_a, "defaults"_a, "mask_ring"_a.none())
      .def("serve", &VllmSession::serve, "group"_a, "table"_a.none(), "stream"_a.none())
      .def_prop_ro("cached_views", &VllmSession::cached_views);
}

}  // namespace

}  // namespace linmeta::py

NB_MODULE(_linmeta, m) {
  using namespace linmeta;
  using namespace linmeta::py;
  m.doc() = "linmeta: per-step GDN / KDA linear-attention metadata (C++/CUDA) for Python.";

  nb::exception<linmeta::Error>(m, "Error", PyExc_ValueError);

  m.attr("NULL_BLOCK_ID") = kNullBlockId;
  m.attr("PAD_SLOT_ID") = kPadSlotId;
  m.attr("FLA_CHUNK_SIZE") = kFlaChunkSize;
  m.attr("CONV_BLOCK") = kConvBlock;
  m.def(
      "cuda_available",
      []() {
        int n = 0;
        const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        if (!ok) cudaGetLastError();
        return ok;
      },
      "Whether linmeta's CUDA runtime sees a device.");

  PyMetadata::bind(m);
  bind_vllm_session(m);

  nb::class_<PyBuilder> base(
      m, "MetadataBuilder",
      "Base class of GdnMetadataBuilder and KdaMetadataBuilder: owns the persistent "
      "buffers every Metadata it returns points into.");
  def_build_methods(base);
  base.def(
          "update_block_table",
          [](nb::pointer_and_handle<PyBuilder> self, PyMetadata& metadata, nb::handle block_table,
             int32_t group, nb::handle stream) {
            PyBuilder& b = *self.p;
            if (!metadata.builder().is(self.h))
              raise_error("update_block_table takes metadata built by this builder");
            PreparedStep p;
            p.stream = b.builder.target() == Target::Cuda ? parse_stream(stream) : nullptr;
            const BlockTable t =
                import_table(p, block_table, "block_table", metadata.num_reqs(), b.memory());
            const Metadata out =
                b.builder.update_block_table(metadata.metadata(), t, group, p.stream);
            return make_metadata(out, self.h, b, p.table_objects[0], group, metadata.num_reqs());
          },
          "metadata"_a, "block_table"_a.none(), "group"_a = 0, "stream"_a.none() = 0,
          "Re-gathers the state indices of the last built step from another group's block table "
          "into group "
          "`group`'s buffers; every batch-level field is kept from `metadata`.")
      .def_prop_ro(
          "kind",
          [](const PyBuilder& b) { return b.builder.kind() == BuilderKind::Gdn ? "gdn" : "kda"; })
      .def_prop_ro(
          "target",
          [](const PyBuilder& b) { return b.builder.target() == Target::Cuda ? "cuda" : "host"; })
      .def_prop_ro(
          "device",
          [](const PyBuilder& b) -> std::optional<int32_t> {
            if (b.builder.target() == Target::Cuda) return b.device_id;
            return std::nullopt;
          },
          "CUDA device holding the buffers (None on the host target).")
      .def_prop_ro("num_groups", [](const PyBuilder& b) { return b.builder.num_groups(); })
      .def_prop_ro("array_type",
                   [](const PyBuilder& b) { return std::string(array_type_name(b.array_type)); })
      .def_prop_ro(
          "config", [](const PyBuilder& b) { return config_dict(b.builder.config()); },
          "The configuration as a dict.")
      .def_prop_ro("decode_cudagraph_max_bs",
                   [](const PyBuilder& b) { return b.builder.config().decode_cudagraph_max_bs(); })
      .def_prop_ro(
          "last_timing",
          [](const PyBuilder& b) {
            const BuildTiming& t = b.builder.last_timing();
            nb::dict d;
            d["plan_ns"] = t.plan_ns;
            d["pack_ns"] = t.pack_ns;
            d["enqueue_ns"] = t.enqueue_ns;
            return d;
          },
          "Host time of the last build by phase (nanoseconds).")
      .def_prop_ro("last_upload_bytes",
                   [](const PyBuilder& b) { return b.builder.last_upload_bytes(); })
      .def_prop_ro("pinned_bytes", [](const PyBuilder& b) { return b.builder.pinned_bytes(); })
      .def_prop_ro("buffer_bytes", [](const PyBuilder& b) { return b.builder.buffer_bytes(); })
      .def("__repr__", [](const PyBuilder& b) {
        return std::string(b.builder.kind() == BuilderKind::Gdn ? "GdnMetadataBuilder"
                                                                : "KdaMetadataBuilder") +
               "(target='" + (b.builder.target() == Target::Cuda ? "cuda" : "host") +
               "', num_groups=" + std::to_string(b.builder.num_groups()) + ")";
      });

  def_kind<PyGdnBuilder>(
      m, base, "GdnMetadataBuilder", BuilderKind::Gdn,
      "GatedDeltaNet metadata builder (vLLM's GDNAttentionMetadataBuilder). Config as keyword "
      "arguments; target 'host' or 'cuda'; num_groups KV-cache groups; array_type of the "
      "outputs: 'dlpack' (default), 'torch' or 'numpy' (host target).");
  def_kind<PyKdaBuilder>(
      m, base, "KdaMetadataBuilder", BuilderKind::Kda,
      "Kimi Delta Attention metadata builder (RecoverSSM, prefill checkpoints). Same arguments "
      "as GdnMetadataBuilder.");
}

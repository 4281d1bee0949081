// linmeta._linmeta: Python bindings of the GDN / KDA metadata builders.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "arrays.hpp"
#include "linmeta/linmeta.hpp"
#include "metadata.hpp"
#include "step_inputs.hpp"
#include "vllm_session.hpp"

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

Profile parse_profile(const std::string& s) {
  if (s == "seed") return Profile::Seed;
  if (s == "vllm-0.34") return Profile::Vllm034;
  raise_error("profile = '" + s + "' must be 'seed' or 'vllm-0.34'");
}

const char* profile_name(Profile p) { return p == Profile::Vllm034 ? "vllm-0.34" : "seed"; }

/// None: what a CUDA engine resolves by default (GDN triton, KDA FlashKDA).
PrefillBackend parse_prefill_backend(const std::optional<std::string>& s, BuilderKind kind) {
  if (!s) return kind == BuilderKind::Kda ? PrefillBackend::FlashKda : PrefillBackend::Triton;
  if (*s == "triton") return PrefillBackend::Triton;
  if (*s == "flashinfer") return PrefillBackend::FlashInfer;
  if (*s == "flashkda") return PrefillBackend::FlashKda;
  raise_error("prefill_backend = '" + *s + "' must be 'triton', 'flashinfer' or 'flashkda'");
}

const char* prefill_backend_name(PrefillBackend b) {
  switch (b) {
    case PrefillBackend::FlashInfer:
      return "flashinfer";
    case PrefillBackend::FlashKda:
      return "flashkda";
    default:
      return "triton";
  }
}

Target parse_target(const std::string& s) {
  if (s == "host" || s == "cpu") return Target::Host;
  if (s == "cuda") return Target::Cuda;
  raise_error("target = '" + s + "' must be 'host' or 'cuda'");
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
  d["profile"] = profile_name(c.profile);
  d["prefill_backend"] = prefill_backend_name(c.prefill_backend);
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
#define LINMETA_STEP_PARAMS                                                                        \
  nb::handle query_start_loc_cpu, nb::handle seq_lens, nb::handle seq_lens_cpu_upper_bound,        \
      nb::handle num_actual_tokens, nb::handle query_start_loc, nb::handle is_prefilling,          \
      nb::handle num_decode_draft_tokens_cpu, nb::handle num_accepted_tokens, nb::handle num_reqs, \
      nb::handle stream
#define LINMETA_STEP_ARGS                                                                          \
  make_step_args(query_start_loc_cpu, seq_lens, seq_lens_cpu_upper_bound, num_actual_tokens,       \
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
      [](nb::pointer_and_handle<PyBuilder> self, nb::handle block_table, LINMETA_STEP_PARAMS) {
        return build_one(self, LINMETA_STEP_ARGS, block_table, false);
      },
      nb::kw_only(), "block_table"_a.none(), LINMETA_STEP_NAMES, kBuildDoc);
  cls.def(
      "build_for_cudagraph_capture",
      [](nb::pointer_and_handle<PyBuilder> self, nb::handle block_table, LINMETA_STEP_PARAMS) {
        return build_one(self, LINMETA_STEP_ARGS, block_table, true);
      },
      nb::kw_only(), "block_table"_a.none(), LINMETA_STEP_NAMES,
      "vLLM's capture build: num_accepted_tokens = query lengths, drafts = query lengths - 1, then "
      "a "
      "normal build. Requires num_reqs and num_actual_tokens <= decode_cudagraph_max_bs.");
  cls.def(
      "build_groups",
      [](nb::pointer_and_handle<PyBuilder> self, nb::handle block_tables, LINMETA_STEP_PARAMS) {
        return build_groups(self, LINMETA_STEP_ARGS, block_tables, false);
      },
      nb::kw_only(), "block_tables"_a.none(), LINMETA_STEP_NAMES,
      "Plans the step once and builds every KV-cache group from its own block table "
      "(len(block_tables) == num_groups). Returns a list with one Metadata per group.");
  cls.def(
      "build_groups_for_cudagraph_capture",
      [](nb::pointer_and_handle<PyBuilder> self, nb::handle block_tables, LINMETA_STEP_PARAMS) {
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
                 int32_t num_prefill_checkpoint_blocks, const std::string& profile,
                 const std::optional<std::string>& prefill_backend, const std::string& target,
                 int32_t num_groups, const std::string& array_type, int32_t staging_slots,
                 int32_t capture_slots, bool programmatic_dependent_launch) {
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
            c.profile = parse_profile(profile);
            c.prefill_backend = parse_prefill_backend(prefill_backend, kind);
            BuilderOptions o;
            o.target = parse_target(target);
            o.num_groups = num_groups;
            o.staging_slots = staging_slots;
            o.capture_slots = capture_slots;
            o.programmatic_dependent_launch = programmatic_dependent_launch;
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
          "use_recoverssm"_a = false, "num_prefill_checkpoint_blocks"_a = 0, "profile"_a = "seed",
          "prefill_backend"_a = nb::none(), "target"_a = "host", "num_groups"_a = 1,
          "array_type"_a = "dlpack", "staging_slots"_a = 4, "capture_slots"_a = 8,
          "programmatic_dependent_launch"_a = false);
}

}  // namespace

}  // namespace linmeta::py

NB_MODULE(_linmeta, m) {
  using namespace linmeta;
  using namespace linmeta::py;
  m.doc() = "linmeta: per-step GDN / KDA linear-attention metadata (C++/CUDA) for Python.";
  // Engines hold builders in reference cycles that may outlive the interpreter's last
  // collection (vLLM's Kimi-K3 deferred RecoverSSM sets a closure over the builder as its
  // `build`): nanobind would print every object of such a cycle as "leaked" at exit.
  // tests/python/test_vllm_oracle.py checks that the adapter's own objects are freed.
  nb::set_leak_warnings(false);

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

  m.def("torch_reader_status", &torch_reader_status,
        "How torch tensor inputs are read: 'on: torch X' (linmeta._torch_reader, from the "
        "at::Tensor) or 'off: why' (five torch attribute calls per tensor).");
  m.def(
      "_current_stream",
      [](int32_t device) -> nb::object {
        uintptr_t s = 0;
        if (!torch_current_stream(device, s)) return nb::none();
        return nb::int_(s);
      },
      "device"_a,
      "(tests) torch's current CUDA stream of `device` as linmeta._torch_reader reads it; None "
      "when that reader (or its CUDA part) is not in use.");
  m.def(
      "_import_info",
      [](nb::handle obj, bool torch_reader) -> nb::object {
        const ImportedArray a = import_array(obj, "input", nullptr, torch_reader);
        if (!a.present) return nb::none();
        return nb::make_tuple(reinterpret_cast<uintptr_t>(a.data), a.ndim,
                              nb::make_tuple(a.shape[0], a.shape[1]),
                              nb::make_tuple(a.strides[0], a.strides[1]), dtype_name(a.dtype),
                              a.device_type, a.device_id);
      },
      "obj"_a.none(), "torch_reader"_a,
      "(tests) What an input import reads: (data, ndim, shape[:2], strides[:2], dtype, DLPack "
      "device type, device id), with or without linmeta._torch_reader.");

  PyMetadata::bind(m);
  bind_vllm_session(m);
  bind_vllm_build_call(m);

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
                   [](const PyBuilder& b) {
                     return b.builder.config().decode_cudagraph_max_bs(b.builder.kind());
                   })
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

// linmeta._linmeta: the Python binding of linmeta's metadata builders (python/linmeta), and
// the native half of linmeta.vllm (../vllm/engine.hpp) as the submodule linmeta._linmeta.vllm.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "../sglang/engine.hpp"
#include "../vllm/engine.hpp"
#include "arrays.hpp"
#include "config_args.hpp"
#include "linmeta/linmeta.hpp"
#include "metadata_object.hpp"
#include "step_inputs.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace linmeta::py {

namespace {

Target parse_target(const std::string& s) {
  if (s == "host" || s == "cpu") return Target::Host;
  if (s == "cuda") return Target::Cuda;
  raise_error("target = '" + s + "' must be 'host' or 'cuda'");
}

/// An int keyword of `kw` (taken out of it), `fallback` when absent.
int32_t take_int(nb::dict& kw, const char* key, int32_t fallback) {
  nb::str k(key);
  if (!kw.contains(k)) return fallback;
  const int32_t v = to_int32(kw[k], key);
  PyDict_DelItem(kw.ptr(), k.ptr());
  return v;
}

std::string take_str(nb::dict& kw, const char* key, const char* fallback) {
  nb::str k(key);
  if (!kw.contains(k)) return fallback;
  std::string v = to_string(kw[k], key);
  PyDict_DelItem(kw.ptr(), k.ptr());
  return v;
}

bool take_bool(nb::dict& kw, const char* key, bool fallback) {
  nb::str k(key);
  if (!kw.contains(k)) return fallback;
  const bool v = to_bool(kw[k], key);
  PyDict_DelItem(kw.ptr(), k.ptr());
  return v;
}

/// MetadataBuilder(kind, **kwargs): the Config fields and the BuilderOptions as keywords.
void init_builder(PyBuilder* self, const std::string& kind_name, nb::kwargs kwargs) {
  const auto kind = names::parse(names::kBuilderKinds, kind_name);
  if (!kind)
    raise_error("kind = '" + kind_name + "' must be " + names::choices(names::kBuilderKinds));
  nb::dict kw = nb::borrow<nb::dict>(kwargs);
  const Config c = config_from_kwargs(*kind, kw);
  BuilderOptions o;
  o.target = parse_target(take_str(kw, "target", "host"));
  o.num_groups = take_int(kw, "num_groups", 1);
  o.staging_slots = take_int(kw, "staging_slots", o.staging_slots);
  o.capture_slots = take_int(kw, "capture_slots", o.capture_slots);
  o.programmatic_dependent_launch =
      take_bool(kw, "programmatic_dependent_launch", o.programmatic_dependent_launch);
  const ArrayType at = parse_array_type(take_str(kw, "array_type", "dlpack"));
  if (nb::len(kw) > 0) {
    const std::string first = nb::cast<std::string>(nb::str(*kw.keys().begin()));
    throw nb::type_error(("linmeta: unknown keyword argument '" + first + "'").c_str());
  }
  if (at == ArrayType::Numpy && o.target == Target::Cuda)
    raise_error("array_type = 'numpy' needs target = 'host' (numpy arrays live in host memory)");
  int dev = 0;
  if (o.target == Target::Cuda && cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    dev = 0;
  }
  new (self) PyBuilder(*kind, c, o, dev, at);
}

CallerArrays caller_arrays(const PreparedStep& p, const StepArgs& a, nb::handle table) {
  CallerArrays in;
  in.seq_lens = a.seq_lens;
  in.accepted = a.num_accepted_tokens;
  in.query_start_loc = a.query_start_loc;
  in.block_table = table;
  in.seq_lens_data = p.step.seq_lens;
  in.accepted_data = p.step.num_accepted_tokens;
  in.drafts = a.num_decode_draft_tokens_cpu;
  in.drafts_data =
      p.step.num_decode_draft_tokens.empty() ? nullptr : p.step.num_decode_draft_tokens.data();
  // The host copy stands in for a query_start_loc not given (host target): not the caller's.
  in.query_start_loc_data = a.query_start_loc.is_valid() && !a.query_start_loc.is_none()
                                ? p.step.query_start_loc
                                : nullptr;
  return in;
}

nb::object make_metadata(const Metadata& m, nb::handle self, const PyBuilder& b, int32_t group,
                         int32_t num_reqs, const CallerArrays& in) {
  return nb::cast(PyMetadata(m, b.builder.kind(), nb::borrow(self), group, num_reqs, b.device_id,
                             b.array_type, in));
}

nb::object build_one(nb::pointer_and_handle<PyBuilder> self, const StepArgs& a,
                     nb::handle block_table, bool capture) {
  PyBuilder& b = *self.p;
  const CallGuard guard(b, capture ? "build_for_cudagraph_capture" : "build");
  PreparedStep p;
  prepare(p, b, a);
  p.step.block_table = import_table(p, block_table, "block_table", p.step.num_reqs, b.memory());
  const Metadata& m = capture ? b.builder.build_for_cudagraph_capture(p.step, p.stream)
                              : b.builder.build(p.step, p.stream);
  return make_metadata(m, self.h, b, 0, p.step.num_reqs, caller_arrays(p, a, block_table));
}

nb::list build_groups(nb::pointer_and_handle<PyBuilder> self, const StepArgs& a,
                      nb::handle block_tables, bool capture) {
  PyBuilder& b = *self.p;
  const CallGuard guard(b, capture ? "build_groups_for_cudagraph_capture" : "build_groups");
  PreparedStep p;
  prepare(p, b, a);
  if (!block_tables.is_valid() || block_tables.is_none() || !PySequence_Check(block_tables.ptr()))
    throw nb::type_error(
        "linmeta: block_tables must be a sequence of block tables, one per KV-cache group");
  const Py_ssize_t G = PyObject_Length(block_tables.ptr());
  if (G < 0) {  // its __len__ raised
    nb::python_error e;
    nb::raise_from(e, PyExc_TypeError, "linmeta: block_tables: len(block_tables) failed");
  }
  // Before any import: a sequence claiming more tables than the builder's groups is refused
  // without being walked.
  if (G != b.builder.num_groups())
    raise_error("block_tables: " + std::to_string(G) +
                " block tables given, the builder serves num_groups = " +
                std::to_string(b.builder.num_groups()));
  std::vector<nb::object> objects;
  for (Py_ssize_t g = 0; g < G; ++g) {
    const std::string name = "block_tables[" + std::to_string(g) + "]";
    nb::object t = nb::steal(PySequence_GetItem(block_tables.ptr(), g));
    if (!t.is_valid()) {
      nb::python_error e;
      nb::raise_from(e, PyExc_TypeError, "linmeta: %s could not be read", name.c_str());
    }
    objects.push_back(t);
    p.tables.push_back(import_table(p, objects.back(), name.c_str(), p.step.num_reqs, b.memory()));
  }
  if (!p.tables.empty()) p.step.block_table = p.tables[0];
  std::span<const Metadata> ms =
      capture ? b.builder.build_groups_for_cudagraph_capture(p.step, p.tables, p.stream)
              : b.builder.build_groups(p.step, p.tables, p.stream);
  nb::list out;
  for (size_t g = 0; g < ms.size(); ++g)
    out.append(make_metadata(ms[g], self.h, b, static_cast<int32_t>(g), p.step.num_reqs,
                             caller_arrays(p, a, objects[g])));
  return out;
}

const char* kBuildDoc =
    "Builds this step's metadata (group 0 of a single-group builder).\n\n"
    "Host arrays (CPU memory): query_start_loc_cpu [num_reqs + 1] int32, "
    "seq_lens_cpu_upper_bound [num_reqs] int32, is_prefilling [num_reqs] bool (optional; the "
    "Mamba builders need it), num_decode_draft_tokens_cpu [num_reqs] int32 (optional). Device "
    "arrays (the target's memory): query_start_loc [num_reqs + 1] int32 (may be omitted on the "
    "host target; the linear builder returns it), seq_lens [num_reqs] int32, "
    "num_accepted_tokens [num_reqs] int32 (optional), block_table [>= num_reqs, W] int32 with "
    "contiguous rows. num_actual_tokens: padded token count. num_reqs: defaults to "
    "len(query_start_loc_cpu) - 1; when given, arrays may be longer. stream: cudaStream_t as an "
    "int (torch.cuda.current_stream().cuda_stream) or a torch.cuda.Stream. Arrays are read "
    "without copies; they must stay alive until the enqueued work has run.";

void def_build_methods(nb::class_<PyBuilder>& cls) {
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
      "num_actual_tokens"_a.none(),                                                         \
      "query_start_loc"_a.none() = nb::none(), "is_prefilling"_a.none() = nb::none(),       \
      "num_decode_draft_tokens_cpu"_a.none() = nb::none(),                                  \
      "num_accepted_tokens"_a.none() = nb::none(), "num_reqs"_a.none() = nb::none(),        \
      "stream"_a.none() = 0
  for (const bool capture : {false, true}) {
    cls.def(
        capture ? "build_for_cudagraph_capture" : "build",
        [capture](nb::pointer_and_handle<PyBuilder> self, nb::handle block_table,
                  LINMETA_STEP_PARAMS) {
          return build_one(self, LINMETA_STEP_ARGS, block_table, capture);
        },
        nb::kw_only(), "block_table"_a.none(), LINMETA_STEP_NAMES,
        capture ? "vLLM's capture build: accepted counts = query lengths (drafts = query lengths "
                  "- 1 for GDN / KDA), then a build. Rejects batches no decode-only FULL graph "
                  "holds."
                : kBuildDoc);
    cls.def(
        capture ? "build_groups_for_cudagraph_capture" : "build_groups",
        [capture](nb::pointer_and_handle<PyBuilder> self, nb::handle block_tables,
                  LINMETA_STEP_PARAMS) {
          return build_groups(self, LINMETA_STEP_ARGS, block_tables, capture);
        },
        nb::kw_only(), "block_tables"_a.none(), LINMETA_STEP_NAMES,
        "Plans the step once and builds every KV-cache group from its own block table "
        "(len(block_tables) == num_groups). Returns one Metadata per group.");
  }
#undef LINMETA_STEP_PARAMS
#undef LINMETA_STEP_ARGS
#undef LINMETA_STEP_NAMES
}

}  // namespace

}  // namespace linmeta::py

NB_MODULE(_linmeta, m) {
  using namespace linmeta;
  using namespace linmeta::py;
  m.doc() = "linmeta: per-step linear-attention / SSM metadata (C++/CUDA) for Python.";
  nb::exception<linmeta::Error>(m, "Error", PyExc_ValueError);

  m.attr("NULL_BLOCK_ID") = kNullBlockId;
  m.attr("PAD_SLOT_ID") = kPadSlotId;
  m.attr("FLA_CHUNK_SIZE") = kFlaChunkSize;
  m.attr("CONV_BLOCK") = kConvBlock;
  nb::list kinds;
  for (const auto& [kind, name] : names::kBuilderKinds)
    kinds.append(nb::str(name.data(), name.size()));
  m.attr("BUILDER_KINDS") = nb::tuple(kinds);
  nb::list sglang_kinds;  // the kinds that take SGLang's steps (linmeta/sglang.hpp)
  for (const auto& [kind, name] : names::kBuilderKinds)
    if (is_sglang(kind)) sglang_kinds.append(nb::str(name.data(), name.size()));
  m.attr("SGLANG_KINDS") = nb::tuple(sglang_kinds);
  m.def(
      "cuda_available",
      []() {
        int n = 0;
        const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        if (!ok) cudaGetLastError();
        return ok;
      },
      "Whether linmeta's CUDA runtime sees a device.");
  m.def(
      "_import_info",
      [](nb::handle obj) -> nb::object {
        const ImportedArray a = import_array(obj, "input", nullptr);
        if (!a.present) return nb::none();
        return nb::make_tuple(reinterpret_cast<uintptr_t>(a.data), a.ndim,
                              nb::make_tuple(a.shape[0], a.shape[1]),
                              nb::make_tuple(a.strides[0], a.strides[1]), dtype_name(a.dtype),
                              a.device_type, a.device_id);
      },
      "obj"_a.none(),
      "(tests) What an input import reads: (data, ndim, shape[:2], strides[:2], dtype, DLPack "
      "device type, device id).");

  PyMetadata::bind(m);

  nb::class_<PyBuilder> cls(
      m, "MetadataBuilder", nb::is_weak_referenceable(),
      "A metadata builder of one kind (one of linmeta.BUILDER_KINDS, each vLLM's metadata "
      "builder of that name). MetadataBuilder(kind, **config): the "
      "Config fields as keywords (docs/python.md), plus target ('host' or 'cuda'), num_groups "
      "(KV-cache groups), array_type of the outputs ('dlpack', 'torch', or 'numpy' on the host "
      "target), staging_slots, capture_slots, programmatic_dependent_launch. It owns the "
      "persistent buffers every Metadata it returns points into.");
  cls.def("__init__", &init_builder, "kind"_a, "kwargs"_a);
  def_build_methods(cls);
  cls.def(
         "update_block_table",
         [](nb::pointer_and_handle<PyBuilder> self, nb::handle metadata_obj, nb::handle block_table,
            nb::handle group_obj, nb::handle stream) {
           PyBuilder& b = *self.p;
           const CallGuard guard(b, "update_block_table");
           if (!nb::isinstance<PyMetadata>(metadata_obj))
             throw nb::type_error(
                 ("linmeta: metadata must be a linmeta.Metadata of this builder, got " +
                  nb::cast<std::string>(nb::str(
                      nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(metadata_obj.ptr()))))))
                     .c_str());
           PyMetadata& metadata = nb::cast<PyMetadata&>(metadata_obj);
           const int32_t group = to_int32(group_obj, "group");
           if (!metadata.builder().is(self.h))
             raise_error("update_block_table takes metadata built by this builder");
           PreparedStep p;
           const Stream s = parse_stream(stream);  // type-checked on the host target too
           p.stream = b.builder.target() == Target::Cuda ? s : nullptr;
           const BlockTable t =
               import_table(p, block_table, "block_table", metadata.num_reqs(), b.memory());
           const Metadata out =
               b.builder.update_block_table(metadata.metadata(), t, group, p.stream);
           CallerArrays in = metadata.inputs();
           in.block_table = block_table;
           return make_metadata(out, self.h, b, group, metadata.num_reqs(), in);
         },
         "metadata"_a.none(), "block_table"_a.none(), "group"_a.none() = 0, "stream"_a.none() = 0,
         "Re-gathers the state indices of the last built step from another block table into "
         "group `group`'s buffers; every batch-level field is kept from `metadata`, which must be "
         "of this builder's last build.")
      .def_prop_ro("kind",
                   [](const PyBuilder& b) {
                     return std::string(names::builder_kind_name(b.builder.kind()));
                   })
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
          "The configuration as a dict of the constructor's keywords.")
      .def_prop_ro("decode_cudagraph_max_bs",
                   [](const PyBuilder& b) {
                     return b.builder.config().decode_cudagraph_max_bs(b.builder.kind());
                   })
      .def_prop_ro(
          "decode_cudagraph_max_tokens",
          [](const PyBuilder& b) { return b.builder.config().decode_cudagraph_max_tokens(); },
          "PLE ShortConv's FULL-graph token limit (vLLM's decode_cudagraph_max_tokens).")
      .def_prop_ro(
          "last_timing",
          [](const PyBuilder& b) {
            const BuildTiming& t = b.builder.last_timing();
            nb::dict d;
            d["plan_ns"] = t.plan_ns;
            d["pack_ns"] = t.pack_ns;
            d["enqueue_ns"] = t.enqueue_ns;
            d["metadata_ns"] = t.metadata_ns;
            return d;
          },
          "Host time of the last build by phase (nanoseconds).")
      .def_prop_ro("last_upload_bytes",
                   [](const PyBuilder& b) { return b.builder.last_upload_bytes(); })
      .def_prop_ro("pinned_bytes", [](const PyBuilder& b) { return b.builder.pinned_bytes(); })
      .def_prop_ro("buffer_bytes", [](const PyBuilder& b) { return b.builder.buffer_bytes(); })
      .def("__repr__", [](const PyBuilder& b) {
        return "MetadataBuilder('" + std::string(names::builder_kind_name(b.builder.kind())) +
               "', target='" + (b.builder.target() == Target::Cuda ? "cuda" : "host") +
               "', num_groups=" + std::to_string(b.builder.num_groups()) + ")";
      });

  bind_vllm(m);
  bind_sglang(m);
}

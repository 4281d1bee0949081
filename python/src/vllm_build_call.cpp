// The vLLM adapter's build() and update_block_table() as one C++ call each: linmeta.vllm's
// builder classes take `vllm_build` / `vllm_update_block_table` below as those methods
// (method descriptors, like Python functions), so a vLLM step pays no Python frame per group.
// They read the object's VllmBuildState (made by _install_fast_build in
// python/linmeta/vllm.py) and take the Python method they stand for whenever that would do
// more than read the session's result. build() takes `_build_python` for int64 accepted /
// draft counts, MRV2's precomputed aligned indices, no session yet or one that refuses the
// step; results with composites go to the Python `_assemble`. update_block_table() takes
// `_update_block_table_python` for anything but a plain dataclass without checkpoints,
// re-gathered from the table it is given.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <array>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "arrays.hpp"
#include "vllm_session.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace linmeta::py {

namespace {

/// When MRV2's precomputed aligned state indices send a call to the Python build()
/// (GDNAttentionMetadataBuilder._fast_build_aligned_rule in vllm.py says which applies).
enum class AlignedRule : int32_t {
  Ignore = 0,         ///< never read by build()
  SlowIfSet = 1,      ///< build() gathers from them when set
  SlowUnlessSet = 2,  ///< build() asserts they are set
};

/// Which update_block_table() calls the C++ path takes (GDNAttentionMetadataBuilder.
/// _fast_update_rule in vllm.py says which applies).
enum class UpdateRule : int32_t {
  Python = 0,      ///< none: the class's update_block_table is Python, or gathers elsewhere
  Table = 1,       ///< re-gathers from the table it is given
  TableIfSet = 2,  ///< the same, when mamba_aligned_state_indices is set (else it asserts)
};

/// One builder object's fixed parts of a fast build. Holds no reference to the builder object
/// (which holds this), so builders are freed by reference counting as before.
class VllmBuildState final : public LaunchArgs {
 public:
  /// engine: the object's _Engine; slot: its group; module: linmeta.vllm (for
  /// _PREFETCH_TABLES); slow: the Python build function; assemble: the _assemble function;
  /// cls: the dataclass when a plain dict makes it (else None: `make` is called);
  /// plain_len: the field count of a plain result (-1: always assemble); device: the CUDA
  /// device whose current torch stream the build runs on, read through linmeta._torch_reader
  /// when it can (else, and for -1, engine.current_stream() is called); update_rule: an
  /// UpdateRule; state_keys: the fields update_block_table takes from the re-gather;
  /// commit: None, or (commit class, its defaults, align class, its defaults) of plain
  /// dataclasses: then a result whose only composite is "_commit" (KDA's RecoverSSM) gets
  /// vLLM's commit objects here instead of through `assemble`.
  VllmBuildState(nb::handle engine, int32_t slot, nb::handle module, nb::handle slow,
                 nb::handle assemble, nb::handle cls, nb::handle make, int64_t plain_len,
                 int32_t aligned_rule, nb::handle int32, int32_t device, int32_t update_rule,
                 nb::tuple state_keys, nb::handle commit)
      : device_(device),
        engine_(nb::borrow(engine)),
        slot_(slot),
        module_(nb::borrow(module)),
        slow_(nb::borrow(slow)),
        assemble_(nb::borrow(assemble)),
        cls_(nb::borrow(cls)),
        make_(nb::borrow(make)),
        plain_len_(plain_len),
        aligned_rule_(static_cast<AlignedRule>(aligned_rule)),
        int32_(nb::borrow(int32)),
        stream_fn_(engine.attr("current_stream")),
        module_dict_(PyModule_Check(module.ptr()) ? nb::borrow(PyModule_GetDict(module.ptr()))
                                                  : nb::none()),
        engine_dict_(instance_dict(engine, names().session)),
        update_rule_(static_cast<UpdateRule>(update_rule)),
        state_keys_(std::move(state_keys)),
        commit_(nb::borrow(commit)) {
    if (aligned_rule < 0 || aligned_rule > 2)
      raise_error("VllmBuildState: aligned_rule must be 0, 1 or 2");
    if (update_rule < 0 || update_rule > 2)
      raise_error("VllmBuildState: update_rule must be 0, 1 or 2");
    if (!commit_.is_none() && (!nb::isinstance<nb::tuple>(commit_) || nb::len(commit_) != 4))
      raise_error("VllmBuildState: commit must be None or a 4-tuple");
  }

  nb::object build(nb::handle self, nb::handle dict, nb::handle common_prefix_len, nb::handle m,
                   nb::handle accepted, nb::handle drafts, nb::handle fast_build) const {
    auto slow = [&] { return slow_(self, common_prefix_len, m, accepted, drafts, fast_build); };
    if (aligned_slow(dict)) return slow();
    const nb::object session = read_attr(engine_, engine_dict_, names().session);
    if (session.is_none()) return slow();
    // None: int64 counts (the Python path converts them) or a larger native builder first.
    // The table is m.block_table_tensor (a null handle: the session reads it with m's others).
    nb::object d = session_call(session, m, nb::handle(), accepted, drafts, false, slot_, *this,
                                /*int32=*/true);
    if (d.is_none()) return slow();
    const Py_ssize_t size = PyDict_Size(d.ptr());
    if (size == plain_len_) return make(d);
    if (size == plain_len_ + 1 && !commit_.is_none() && put_commit(self, d, m)) return make(d);
    return assemble_(self, d, m, drafts, int32_);
  }

  /// vLLM's update_block_table(metadata, blk_table, slot_mapping): `metadata` (of the step
  /// this engine planned last) with this group's state indices from `table`, every other
  /// field `metadata`'s own. `self` is the builder object, `dict` its __dict__.
  nb::object update_block_table(nb::handle self, nb::handle dict, nb::handle metadata,
                                nb::handle table, nb::handle slot_mapping) const {
    auto slow = [&] { return self.attr(names().update_python)(metadata, table, slot_mapping); };
    if (update_rule_ == UpdateRule::Python || cls_.is_none() ||
        !Py_IS_TYPE(metadata.ptr(), reinterpret_cast<PyTypeObject*>(cls_.ptr())))
      return slow();
    if (update_rule_ == UpdateRule::TableIfSet && !dict_value_set(dict, names().aligned))
      return slow();  // it asserts
    const nb::object md = nb::steal(PyObject_GenericGetDict(metadata.ptr(), nullptr));
    if (!md.is_valid()) throw nb::python_error();
    if (dict_value_set(md, names().checkpoint)) return slow();  // replaces its state indices
    PyObject* num_actual_tokens =
        PyDict_GetItemWithError(md.ptr(), names().num_actual_tokens.ptr());
    if (num_actual_tokens == nullptr) {
      if (PyErr_Occurred()) throw nb::python_error();
      return slow();
    }
    const nb::object session = read_attr(engine_, engine_dict_, names().session);
    const nb::object d = session.is_none()
                             ? nb::none()
                             : session_serve(session, slot_, table, *this, num_actual_tokens);
    if (d.is_none())
      raise_error("update_block_table takes metadata of the step this engine built last");
    nb::object out = nb::steal(PyDict_Copy(md.ptr()));
    if (!out.is_valid()) throw nb::python_error();
    for (nb::handle key : state_keys_)
      if (PyDict_SetItem(out.ptr(), key.ptr(), dict_item(d, key).ptr()) != 0)
        throw nb::python_error();
    return make(out);
  }

  /// torch's current stream on the builder's device (LaunchArgs).
  [[nodiscard]] nb::object stream() const override {
    uintptr_t raw = 0;
    nb::object stream =
        device_ >= 0 && torch_current_stream(device_, raw)
            ? nb::steal(PyLong_FromUnsignedLongLong(static_cast<unsigned long long>(raw)))
            : nb::steal(PyObject_CallNoArgs(stream_fn_.ptr()));
    if (!stream.is_valid()) throw nb::python_error();
    return stream;
  }

  /// linmeta.vllm._PREFETCH_TABLES (LaunchArgs).
  [[nodiscard]] bool prefetch_tables() const override {
    const int prefetch = PyObject_IsTrue(read_attr(module_, module_dict_, names().prefetch).ptr());
    if (prefetch < 0) throw nb::python_error();
    return prefetch != 0;
  }

  struct Names {
    nb::str session{"session"}, block_table_tensor{"block_table_tensor"},
        prefetch{"_PREFETCH_TABLES"}, aligned{"mamba_aligned_state_indices"}, state{"_fast_build"},
        build_python{"_build_python"}, update_python{"_update_block_table_python"},
        checkpoint{"checkpoint"}, num_actual_tokens{"num_actual_tokens"}, commit{"_commit"},
        recoverssm_commit{"recoverssm_commit"}, recoverssm_context{"recoverssm_context"},
        context_getter{"_get_recoverssm_context"}, state_indices{"state_indices"},
        query_start_loc{"query_start_loc"}, request_indices{"request_indices"}, align{"align"},
        spec_state_indices{"spec_state_indices_tensor"},
        spec_query_start_loc{"spec_query_start_loc"}, block_table{"block_table"},
        num_computed_tokens{"num_computed_tokens"}, block_size{"block_size"};
  };
  static const Names& names() {
    static const Names* n = new Names;  // never destroyed (outlives the interpreter)
    return *n;
  }

 private:
  /// Whether MRV2's aligned indices (an instance attribute, when set) make build() differ.
  bool aligned_slow(nb::handle dict) const {
    if (aligned_rule_ == AlignedRule::Ignore) return false;
    const bool set = dict_value_set(dict, names().aligned);
    return aligned_rule_ == AlignedRule::SlowIfSet ? set : !set;
  }

  /// KDA's RecoverSSM composite "_commit" of `d` as vLLM's objects (as the adapter's
  /// KimiK3KDAMetadataBuilder._assemble makes them): recoverssm_commit over the spec fields,
  /// its align part from `m`'s block table, and the builder's recoverssm_context. False, with
  /// `d` unchanged, when `d` has no "_commit" (another composite: `assemble` takes it).
  bool put_commit(nb::handle self, nb::handle d, nb::handle m) const {
    const Names& n = names();
    PyObject* c = PyDict_GetItemWithError(d.ptr(), n.commit.ptr());
    if (c == nullptr) {
      if (PyErr_Occurred()) throw nb::python_error();
      return false;
    }
    const nb::tuple commit =
        nb::borrow<nb::tuple>(c);  // (state_indices, qsl, request_indices, align)
    nb::object align = nb::none();
    if (!commit[3].is_none()) {
      const nb::tuple a = nb::borrow<nb::tuple>(commit[3]);  // (num_computed_tokens, block_size)
      align = with_fields(commit_[2], commit_[3],
                          {{n.block_table, get_attr(m, n.block_table_tensor)},
                           {n.num_computed_tokens, a[0]},
                           {n.block_size, a[1]}});
    }
    nb::object md = with_fields(commit_[0], commit_[1],
                                {{n.state_indices, dict_item(d, n.spec_state_indices)},
                                 {n.query_start_loc, dict_item(d, n.spec_query_start_loc)},
                                 {n.request_indices, commit[2]},
                                 {n.align, align}});
    const nb::object context = self.attr(n.context_getter)();
    if (PyDict_SetItem(d.ptr(), n.recoverssm_commit.ptr(), md.ptr()) != 0 ||
        PyDict_SetItem(d.ptr(), n.recoverssm_context.ptr(), context.ptr()) != 0 ||
        PyDict_DelItem(d.ptr(), n.commit.ptr()) != 0)
      throw nb::python_error();
    return true;
  }

  /// A plain dataclass `cls` whose __dict__ is `defaults` with `fields` set (no __init__).
  static nb::object with_fields(
      nb::handle cls, nb::handle defaults,
      std::initializer_list<std::pair<const nb::str&, nb::object>> fields) {
    nb::object d = nb::steal(PyDict_Copy(defaults.ptr()));
    if (!d.is_valid()) throw nb::python_error();
    for (const auto& [k, v] : fields)
      if (PyDict_SetItem(d.ptr(), k.ptr(), v.ptr()) != 0) throw nb::python_error();
    return with_dict(cls, d);
  }

  /// An instance of plain dataclass `cls` whose __dict__ is `d` (no __init__ call), as
  /// vllm.py's _with_dict makes one.
  static nb::object with_dict(nb::handle cls, nb::handle d) {
    static const nb::tuple* empty = new nb::tuple;  // never destroyed, as names()
    auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
    nb::object obj = nb::steal(PyBaseObject_Type.tp_new(type, empty->ptr(), nullptr));
    if (!obj.is_valid() || PyObject_GenericSetDict(obj.ptr(), d.ptr(), nullptr) != 0)
      throw nb::python_error();
    return obj;
  }

  /// d[key] (KeyError when absent).
  static nb::object dict_item(nb::handle d, nb::handle key) {
    PyObject* v = PyDict_GetItemWithError(d.ptr(), key.ptr());
    if (v == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key.ptr());
      throw nb::python_error();
    }
    return nb::borrow(v);
  }

  /// Whether dict[key] is there and not None.
  static bool dict_value_set(nb::handle dict, const nb::str& key) {
    PyObject* v = PyDict_GetItemWithError(dict.ptr(), key.ptr());
    if (v == nullptr && PyErr_Occurred()) throw nb::python_error();
    return v != nullptr && v != Py_None;
  }

  /// The __dict__ of `obj` when it holds the attribute `name` (generic attribute access, and
  /// the type has no attribute of that name: no descriptor or class default to consult), for
  /// read_attr to look there first. Else None.
  static nb::object instance_dict(nb::handle obj, const nb::str& name) {
    nb::handle type(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())));
    if (Py_TYPE(obj.ptr())->tp_getattro != PyObject_GenericGetAttr || nb::hasattr(type, name))
      return nb::none();
    PyObject* d = PyObject_GenericGetDict(obj.ptr(), nullptr);
    if (d == nullptr) {  // no __dict__ (slots): the attribute protocol it is
      PyErr_Clear();
      return nb::none();
    }
    return nb::steal(d);
  }

  /// obj.name, from `dict` (obj's own __dict__ or a module's) when the name is there: a dict
  /// lookup instead of the generic attribute protocol; get_attr otherwise (which raises
  /// AttributeError when obj has none).
  static nb::object read_attr(nb::handle obj, const nb::object& dict, const nb::str& name) {
    if (!dict.is_none()) {
      PyObject* v = PyDict_GetItemWithError(dict.ptr(), name.ptr());
      if (v != nullptr) return nb::borrow(v);
      if (PyErr_Occurred()) throw nb::python_error();
    }
    return get_attr(obj, name);
  }

  /// The dataclass over `d` as its __dict__ (no __init__ call), as vllm.py's
  /// _with_dict does for plain dataclasses.
  nb::object make(nb::handle d) const { return cls_.is_none() ? make_(d) : with_dict(cls_, d); }

  int32_t device_;
  nb::object engine_;
  int32_t slot_;
  nb::object module_, slow_, assemble_, cls_, make_;
  int64_t plain_len_;
  AlignedRule aligned_rule_;
  nb::object int32_;
  nb::object stream_fn_;
  nb::object module_dict_;  ///< linmeta.vllm's globals (_PREFETCH_TABLES)
  nb::object engine_dict_;  ///< the engine's __dict__ (its `session`), or None
  UpdateRule update_rule_;
  nb::tuple state_keys_;
  nb::object commit_;  ///< None or (commit class, defaults, align class, defaults)
};

/// The builder object's __dict__ and its VllmBuildState (null when it has none).
struct StateOf {
  nb::object dict;
  nb::object state;  ///< holds it: a call may replace the attribute
  explicit StateOf(nb::handle self) {
    dict = nb::steal(PyObject_GenericGetDict(self.ptr(), nullptr));
    if (!dict.is_valid()) throw nb::python_error();
    PyObject* s = PyDict_GetItemWithError(dict.ptr(), VllmBuildState::names().state.ptr());
    if (s == nullptr && PyErr_Occurred()) throw nb::python_error();
    if (s != nullptr && is_instance<VllmBuildState>(s)) state = nb::borrow(s);
  }
  [[nodiscard]] const VllmBuildState* get() const {
    return state.is_valid() ? nb::inst_ptr<VllmBuildState>(state) : nullptr;
  }
};

/// vLLM's build(); `self` is the builder object.
nb::object vllm_build(nb::handle self, nb::handle common_prefix_len, nb::handle m,
                      nb::handle accepted, nb::handle drafts, nb::handle fast_build) {
  const StateOf of(self);
  if (of.get() == nullptr)
    return self.attr(VllmBuildState::names().build_python)(common_prefix_len, m, accepted, drafts,
                                                           fast_build);
  return of.get()->build(self, of.dict, common_prefix_len, m, accepted, drafts, fast_build);
}

/// vLLM's update_block_table(); `self` is the builder object.
nb::object vllm_update_block_table(nb::handle self, nb::handle metadata, nb::handle table,
                                   nb::handle slot_mapping) {
  const StateOf of(self);
  if (of.get() == nullptr)
    return self.attr(VllmBuildState::names().update_python)(metadata, table, slot_mapping);
  return of.get()->update_block_table(self, of.dict, metadata, table, slot_mapping);
}

/// The current C++ exception as the Python error nanobind's bindings would raise for it
/// (linmeta.Error, TypeError, ...): rethrown inside a nanobind function, whose dispatcher
/// translates it. Returns null, for the method to return.
PyObject* raise_current_exception() {
  static thread_local std::exception_ptr pending;
  static const nb::object* rethrow = new nb::object(  // never destroyed, as names()
      nb::cpp_function([] { std::rethrow_exception(std::exchange(pending, nullptr)); }));
  pending = std::current_exception();
  PyObject* r = PyObject_CallNoArgs(rethrow->ptr());
  pending = nullptr;
  Py_XDECREF(r);  // null: the error is set
  return nullptr;
}

/// A method's arguments after self (METH_FASTCALL | METH_KEYWORDS) into `out`, by position
/// then by keyword; `out` holds the defaults (null: required). False, with TypeError set,
/// for too many, unknown, repeated or missing ones.
bool parse_args(const char* method, std::span<const nb::str> names, PyObject* const* args,
                Py_ssize_t nargs, PyObject* kwnames, std::span<PyObject*> out) {
  const auto n = static_cast<Py_ssize_t>(names.size());
  if (nargs > n) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %zd arguments (%zd given)", method, n, nargs);
    return false;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) out[static_cast<size_t>(i)] = args[i];
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    Py_ssize_t at = -1;
    for (Py_ssize_t i = 0; i < n && at < 0; ++i)  // interned names: pointers first
      if (key == names[static_cast<size_t>(i)].ptr()) at = i;
    for (Py_ssize_t i = 0; i < n && at < 0; ++i)
      if (PyUnicode_Compare(key, names[static_cast<size_t>(i)].ptr()) == 0) at = i;
    if (at < 0) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", method, key);
      return false;
    }
    if (at < nargs) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%U'", method, key);
      return false;
    }
    out[static_cast<size_t>(at)] = args[nargs + k];
  }
  for (Py_ssize_t i = 0; i < n; ++i)
    if (out[static_cast<size_t>(i)] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%U'", method,
                   names[static_cast<size_t>(i)].ptr());
      return false;
    }
  return true;
}

/// Interned argument names (never destroyed, as names()).
template <size_t N>
std::span<const nb::str> arg_names(const char* const (&names)[N]) {
  auto* out = new std::array<nb::str, N>;
  for (size_t i = 0; i < N; ++i) {
    PyObject* name = PyUnicode_InternFromString(names[i]);
    if (name == nullptr) throw nb::python_error();
    (*out)[i] = nb::steal<nb::str>(name);
  }
  return *out;
}

PyObject* build_method(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const std::span<const nb::str> names =
      arg_names({"common_prefix_len", "common_attn_metadata", "num_accepted_tokens",
                 "num_decode_draft_tokens_cpu", "fast_build"});
  std::array<PyObject*, 5> a = {nullptr, nullptr, Py_None, Py_None, Py_False};
  if (!parse_args("build", names, args, nargs, kwnames, a)) return nullptr;
  try {
    return vllm_build(self, a[0], a[1], a[2], a[3], a[4]).release().ptr();
  } catch (...) {
    return raise_current_exception();
  }
}

PyObject* update_block_table_method(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                                    PyObject* kwnames) {
  static const std::span<const nb::str> names =
      arg_names({"metadata", "blk_table", "slot_mapping"});
  std::array<PyObject*, 3> a = {nullptr, nullptr, nullptr};
  if (!parse_args("update_block_table", names, args, nargs, kwnames, a)) return nullptr;
  try {
    return vllm_update_block_table(self, a[0], a[1], a[2]).release().ptr();
  } catch (...) {
    return raise_current_exception();
  }
}

// CPython method descriptors (like a C type's methods): the interpreter calls them without an
// argument-conversion layer, and they bind `self` as Python functions do.
PyMethodDef build_def = {
    "build", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&build_method)),
    METH_FASTCALL | METH_KEYWORDS,
    "build($self, /, common_prefix_len, common_attn_metadata, num_accepted_tokens=None, "
    "num_decode_draft_tokens_cpu=None, fast_build=False)\n--\n\n"
    "vLLM's build() of linmeta.vllm's builder classes: one C++ call for plain steps, the "
    "object's _build_python otherwise."};
PyMethodDef update_block_table_def = {
    "update_block_table",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&update_block_table_method)),
    METH_FASTCALL | METH_KEYWORDS,
    "update_block_table($self, /, metadata, blk_table, slot_mapping)\n--\n\n"
    "vLLM's update_block_table() of linmeta.vllm's GDN builder: one C++ call for a plain "
    "dataclass without checkpoints, the object's _update_block_table_python otherwise."};

}  // namespace

void bind_vllm_build_call(nb::module_& m) {
  nb::class_<VllmBuildState>(m, "VllmBuildState",
                             "A builder object's fixed parts of linmeta.vllm's fast build() "
                             "(internal; its `_fast_build` attribute).")
      .def(nb::init<nb::handle, int32_t, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle,
                    int64_t, int32_t, nb::handle, int32_t, int32_t, nb::tuple, nb::handle>(),
           "engine"_a, "slot"_a, "module"_a, "slow"_a, "assemble"_a, "cls"_a.none(), "make"_a,
           "plain_len"_a, "aligned_rule"_a, "int32"_a, "device"_a, "update_rule"_a, "state_keys"_a,
           "commit"_a.none() = nb::none());
  m.def(
      "vllm_method",
      [](nb::type_object cls, const std::string& name) {
        PyMethodDef* def = name == "build"                ? &build_def
                           : name == "update_block_table" ? &update_block_table_def
                                                          : nullptr;
        if (def == nullptr) throw nb::value_error("vllm_method: build or update_block_table");
        PyObject* d = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def);
        if (d == nullptr) throw nb::python_error();
        return nb::steal(d);
      },
      "cls"_a, "name"_a,
      "vLLM's build() or update_block_table() as a method descriptor of `cls` (for its "
      "instances and its subclasses': linmeta.vllm's builder classes take one of their base): "
      "the C++ fast path over each object's VllmBuildState.");
}

}  // namespace linmeta::py

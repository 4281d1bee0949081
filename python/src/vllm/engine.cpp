#include "engine.hpp"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../binding/config_args.hpp"
#include "../binding/dlpack_exchange.hpp"
#include "../binding/fields.hpp"
#include "../binding/gc_slots.hpp"
#include "../binding/step_inputs.hpp"
#include "linmeta/outputs.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace linmeta::py {

namespace {

/// The CommonAttentionMetadata attributes a call reads.
enum Attr : int32_t {
  kQslCpu,
  kSeqLens,
  kUpperBound,
  kQsl,
  kIsPrefilling,
  kNumActualTokens,
  kNumReqs,
  kBlockTable,
  kAttrs
};
constexpr std::array<const char*, kAttrs> kAttrNames = {"query_start_loc_cpu",
                                                        "seq_lens",
                                                        "seq_lens_cpu_upper_bound",
                                                        "query_start_loc",
                                                        "is_prefilling",
                                                        "num_actual_tokens",
                                                        "num_reqs",
                                                        "block_table_tensor"};

/// One build's inputs: the CommonAttentionMetadata attributes and the counts handed to
/// build(), read afresh on every call (nothing is kept from an earlier call's objects).
struct CallInputs {
  std::array<nb::object, kAttrs> attr;
  nb::object accepted, drafts;      ///< the caller's objects (handed back where a field is one)
  nb::object accepted32, drafts32;  ///< what is read: int32 copies of int64 torch counts

  /// `convert`: int64 torch counts are read from int32 copies (GDN / KDA: vLLM releases
  /// before 0.34 keep them as int64; linmeta reads int32), else read as they are (an int64
  /// count is then refused by dtype).
  void read(nb::handle m, nb::handle accepted_, nb::handle drafts_,
            const std::array<nb::str, kAttrs>& names, bool convert) {
    for (int32_t i = 0; i < kAttrs; ++i) {
      PyObject* v = PyObject_GetAttr(m.ptr(), names[i].ptr());
      if (v == nullptr) {
        // seq_lens_cpu_upper_bound is optional: vLLM releases before it had seq_lens_cpu.
        if (i != kUpperBound) throw nb::python_error();
        PyErr_Clear();
        v = PyObject_GetAttrString(m.ptr(), "seq_lens_cpu");
        if (v == nullptr) throw nb::python_error();
      }
      attr[i] = nb::steal(v);
    }
    accepted = nb::borrow(accepted_);
    drafts = nb::borrow(drafts_);
    accepted32 = convert ? int32_copy_of_int64(accepted) : nb::object();
    if (!accepted32.is_valid()) accepted32 = accepted;
    drafts32 = convert ? int32_copy_of_int64(drafts) : nb::object();
    if (!drafts32.is_valid()) drafts32 = drafts;
  }

  [[nodiscard]] StepArgs args(nb::handle stream) const {
    return make_step_args(attr[kQslCpu], attr[kSeqLens], attr[kUpperBound], attr[kNumActualTokens],
                          attr[kQsl], attr[kIsPrefilling], drafts32, accepted32, attr[kNumReqs],
                          stream);
  }

  int traverse(visitproc visit, void* arg) const {
    for (const nb::object& o : attr) Py_VISIT(o.ptr());
    Py_VISIT(accepted.ptr());
    Py_VISIT(drafts.ptr());
    Py_VISIT(accepted32.ptr());
    Py_VISIT(drafts32.ptr());
    return 0;
  }
};

/// A dataclass whose instances the engine makes: the class and its tp_new slot (the type's
/// __new__, called as cls.__new__(cls) calls it, without the tuples of that call).
struct Maker {
  nb::object cls, no_args;
  newfunc new_;
  explicit Maker(nb::object c)
      : cls(std::move(c)), no_args(nb::steal(PyTuple_New(0))), new_(nullptr) {
    if (!no_args.is_valid()) throw nb::python_error();
    if (!PyType_Check(cls.ptr()))
      throw nb::type_error("linmeta.vllm: a metadata class must be a class");
    new_ = reinterpret_cast<newfunc>(
        PyType_GetSlot(reinterpret_cast<PyTypeObject*>(cls.ptr()), Py_tp_new));
    if (new_ == nullptr) throw nb::type_error("linmeta.vllm: the metadata class has no __new__");
  }

  [[nodiscard]] PyTypeObject* type() const { return reinterpret_cast<PyTypeObject*>(cls.ptr()); }

  /// An instance whose instance __dict__ is `fields` (vLLM's metadata classes are plain
  /// dataclasses, which linmeta.vllm checks: the same as calling __init__ with them).
  [[nodiscard]] nb::object operator()(nb::handle fields) const {
    static const nb::handle dict_name = interned("__dict__").release();  // never released
    nb::object obj =
        nb::steal(new_(reinterpret_cast<PyTypeObject*>(cls.ptr()), no_args.ptr(), nullptr));
    if (!obj.is_valid() || PyObject_SetAttr(obj.ptr(), dict_name.ptr(), fields.ptr()) != 0)
      throw nb::python_error();
    return obj;
  }
};

/// The field names of dataclass `cls`.
nb::list dataclass_fields(nb::handle cls) {
  nb::list names;
  for (nb::handle f : nb::borrow<nb::dict>(cls.attr("__dataclass_fields__")).keys())
    names.append(f);
  return names;
}

/// A new dict with the items of `d`.
nb::dict copy(nb::handle d) {
  PyObject* c = PyDict_Copy(d.ptr());
  if (c == nullptr) throw nb::python_error();
  return nb::steal<nb::dict>(c);
}

/// The block table's attribute name in CommonAttentionMetadata (errors name it).
constexpr const char* kTableName = "block_table_tensor";

/// The builder argument of Engine(): a linmeta.MetadataBuilder of one group.
nb::object checked_builder(nb::handle builder) {
  if (!nb::isinstance<PyBuilder>(builder))
    throw nb::type_error(("linmeta.vllm: Engine takes a linmeta.MetadataBuilder, got " +
                          nb::cast<std::string>(nb::str(
                              nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(builder.ptr()))))))
                             .c_str());
  if (nb::inst_ptr<PyBuilder>(builder)->builder.num_groups() != 1)
    raise_error("linmeta.vllm: an Engine serves one KV-cache group (num_groups = 1)");
  return nb::borrow(builder);
}

/// linmeta.vllm.Error: what the engine raises where the library raises linmeta::Error — a
/// linmeta.Error (a ValueError) that is also an AssertionError and a RuntimeError, the
/// exceptions vLLM's builders raise in those situations (their assertions; torch's errors), so
/// that code catching vLLM's builder's exception catches linmeta's too. Made by bind_vllm.
PyObject* vllm_error = nullptr;

/// `f()`, with a linmeta::Error raised as linmeta.vllm.Error (the same message).
template <class F>
auto raising_vllm_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    PyErr_SetString(vllm_error, e.what());
    throw nb::python_error();
  }
}

class Engine;
/// Every live engine (update_block_table looks up the engine that made a metadata object);
/// read and written with the GIL held, never destroyed.
auto* const live_engines = new std::vector<Engine*>();

/// The native half of one linmeta.vllm builder object (engine.hpp).
class Engine {
 public:
  /// builder: the object's own linmeta MetadataBuilder (one group); cls: the metadata
  /// dataclass every call returns; defaults: its fields' defaults (every result starts from a
  /// copy); classes: {field name: dataclass} for the composites vLLM returns as dataclasses
  /// ("a.b" for one nested in composite a); each made with its members as the instance's
  /// __dict__ (Maker); scratch: {field name: tensor}, the caller's persistent ReplaySSM
  /// scratch buffers (vLLM's write_pos_d, is_flush_d, bc_pre_scratch), each such field of a
  /// result a new view of the first Metadata::replayssm_rows rows (None where that is None).
  Engine(nb::handle builder, nb::object cls, nb::dict defaults, nb::dict classes, nb::dict scratch)
      : builder_(checked_builder(builder)),
        b_(nb::inst_ptr<PyBuilder>(builder_)),
        exporter_(builder_, b_->device_id, b_->array_type, /*fresh_views=*/true),
        make_(std::move(cls)),
        defaults_(std::move(defaults)) {
    for (int32_t i = 0; i < kAttrs; ++i) names_[i] = interned(kAttrNames[i]);
    const BuilderKind kind = b_->builder.kind();
    converts_counts_ = is_gdn_family(kind);
    nb::set wanted;
    for (nb::handle f : dataclass_fields(make_.cls)) wanted.add(f);
    for (const OutputSpec& spec : kOutputs) {
      if (!spec.is_output() || spec.nested() || !spec.has(kind)) continue;
      nb::str key = interned(spec.name);  // the dataclass's field names are interned
      if (wanted.contains(key)) keys_.push_back({spec.id, key, has_group_rows(spec)});
    }
    // Each composite dataclass and its fields' rows (vLLM's; the seed KDA's has two of six).
    for (auto [k, c] : classes) {
      const std::string name = nb::cast<std::string>(k);
      const OutputSpec* row = find_output(name);
      if (row == nullptr || !is_composite_row(*row) || row->id == Out::NumsDict)
        raise_error("classes: '" + name + "' names no composite field");
      CompositeClass cc{Maker(nb::borrow(c)), {}};
      for (nb::handle f : dataclass_fields(c))
        cc.fields.push_back(
            {nb::borrow<nb::str>(f), find_output(name + "." + nb::cast<std::string>(f))});
      composites_[static_cast<size_t>(row->id)] = std::make_unique<CompositeClass>(std::move(cc));
    }
    for (auto [k, t] : scratch) {
      if (!nb::isinstance<nb::str>(k) || !wanted.contains(k))
        raise_error("scratch: " + nb::cast<std::string>(nb::repr(k)) +
                    " names no field of the metadata class");
      scratch_.emplace_back(nb::borrow<nb::str>(k), nb::borrow(t));
    }
    live_engines->push_back(this);
  }
  ~Engine() { std::erase(*live_engines, this); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// The metadata of the step of CommonAttentionMetadata `m` (capture: vLLM's
  /// build_for_cudagraph_capture): one plan and one launch of this object's own builder.
  nb::object build(nb::handle m, nb::handle accepted, nb::handle drafts, bool capture) {
    return raising_vllm_errors([&] { return build_step(m, accepted, drafts, capture); });
  }

  nb::object update_block_table(nb::handle metadata, nb::handle table) {
    return raising_vllm_errors([&] { return update(metadata, table); });
  }

  [[nodiscard]] nb::dict stats() const {
    nb::dict d;
    d["plans"] = plans_;
    d["regathers"] = regathers_;
    d["rebuilds"] = rebuilds_;
    d["views"] = exporter_.views_made();
    return d;
  }

  [[nodiscard]] const nb::object& builder() const { return builder_; }

  /// The Python objects this engine holds, for the garbage collector: a result may refer back
  /// to the builder object holding this engine (a cycle through native code otherwise).
  int traverse(visitproc visit, void* arg) const {
    Py_VISIT(builder_.ptr());
    Py_VISIT(make_.cls.ptr());
    Py_VISIT(defaults_.ptr());
    for (const auto& s : scratch_) Py_VISIT(s.second.ptr());
    for (const auto& c : composites_)
      if (c) Py_VISIT(c->make.cls.ptr());
    if (const int r = last_.traverse(visit, arg); r != 0) return r;
    Py_VISIT(table_.object.ptr());
    Py_VISIT(result_.ptr());
    return exporter_.traverse(visit, arg);
  }
  /// Drops the references a cycle may run through (the engine is unreachable: no call follows).
  void clear() {
    last_ = CallInputs{};
    table_.object = nb::object();
    result_ = nb::object();
    defaults_ = nb::dict();
    scratch_.clear();
    exporter_.clear();
  }

 private:
  nb::object build_step(nb::handle m, nb::handle accepted, nb::handle drafts, bool capture) {
    const CallGuard guard(*b_, capture ? "build_for_cudagraph_capture" : "build");
    CallInputs in;
    in.read(m, accepted, drafts, names_, converts_counts_);
    Built built = plan(in, in.attr[kBlockTable], capture);
    commit(std::move(in), std::move(built), capture);
    return result(fill(copy(defaults_)));
  }

  /// vLLM's update_block_table: `metadata` with its state indices gathered from `table`.
  /// Metadata this engine made in its last call: one re-gather into its buffers. Metadata
  /// another engine of the same configuration made in its last call (vLLM's runner hands a
  /// group's metadata to the other groups' builders of the same spec): this engine builds
  /// that step from the inputs the other read, with `table`, and checks the step's counts are
  /// the metadata's.
  nb::object update(nb::handle metadata, nb::handle table) {
    const CallGuard guard(*b_, "update_block_table");
    nb::object d = nb::steal(PyObject_GetAttrString(metadata.ptr(), "__dict__"));
    if (!d.is_valid()) throw nb::python_error();
    if (result_.is_valid() && result_.is(d)) {
      regather(table);
      return result(fill(copy(d), /*group_rows_only=*/true));
    }
    Engine* source = maker_of(d);
    if (source == nullptr)
      raise_error("update_block_table takes metadata a linmeta.vllm builder made in its last call");
    if (source->b_->builder.kind() != b_->builder.kind() ||
        !config_dict(source->b_->builder.config()).equal(config_dict(b_->builder.config())))
      raise_error(
          "update_block_table takes metadata of a builder of the same configuration (this "
          "metadata's builder has another)");
    CallInputs in = source->last_;
    Built built = plan(in, table, source->capture_, "blk_table");
    const Metadata& theirs = source->meta_;
    const bool same =
        static_cast<const StepCounts&>(built.meta) == static_cast<const StepCounts&>(theirs) &&
        built.num_reqs == source->num_reqs_;
    commit(std::move(in), std::move(built), source->capture_);  // the builder's buffers are its
    if (!same) {
      result_ = nb::object();  // the last result's views show this build now
      raise_error(
          "update_block_table: the step's inputs changed in place since this metadata was "
          "built (its counts are not the step's any more)");
    }
    ++rebuilds_;
    return result(fill(copy(d), /*group_rows_only=*/true));
  }

  struct Key {
    Out id;
    nb::str name;
    bool group;  ///< the row or a member of its composite is Scope::Group
  };

  /// Whether top-level row `spec` is, or holds (a composite's members, at any depth), a row
  /// of Scope::Group: what update_block_table re-gathers.
  static bool has_group_rows(const OutputSpec& spec) {
    const size_t n = std::strlen(spec.name);
    for (const OutputSpec& row : kOutputs)
      if (row.is_output() && row.scope == Scope::Group &&
          (row.id == spec.id || (std::strncmp(row.name, spec.name, n) == 0 && row.name[n] == '.')))
        return true;
    return false;
  }
  /// The block table of the last call.
  struct GroupTable {
    nb::object object;
    BlockTable table;
  };
  /// A plan's outcome, made this engine's by commit().
  struct Built {
    Metadata meta;
    GroupTable table;
    int32_t num_reqs = 0;  ///< the step's rows
    /// vLLM's num_accepted_tokens is its own int32 buffer's: the spec rows staged in the
    /// FULL-graph buffers, or KDA's RecoverSSM (which always writes its own counts).
    bool accepted_int32 = false;
    const int32_t* seq_lens = nullptr;  ///< the caller arrays' data (FieldExporter hands
    const int32_t* accepted = nullptr;  ///< their objects back where a field is one)
    const int32_t* qsl = nullptr;
    const int32_t* drafts = nullptr;
  };

  /// The engine that made result dict `d` in its last call, or null.
  static Engine* maker_of(nb::handle d) {
    for (Engine* e : *live_engines)
      if (e->result_.is_valid() && e->result_.is(d)) return e;
    return nullptr;
  }

  /// The stream a step launches on: on the cuda target the current work stream of the block
  /// table's producer, read through its DLPack C exchange API (torch:
  /// torch.cuda.current_stream(), where the caller's work on these tensors runs); `known`:
  /// false where the producer publishes none (refused by require_known once the table is
  /// imported: an object that is no CUDA table gets the import's error first).
  struct LaunchStream {
    Stream stream = nullptr;
    bool known = true;
  };
  [[nodiscard]] LaunchStream launch_stream(nb::handle table) const {
    LaunchStream l;
    if (b_->builder.target() == Target::Cuda)
      l.known = producer_stream(table, b_->device_id, l.stream);
    return l;
  }
  static void require_known(const LaunchStream& l, nb::handle table, const char* name) {
    if (!l.known)
      raise_error(std::string(name) +
                  ": the cuda target launches on the current stream of the tensors' producer, "
                  "read through the DLPack C exchange API (__dlpack_c_exchange_api__, torch >= "
                  "2.11), which " +
                  nb::cast<std::string>(
                      nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(table.ptr()))))) +
                  " does not publish");
  }

  /// Imports a block table for a step of `num_reqs` rows; `consumer`: the stream the work
  /// reading it runs on (a __cuda_array_interface__ producer's stream is ordered before it).
  GroupTable import(nb::handle obj, int32_t num_reqs, const char* name, Stream consumer) const {
    ImportedArray a;
    const BlockTable t = import_table(a, obj, name, num_reqs, b_->memory(), consumer);
    return {nb::borrow(obj), t};
  }

  /// Plans and builds the step of `in` from block table `table` (`table_name` for errors).
  /// Nothing of the engine changes: commit() takes the outcome.
  Built plan(const CallInputs& in, nb::handle table, bool capture,
             const char* table_name = kTableName) {
    PreparedStep& p = prepared_;
    p.reset();  // its vectors' memory stays
    const LaunchStream launch = launch_stream(table);
    // The inputs ordered before the launch stream.
    prepare(p, *b_, in.args(nb::steal(PyLong_FromVoidPtr(launch.stream))));
    Built out;
    out.table = import(table, p.step.num_reqs, table_name, p.stream);
    require_known(launch, table, table_name);
    p.step.block_table = out.table.table;
    out.meta = capture ? b_->builder.build_for_cudagraph_capture(p.step, p.stream)
                       : b_->builder.build(p.step, p.stream);
    out.num_reqs = p.step.num_reqs;
    out.accepted_int32 = out.meta.spec_rows_staged || b_->builder.config().use_recoverssm;
    out.seq_lens = p.step.seq_lens;
    out.accepted = p.step.num_accepted_tokens;
    out.qsl = p.step.query_start_loc;
    out.drafts =
        p.step.num_decode_draft_tokens.empty() ? nullptr : p.step.num_decode_draft_tokens.data();
    p.reset();  // the caller's arrays are held by the call's inputs from here
    return out;
  }

  void commit(CallInputs&& in, Built&& built, bool capture) {
    last_ = std::move(in);
    meta_ = built.meta;
    table_ = std::move(built.table);
    num_reqs_ = built.num_reqs;
    accepted_int32_ = built.accepted_int32;
    seq_lens_ = built.seq_lens;
    accepted_ = built.accepted;
    qsl_ = built.qsl;
    drafts_ = built.drafts;
    capture_ = capture;
    ++plans_;
  }

  /// The last step's state indices from `table`: one re-gather unless it is the memory the
  /// last call read.
  void regather(nb::handle table) {
    const char* name = "blk_table";  // vLLM's argument name
    const LaunchStream launch = launch_stream(table);
    GroupTable t = import(table, num_reqs_, name, launch.stream);
    require_known(launch, table, name);
    if (!(t.table == table_.table)) {
      meta_ = b_->builder.update_block_table(meta_, t.table, 0, launch.stream);
      ++regathers_;
    }
    table_ = std::move(t);
  }

  /// The metadata dataclass over `fields`; update_block_table takes metadata over the last
  /// such dict (this engine's, or another's of the same configuration).
  nb::object result(nb::dict fields) {
    result_ = fields;
    return make_(fields);
  }

  /// Sets every field of `out` from the last call's metadata: arrays of the builder's buffers
  /// as new view objects, the caller's arrays as the caller's objects. `group_rows_only`
  /// (update_block_table: `out` is a copy of the metadata handed in): only the group's rows
  /// (Key::group), every batch-level field staying the metadata's very object, as vLLM's
  /// dataclasses.replace keeps them.
  nb::dict fill(nb::dict out, bool group_rows_only = false) {
    exporter_.begin_result();
    CallerArrays ca;
    ca.seq_lens = last_.attr[kSeqLens];
    ca.accepted = last_.accepted;
    ca.query_start_loc = last_.attr[kQsl];
    ca.block_table = table_.object;
    ca.seq_lens_data = seq_lens_;
    ca.accepted_data = accepted_;
    ca.query_start_loc_data = qsl_;
    ca.drafts = last_.drafts;
    ca.drafts_data = drafts_;
    for (const Key& k : keys_) {
      const OutputSpec& spec = output_spec(k.id);
      if (group_rows_only && !k.group) continue;
      nb::object v = group_rows_only ? value(spec, meta_, ca, out[k.name]) : value(spec, meta_, ca);
      // vLLM gathers int64 counts in their dtype unless it writes its own int32 buffer
      // (Built::accepted_int32); the caller's tensor where it is handed back is in it.
      if (k.id == Out::NumAcceptedTokens && !accepted_int32_ && !v.is_none() &&
          !v.is(last_.accepted) && !last_.accepted32.is(last_.accepted))
        v = v.attr("to")(last_.accepted.attr("dtype"));
      out[k.name] = std::move(v);
    }
    // vLLM's update_block_table re-slices its ReplaySSM scratch on a FULL-graph decode step
    // (from the updating builder's buffers) and keeps the metadata's views otherwise.
    if (!group_rows_only || meta_.decode_rows_staged) fill_scratch(out);
    return out;
  }

  /// The scratch fields of a result: new views of the buffers' first replayssm_rows rows.
  void fill_scratch(nb::dict& out) const {
    for (const auto& [name, buffer] : scratch_)
      out[name] = meta_.replayssm_rows ? first_rows(buffer, *meta_.replayssm_rows) : nb::none();
  }

  /// Row `spec`'s value in `m`: a composite configured as a dataclass made from its
  /// fields' rows (a field linmeta has no row for is None), any other row as the exporter
  /// makes it.
  ///
  /// `source` (update_block_table): the metadata's own value of the row; a composite dataclass
  /// is then that object with only its group's members made anew (vLLM's
  /// regather_state_indices: dataclasses.replace), the other members its very objects.
  nb::object value(const OutputSpec& spec, const Metadata& m, const CallerArrays& ca,
                   nb::handle source = nb::handle()) {
    const CompositeClass* c = composites_[static_cast<size_t>(spec.id)].get();
    if (c == nullptr) return exporter_.value(spec, m, ca);
    const FieldRef r = spec.field(const_cast<Metadata&>(m));
    if (!r || !r.present()) return nb::none();
    const bool replace =
        source.is_valid() && !source.is_none() && PyObject_TypeCheck(source.ptr(), c->type());
    nb::dict fields = replace ? copy(source.attr("__dict__")) : nb::dict();
    for (const auto& [name, row] : c->fields) {
      if (replace && (row == nullptr || !has_group_rows(*row))) continue;
      fields[name] = row == nullptr ? nb::none()
                     : replace      ? value(*row, m, ca, source.attr(name))
                                    : value(*row, m, ca);
    }
    return c->make(fields);
  }

  static bool is_composite_row(const OutputSpec& row) {
    Metadata probe;
    const FieldRef r = row.field(probe);
    return r.type == FieldType::Composite;
  }

  nb::object builder_;  ///< the linmeta MetadataBuilder (owner of the buffers)
  PyBuilder* b_;
  FieldExporter exporter_;
  Maker make_;  ///< the metadata dataclass
  nb::dict defaults_;
  /// A composite vLLM returns as a dataclass: the class and each field's row (null: none).
  struct CompositeClass {
    Maker make;
    std::vector<std::pair<nb::str, const OutputSpec*>> fields;
    [[nodiscard]] PyTypeObject* type() const { return make.type(); }
  };
  /// By the composite's row (nested ones too); null: returned as a dict.
  std::array<std::unique_ptr<CompositeClass>, kNumOutputs> composites_;
  std::array<nb::str, kAttrs> names_;
  std::vector<Key> keys_;
  std::vector<std::pair<nb::str, nb::object>> scratch_;  ///< field name, the caller's buffer

  PreparedStep prepared_;  ///< a plan's imports (emptied after it)
  /// The last call: its inputs (held until the next call: the launch reads them, another
  /// engine's update_block_table builds from them), metadata, table and result dict.
  CallInputs last_;
  Metadata meta_;
  GroupTable table_;
  nb::object result_;
  bool capture_ = false;
  int32_t num_reqs_ = 0;
  bool accepted_int32_ = false;        ///< Built::accepted_int32 of the last call
  bool converts_counts_ = false;       ///< int64 torch counts are read from int32 copies
  const int32_t* seq_lens_ = nullptr;  ///< the last call's caller arrays
  const int32_t* accepted_ = nullptr;
  const int32_t* qsl_ = nullptr;
  const int32_t* drafts_ = nullptr;
  int64_t plans_ = 0, regathers_ = 0, rebuilds_ = 0;
};

}  // namespace

void bind_vllm(nb::module_& m) {
  nb::module_ sub = m.def_submodule("vllm", "The native half of linmeta.vllm.");
  nb::object bases = nb::make_tuple(m.attr("Error"), nb::handle(PyExc_AssertionError),
                                    nb::handle(PyExc_RuntimeError));
  vllm_error = PyErr_NewExceptionWithDoc(
      "linmeta._linmeta.vllm.Error",
      "What linmeta.vllm's builders raise where vLLM's raise AssertionError or RuntimeError: "
      "a linmeta.Error (ValueError) that is also an AssertionError and a RuntimeError.",
      bases.ptr(), nullptr);
  if (vllm_error == nullptr) throw nb::python_error();
  sub.attr("Error") = nb::handle(vllm_error);  // the module keeps a reference too
  nb::class_<Engine>(sub, "Engine", nb::type_slots(GcSlots<Engine>::slots),
                     nb::is_weak_referenceable(),
                     "The native half of one linmeta.vllm builder object, over its own "
                     "linmeta.MetadataBuilder (python/src/vllm/engine.hpp).")
      .def(nb::init<nb::handle, nb::object, nb::dict, nb::dict, nb::dict>(), "builder"_a.none(),
           "cls"_a, "defaults"_a, "classes"_a, "scratch"_a = nb::dict())
      .def("build", &Engine::build, "m"_a, "num_accepted_tokens"_a.none(),
           "num_decode_draft_tokens_cpu"_a.none(), "capture"_a)
      .def("update_block_table", &Engine::update_block_table, "metadata"_a, "table"_a.none())
      .def_prop_ro("builder", &Engine::builder,
                   "The linmeta.MetadataBuilder this engine builds with.")
      .def_prop_ro("stats", &Engine::stats,
                   "Plans, re-gathers, rebuilds (update_block_table of another engine's "
                   "metadata) and views made.");
}

}  // namespace linmeta::py

#include "engine.hpp"

#include <nanobind/stl/string.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../binding/dlpack_exchange.hpp"
#include "../binding/fields.hpp"
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

/// One call's CommonAttentionMetadata inputs plus the counts handed to build().
struct CallInputs {
  std::array<nb::object, kAttrs> attr;
  nb::object accepted, drafts;

  /// Reads call's inputs (replacing those held).
  void read(nb::handle m, nb::handle accepted_, nb::handle drafts_,
            const std::array<nb::str, kAttrs>& names) {
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
  }

  /// The same step as `o`: the very objects the runner hands every group of a step
  /// (query_start_loc_cpu, seq_lens, ... are new objects every step, and `o` holds its own
  /// alive, so the same object means the same step); the per-group slices vLLM 0.34's runner
  /// makes afresh for each builder call (is_prefilling, the counts) may instead be views of
  /// the same memory (data, shape, strides, dtype, device).
  [[nodiscard]] bool same_step(const CallInputs& o) const {
    for (int32_t i = 0; i < kAttrs; ++i) {
      if (i == kBlockTable) continue;
      if (i == kNumActualTokens || i == kNumReqs) {
        if (!attr[i].equal(o.attr[i])) return false;
      } else if (i == kIsPrefilling) {
        if (!same_view(attr[i], o.attr[i])) return false;
      } else if (!attr[i].is(o.attr[i])) {
        return false;
      }
    }
    return same_view(accepted, o.accepted) && same_view(drafts, o.drafts);
  }

 private:
  /// `a` is `b`, or both views of the same memory; an input that does not import is no match
  /// (the plan then names it).
  static bool same_view(nb::handle a, nb::handle b) {
    if (a.is(b)) return true;
    if (a.is_none() || b.is_none()) return false;
    try {
      const ImportedArray x = import_array(a, "input", nullptr);
      const ImportedArray y = import_array(b, "input", nullptr);
      return x.data == y.data && x.ndim == y.ndim && x.shape[0] == y.shape[0] &&
             x.shape[1] == y.shape[1] && x.strides[0] == y.strides[0] &&
             x.strides[1] == y.strides[1] && x.dtype == y.dtype && x.device_type == y.device_type &&
             x.device_id == y.device_id;
    } catch (const nb::python_error&) {
      return false;
    } catch (const std::exception&) {
      return false;
    }
  }

 public:
  [[nodiscard]] StepArgs args(nb::handle stream) const {
    return make_step_args(attr[kQslCpu], attr[kSeqLens], attr[kUpperBound], attr[kNumActualTokens],
                          attr[kQsl], attr[kIsPrefilling], drafts, accepted, attr[kNumReqs],
                          stream);
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

  /// An instance whose instance __dict__ is `fields` (vLLM's metadata classes are plain
  /// dataclasses, which linmeta.vllm checks: the same as calling __init__ with them).
  [[nodiscard]] nb::object operator()(nb::handle fields) const {
    static const nb::str dict_name = interned("__dict__");
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

class Engine {
 public:
  /// builder: a linmeta MetadataBuilder (one group per builder object of the engine);
  /// cls: the metadata dataclass every call returns; defaults: its fields' defaults (every
  /// result starts from a copy); classes: {field name: dataclass} for the composites vLLM
  /// returns as dataclasses ("a.b" for one nested in composite a); each made with its
  /// members as the instance's __dict__ (Maker);
  /// prefetch_tables: a plan gathers the other groups' state indices from the tables they
  /// used the step before (checked when they are served).
  Engine(nb::object builder, nb::object cls, nb::dict defaults, nb::dict classes,
         bool prefetch_tables)
      : b_(nb::inst_ptr<PyBuilder>(builder)),
        exporter_(builder, b_->device_id, b_->array_type),
        make_(std::move(cls)),
        defaults_(std::move(defaults)),
        prefetch_(prefetch_tables) {
    for (int32_t i = 0; i < kAttrs; ++i) names_[i] = interned(kAttrNames[i]);
    const BuilderKind kind = b_->builder.kind();
    nb::set wanted;
    for (nb::handle f : dataclass_fields(make_.cls)) wanted.add(f);
    for (const OutputSpec& spec : kOutputs) {
      if (!spec.is_output() || spec.nested() || !spec.has(kind)) continue;
      nb::str key = interned(spec.name);  // the dataclass's field names are interned
      if (wanted.contains(key)) keys_.push_back({spec.id, key});
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
    const auto G = static_cast<size_t>(b_->builder.num_groups());
    tables_.resize(G);
    served_.assign(G, 1);
    results_.resize(G);
    metas_.resize(G);
  }

  /// Group `group`'s metadata of the step of CommonAttentionMetadata `m`; with int64_counts,
  /// None (nothing done) for int64 counts, which the caller converts, instead of their
  /// TypeError.
  nb::object build(int32_t group, nb::handle m, nb::handle accepted, nb::handle drafts,
                   bool capture, bool int64_counts) {
    check_group(group);
    // This call's inputs in the slot the planning call's are not in.
    const int32_t slot = last_ == 0 ? 1 : 0;
    CallInputs& in = calls_[static_cast<size_t>(slot)];
    in.read(m, accepted, drafts, names_);
    const auto g = static_cast<size_t>(group);
    if (last_ >= 0 && !served_[g] && capture == capture_ && in.same_step(last())) {
      served_[g] = 1;
      ++served_count_;
      regather(group, in.attr[kBlockTable], kTableName);
      // The planning call's result with this group's values where they differ; this call's
      // objects where a field is one, as vLLM returns them.
      return result(group, planned_valid_ ? fill(group, copy(planned_), in, &planned_meta_)
                                          : fill(group, copy(defaults_), in));
    }
    if (!plan(group, in, capture, int64_counts)) return nb::none();
    last_ = slot;
    // What the other groups' calls and the next plan start from: the last plan's result
    // where a field keeps its value (a scheduler's steps repeat most), updated in place.
    const bool from_last = planned_valid_;
    planned_valid_ = false;  // until filled (an export that raises leaves it part-filled)
    if (!from_last) planned_ = copy(defaults_);
    fill(group, planned_, last(), from_last ? &planned_meta_ : nullptr);
    planned_meta_ = metas_[g];
    planned_valid_ = true;
    return result(group, copy(planned_));
  }

  nb::object update_block_table(int32_t group, nb::handle metadata, nb::handle table) {
    check_group(group);
    // The metadata must be an object made from a dict this engine returned in its last step.
    nb::object d = nb::steal(PyObject_GetAttrString(metadata.ptr(), "__dict__"));
    if (!d.is_valid()) throw nb::python_error();
    bool ours = false;
    for (const nb::object& r : results_) ours = ours || (r.is_valid() && r.is(d));
    if (!ours)
      raise_error("update_block_table takes metadata this engine's builders made in its last step");
    regather(group, table, "blk_table");  // vLLM's argument name
    served_[static_cast<size_t>(group)] = 1;
    return result(group, fill(group, copy(d), last()));
  }

  [[nodiscard]] nb::dict stats() const {
    nb::dict d;
    d["plans"] = plans_;
    d["served"] = served_count_;
    d["regathers"] = regathers_;
    d["views"] = exporter_.views_made();
    return d;
  }

 private:
  struct Key {
    Out id;
    nb::str name;
  };
  /// The table a group's state indices were gathered from in the last step.
  struct GroupTable {
    nb::object object;
    BlockTable table;
    int64_t rows = 0;
  };

  void check_group(int32_t group) const {
    if (group < 0 || group >= b_->builder.num_groups())
      raise_error("group " + std::to_string(group) + " is outside [0, " +
                  std::to_string(b_->builder.num_groups()) + ")");
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
    return {nb::borrow(obj), t, a.shape[0]};
  }

  /// Plans the step and builds every group: group `group` from its own table, the others
  /// from the tables they had the step before (prefetch) or this one. False (nothing done)
  /// for int64 counts with int64_counts.
  bool plan(int32_t group, const CallInputs& in, bool capture, bool int64_counts) {
    PreparedStep& p = prepared_;
    p.reset();  // its vectors' memory stays
    const LaunchStream launch = launch_stream(in.attr[kBlockTable]);
    // The inputs ordered before the launch stream.
    if (!prepare(p, *b_, in.args(nb::steal(PyLong_FromVoidPtr(launch.stream))), int64_counts))
      return false;
    const int32_t n = p.step.num_reqs;
    const GroupTable own = import(in.attr[kBlockTable], n, kTableName, p.stream);
    require_known(launch, in.attr[kBlockTable], kTableName);
    const auto G = static_cast<size_t>(b_->builder.num_groups());
    std::vector<GroupTable>& use = use_;
    use.assign(G, own);
    for (size_t h = 0; h < G; ++h) {
      const GroupTable& prev = tables_[h];
      // A table as tall and as wide as this step's own (the gathers it needs) only.
      if (prefetch_ && static_cast<int32_t>(h) != group && prev.object.is_valid() &&
          prev.rows >= n && prev.table.width >= own.table.width)
        use[h] = prev;
    }
    p.tables.clear();
    for (const GroupTable& t : use) p.tables.push_back(t.table);
    p.step.block_table = p.tables[0];
    const std::span<const Metadata> ms =
        capture ? b_->builder.build_groups_for_cudagraph_capture(p.step, p.tables, p.stream)
                : b_->builder.build_groups(p.step, p.tables, p.stream);
    ++plans_;
    capture_ = capture;
    seq_lens_ = p.step.seq_lens;
    accepted_ = p.step.num_accepted_tokens;
    qsl_ = p.step.query_start_loc;
    drafts_ =
        p.step.num_decode_draft_tokens.empty() ? nullptr : p.step.num_decode_draft_tokens.data();
    num_reqs_ = n;
    for (size_t h = 0; h < G; ++h) {
      metas_[h] = ms[h];
      tables_[h] = std::move(use[h]);
      served_[h] = static_cast<int32_t>(h) == group ? 1 : 0;
      results_[h] = nb::object();
    }
    p.reset();  // the caller's arrays are held by the call's inputs from here
    return true;
  }

  /// Group `group`'s state indices of the last step from `table`: the plan's own unless the
  /// table is in other memory than the launch read (then one re-gather).
  void regather(int32_t group, nb::handle table, const char* name) {
    const auto g = static_cast<size_t>(group);
    const LaunchStream launch = launch_stream(table);
    GroupTable t = import(table, num_reqs_, name, launch.stream);  // ordered before a re-gather
    require_known(launch, table, name);
    const Stream s = launch.stream;
    if (!(t.table == tables_[g].table)) {
      metas_[g] = b_->builder.update_block_table(metas_[g], t.table, group, s);
      ++regathers_;
    }
    tables_[g] = std::move(t);
  }

  /// Group `group`'s result: the metadata dataclass over `fields` (update_block_table takes
  /// only objects made so in the engine's last step).
  nb::object result(int32_t group, nb::dict fields) {
    results_[static_cast<size_t>(group)] = fields;
    return make_(fields);
  }

  /// Sets the fields of `out` from group `group`'s metadata: every one, or with `base` (the
  /// metadata `out`'s values were made from) those whose value differs from base's; `in`: the
  /// caller's objects to hand back where a field is one (views of the planning call's memory).
  nb::dict fill(int32_t group, nb::dict out, const CallInputs& in, const Metadata* base = nullptr) {
    const auto g = static_cast<size_t>(group);
    const Metadata& m = metas_[g];
    CallerArrays ca;
    ca.seq_lens = in.attr[kSeqLens];
    ca.accepted = in.accepted;
    ca.query_start_loc = in.attr[kQsl];
    ca.block_table = tables_[g].object;
    ca.seq_lens_data = seq_lens_;
    ca.accepted_data = accepted_;
    ca.query_start_loc_data = qsl_;
    ca.drafts = in.drafts;
    ca.drafts_data = drafts_;
    for (const Key& k : keys_) {
      if (base != nullptr && same_value(output_spec(k.id), m, *base)) continue;
      out[k.name] = value(output_spec(k.id), m, ca);
    }
    return out;
  }

  /// Whether row `spec` has the same Python value in `a` (this call's metadata) as in `b`
  /// (the last plan's, of this step or the step before): equal counts, flags and optional ints;
  /// arrays of the same memory, shape and dtype (the same view object: FieldExporter), unless in
  /// the caller's memory (each call gets its own objects back). Lists (vLLM makes a new one each
  /// call), tables and composites are made anew.
  [[nodiscard]] bool same_value(const OutputSpec& spec, const Metadata& a,
                                const Metadata& b) const {
    const FieldRef x = spec.field(const_cast<Metadata&>(a));
    const FieldRef y = spec.field(const_cast<Metadata&>(b));
    if (!x || !y) return !x && !y;
    switch (x.type) {
      case FieldType::Count:
        return x.count() == y.count();
      case FieldType::OptionalInt:
        return x.optional_int() == y.optional_int();
      case FieldType::Flag:
        return x.flag() == y.flag();
      case FieldType::Array: {
        const void* d = x.array().data;
        return spec.shape != Shape::List && x.array() == y.array() &&
               (d == nullptr || (d != accepted_ && d != drafts_ && d != seq_lens_ && d != qsl_));
      }
      default:
        return false;
    }
  }

  /// Row `spec`'s value in `m`: a composite configured as a dataclass made from its
  /// fields' rows (a field linmeta has no row for is None), any other row as the exporter
  /// makes it.
  nb::object value(const OutputSpec& spec, const Metadata& m, const CallerArrays& ca) {
    const CompositeClass* c = composites_[static_cast<size_t>(spec.id)].get();
    if (c == nullptr) return exporter_.value(spec, m, ca);
    const FieldRef r = spec.field(const_cast<Metadata&>(m));
    if (!r || !r.present()) return nb::none();
    nb::dict fields;
    for (const auto& [name, row] : c->fields)
      fields[name] = row != nullptr ? value(*row, m, ca) : nb::none();
    return c->make(fields);
  }

  static bool is_composite_row(const OutputSpec& row) {
    Metadata probe;
    const FieldRef r = row.field(probe);
    return r.type == FieldType::Composite;
  }

  PyBuilder* b_;
  FieldExporter exporter_;  ///< holds the builder
  Maker make_;              ///< the metadata dataclass
  nb::dict defaults_;
  /// A composite vLLM returns as a dataclass: the class and each field's row (null: none).
  struct CompositeClass {
    Maker make;
    std::vector<std::pair<nb::str, const OutputSpec*>> fields;
  };
  /// By the composite's row (nested ones too); null: returned as a dict.
  std::array<std::unique_ptr<CompositeClass>, kNumOutputs> composites_;
  bool prefetch_;
  std::array<nb::str, kAttrs> names_;
  std::vector<Key> keys_;

  /// The planning call's inputs (calls_[last_]; -1: none yet) and a later call's.
  std::array<CallInputs, 2> calls_;
  int32_t last_ = -1;
  [[nodiscard]] const CallInputs& last() const { return calls_[static_cast<size_t>(last_)]; }
  PreparedStep prepared_;        ///< a plan's imports (emptied after it)
  std::vector<GroupTable> use_;  ///< a plan's tables
  bool capture_ = false;
  const int32_t* seq_lens_ = nullptr;  ///< the planning call's caller arrays
  const int32_t* accepted_ = nullptr;
  const int32_t* qsl_ = nullptr;
  const int32_t* drafts_ = nullptr;
  int32_t num_reqs_ = 0;
  std::vector<GroupTable> tables_;
  std::vector<char> served_;
  std::vector<nb::object> results_;  ///< each group's last result dict
  nb::dict planned_;                 ///< the last planning call's result (its fields)
  Metadata planned_meta_;            ///< the metadata it was made from (when valid)
  bool planned_valid_ = false;
  std::vector<Metadata> metas_;
  int64_t plans_ = 0, served_count_ = 0, regathers_ = 0;
};

}  // namespace

void bind_vllm(nb::module_& m) {
  nb::module_ sub = m.def_submodule("vllm", "The native half of linmeta.vllm.");
  nb::class_<Engine>(sub, "Engine",
                     "One native builder serving the KV-cache groups of one configuration "
                     "(python/src/vllm/engine.hpp).")
      .def(nb::init<nb::object, nb::object, nb::dict, nb::dict, bool>(), "builder"_a, "cls"_a,
           "defaults"_a, "classes"_a, "prefetch_tables"_a)
      .def("build", &Engine::build, "group"_a, "m"_a, "num_accepted_tokens"_a.none(),
           "num_decode_draft_tokens_cpu"_a.none(), "capture"_a, "int64_counts"_a)
      .def("update_block_table", &Engine::update_block_table, "group"_a, "metadata"_a,
           "table"_a.none())
      .def_prop_ro("stats", &Engine::stats, "Plans, served calls, re-gathers and views made.");
}

}  // namespace linmeta::py

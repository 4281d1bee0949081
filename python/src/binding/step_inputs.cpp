#include "step_inputs.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace linmeta::py {

namespace {

/// `exact`: num_reqs is len(query_start_loc_cpu) - 1 (not given), which the message says.
void check_length(const ImportedArray& a, const char* name, int64_t need, bool exact,
                  const char* what) {
  if (exact ? a.shape[0] != need : a.shape[0] < need)
    raise_error(std::string(name) + " has " + std::to_string(a.shape[0]) + " entries, expected " +
                (exact ? "" : "at least ") + what + " = " + std::to_string(need) +
                (exact ? " (num_reqs = len(query_start_loc_cpu) - 1)" : ""));
}

/// A bool array's first `n` elements (host memory, contiguous) hold 0 or 1 each: another
/// byte (a uint8 array re-viewed as bool) is no bool a reader agrees on (C++ bool, torch
/// kernels and numpy may each read it differently).
void check_bool_bytes(const ImportedArray& a, const char* name, int32_t n) {
  const auto* bytes = static_cast<const unsigned char*>(a.data);
  for (int32_t i = 0; i < n; ++i)
    if (bytes[i] > 1)
      raise_error(std::string(name) + "[" + std::to_string(i) + "] holds the byte " +
                  std::to_string(bytes[i]) + ": a bool array holds 0 or 1 in each byte");
}

std::string py_type_name(nb::handle v) {
  return nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(v.ptr())))));
}

}  // namespace

CallGuard::CallGuard(PyBuilder& b, const char* what) : b_(b) {
  if (b.busy)
    raise_error(std::string(what) +
                " entered while another call of the same builder is running (from an input's "
                "Python code, such as __array_interface__ or __dlpack__, or from a second "
                "thread): a builder serves one call at a time");
  b.busy = true;
}

StepArgs make_step_args(nb::handle query_start_loc_cpu, nb::handle seq_lens,
                        nb::handle seq_lens_cpu_upper_bound, nb::handle num_actual_tokens,
                        nb::handle query_start_loc, nb::handle is_prefilling,
                        nb::handle num_decode_draft_tokens_cpu, nb::handle num_accepted_tokens,
                        nb::handle num_reqs, nb::handle stream) {
  StepArgs a;
  a.query_start_loc_cpu = query_start_loc_cpu;
  a.seq_lens = seq_lens;
  a.seq_lens_cpu_upper_bound = seq_lens_cpu_upper_bound;
  a.num_actual_tokens = num_actual_tokens;
  a.query_start_loc = query_start_loc;
  a.is_prefilling = is_prefilling;
  a.num_decode_draft_tokens_cpu = num_decode_draft_tokens_cpu;
  a.num_accepted_tokens = num_accepted_tokens;
  a.num_reqs = num_reqs;
  a.stream = stream;
  return a;
}

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

int32_t to_int32(nb::handle v, const char* name) {
  PyObject* i = v.ptr();
  nb::object index;
  if (!PyLong_Check(i)) {
    if (!PyIndex_Check(i))
      throw nb::type_error(
          ("linmeta: " + std::string(name) + " must be an int, got " + py_type_name(v)).c_str());
    // Anything else through __index__ (numpy integers, ...), not int(): int() would also take
    // one-element arrays.
    PyObject* r = PyNumber_Index(i);
    if (r == nullptr) {
      nb::python_error e;
      nb::raise_from(e, PyExc_TypeError, "linmeta: %s must be an int, got %s", name,
                     py_type_name(v).c_str());
    }
    index = nb::steal(r);
    i = r;
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i, &overflow);
  if (overflow != 0 || x < std::numeric_limits<int32_t>::min() ||
      x > std::numeric_limits<int32_t>::max())
    raise_error(std::string(name) + " = " + nb::cast<std::string>(nb::str(i)) +
                " does not fit in int32");
  return static_cast<int32_t>(x);
}

bool to_bool(nb::handle v, const char* name) {
  if (v.ptr() == Py_True) return true;
  if (v.ptr() == Py_False) return false;
  // numpy's bool scalars.
  const char* type = Py_TYPE(v.ptr())->tp_name;
  if (std::strcmp(type, "numpy.bool_") == 0 || std::strcmp(type, "numpy.bool") == 0) {
    const int b = PyObject_IsTrue(v.ptr());
    if (b < 0) throw nb::python_error();
    return b != 0;
  }
  throw nb::type_error(
      ("linmeta: " + std::string(name) + " must be a bool, got " + py_type_name(v)).c_str());
}

std::string to_string(nb::handle v, const char* name) {
  if (!PyUnicode_Check(v.ptr()))
    throw nb::type_error(
        ("linmeta: " + std::string(name) + " must be a str, got " + py_type_name(v)).c_str());
  Py_ssize_t len = 0;
  const char* c = PyUnicode_AsUTF8AndSize(v.ptr(), &len);
  if (c == nullptr) {  // lone surrogates
    nb::python_error e;
    nb::raise_from(e, PyExc_ValueError, "linmeta: %s is not valid UTF-8 text", name);
  }
  return {c, static_cast<size_t>(len)};
}

BlockTable import_table(ImportedArray& a, nb::handle obj, const char* name, int32_t num_reqs,
                        const TargetMemory& mem, Stream consumer) {
  if (!obj.is_valid() || obj.is_none()) raise_error(std::string(name) + " is required");
  import_array_into(a, obj, name, consumer);
  require(a, name, {.device = true, .boolean = false, .ndim = 2}, mem);
  if (a.shape[0] < num_reqs)
    raise_error(std::string(name) + " has " + std::to_string(a.shape[0]) +
                " rows, the step has num_reqs = " + std::to_string(num_reqs));
  if (a.shape[1] > std::numeric_limits<int32_t>::max())
    raise_error(std::string(name) + " is too wide (" + std::to_string(a.shape[1]) + " columns)");
  if (a.shape[1] < 1) raise_error(std::string(name) + " has no columns (width 0)");
  BlockTable t;
  t.data = static_cast<const int32_t*>(a.data);
  t.width = static_cast<int32_t>(a.shape[1]);
  t.row_stride = a.shape[0] > 1 ? a.strides[0] : std::max<int64_t>(a.strides[0], a.shape[1]);
  return t;
}

BlockTable import_table(PreparedStep& p, nb::handle obj, const char* name, int32_t num_reqs,
                        const TargetMemory& mem) {
  const BlockTable t = import_table(p.arrays.emplace_back(), obj, name, num_reqs, mem, p.stream);
  p.table_objects.push_back(nb::borrow(obj));
  return t;
}

void prepare(PreparedStep& p, const PyBuilder& b, const StepArgs& a) {
  const TargetMemory mem = b.memory();
  p.arrays.reserve(p.arrays.size() + 8);  // this step's arrays: one allocation
  p.stream = mem.target == Target::Cuda ? parse_stream(a.stream) : nullptr;
  if (mem.target == Target::Host) (void)parse_stream(a.stream);  // still type-check it
  Step& s = p.step;

  auto imp = [&](nb::handle obj, const char* name, Requirement req,
                 bool required) -> ImportedArray* {
    if (!obj.is_valid() || obj.is_none()) {
      if (required) raise_error(std::string(name) + " is required");
      return nullptr;
    }
    ImportedArray& arr = p.arrays.emplace_back();  // kept alive by `p` (read in place)
    import_array_into(arr, obj, name, p.stream);
    require(arr, name, req, mem);
    return &arr;
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
    check_bool_bytes(*ip, "is_prefilling", n);
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

}  // namespace linmeta::py

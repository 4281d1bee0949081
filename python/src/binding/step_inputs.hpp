// The inputs of one step from Python: the builder object, the step's arguments and their
// import (no copies) into a linmeta::Step, shared by the builder methods (module.cpp) and the
// vLLM engine (../vllm/engine.cpp).
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <vector>

#include "arrays.hpp"
#include "linmeta/linmeta.hpp"

namespace linmeta::py {

namespace nb = nanobind;

struct PyBuilder {
  PyBuilder(BuilderKind kind, const Config& config, const BuilderOptions& options, int32_t device,
            ArrayType type)
      : builder(kind, config, options), device_id(device), array_type(type) {}

  MetadataBuilder builder;
  int32_t device_id;  ///< cuda target: the device holding the buffers
  ArrayType array_type;
  bool busy = false;  ///< a call is running (CallGuard); read and written with the GIL held

  [[nodiscard]] TargetMemory memory() const { return {builder.target(), device_id}; }
};

/// Marks a builder busy for one call. A call that enters while another call of the same
/// builder is running — re-entered from Python code the first runs (an input's
/// __array_interface__, __dlpack__ or attribute), or from a second thread while the first
/// waits for the GIL in such code — raises linmeta.Error and changes nothing: a builder
/// serves one call at a time (its step inputs, buffers and returned views are one step's).
class CallGuard {
 public:
  CallGuard(PyBuilder& b, const char* what);
  ~CallGuard() { b_.busy = false; }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  PyBuilder& b_;
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
  std::vector<ImportedArray> arrays;  // an element's address is used before the next import
  std::vector<BlockTable> tables;
  std::vector<nb::object> table_objects;
  Stream stream = nullptr;

  void reset() {
    step = Step{};
    arrays.clear();
    tables.clear();
    table_objects.clear();
    stream = nullptr;
  }
};

/// The step's arguments in the order of every binding's keyword list.
StepArgs make_step_args(nb::handle query_start_loc_cpu, nb::handle seq_lens,
                        nb::handle seq_lens_cpu_upper_bound, nb::handle num_actual_tokens,
                        nb::handle query_start_loc, nb::handle is_prefilling,
                        nb::handle num_decode_draft_tokens_cpu, nb::handle num_accepted_tokens,
                        nb::handle num_reqs, nb::handle stream);

/// `stream`: None, an int cudaStream_t handle (0 = legacy default stream) or an
/// object with a `cuda_stream` attribute (torch.cuda.Stream).
Stream parse_stream(nb::handle s);

/// A Python int as int32 (TypeError for non-ints, linmeta.Error when out of range).
int32_t to_int32(nb::handle v, const char* name);

/// A Python bool (or numpy.bool_) as bool (TypeError naming `name` for anything else).
bool to_bool(nb::handle v, const char* name);

/// A Python str as std::string (TypeError naming `name` for anything else).
std::string to_string(nb::handle v, const char* name);

/// Imports block table `obj` (device memory, 2-D int32, at least num_reqs rows) into `a`, an
/// ImportedArray as default-constructed (which then keeps it alive); `consumer` as for
/// import_array.
BlockTable import_table(ImportedArray& a, nb::handle obj, const char* name, int32_t num_reqs,
                        const TargetMemory& mem, Stream consumer);
/// import_table into `p` (a new entry of its arrays, on its stream).
BlockTable import_table(PreparedStep& p, nb::handle obj, const char* name, int32_t num_reqs,
                        const TargetMemory& mem);

/// Imports and checks every step input (no copies; nothing is written).
void prepare(PreparedStep& p, const PyBuilder& b, const StepArgs& a);

}  // namespace linmeta::py

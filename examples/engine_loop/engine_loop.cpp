// An engine's decode loop with FULL CUDA graphs, as vLLM runs it:
//   1. once: build_for_cudagraph_capture(), then capture the "model" (here: copies of three
//      metadata arrays into buffers of our own) into a CUDA graph that reads the builder's
//      persistent FULL-graph buffers;
//   2. every step: write the step's inputs into the engine's persistent device inputs,
//      build() (eager, one launch, no sync), replay the graph.
// The graph was captured once, yet every replay sees that step's metadata, because build()
// writes the same addresses every step. Each step is checked against the host target.
//
//   engine_loop [--require-gpu]   (without a CUDA device: host target only, GPU part skipped;
//                                  with --require-gpu that is an error)
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <linmeta/linmeta.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int32_t kRows = 4, kSpec = 3, kWidth = 16, kSteps = 6;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// The int32 contents of an output array in host memory (host target).
std::vector<int32_t> host_ints(const linmeta::Array& a) {
  const int32_t* p = a.as<int32_t>();
  return std::vector<int32_t>(p, p + a.rows * a.cols);
}

/// The host arrays of step `i`: kRows spec decodes with k drafts; odd steps pad the last row.
struct StepInputs {
  std::vector<int32_t> qsl{0}, seq_lens, drafts, accepted, table;
  int32_t tokens = 0;

  explicit StepInputs(int32_t i) {
    for (int32_t r = 0; r < kRows; ++r) {
      const bool pad = i % 2 == 1 && r == kRows - 1;
      qsl.push_back(qsl.back() + (pad ? 0 : kSpec + 1));
      seq_lens.push_back(pad ? 0 : 40 + 17 * r + 9 * i);
      drafts.push_back(pad ? -1 : kSpec);
      accepted.push_back(pad ? 1 : 1 + (r + i) % (kSpec + 1));
      for (int32_t c = 0; c < kWidth; ++c) table.push_back(1000 * (i + 1) + 100 * r + c);
    }
    tokens = qsl.back();
  }
  /// The step over `qsl`, `seq_lens`, ... at the given "device" addresses.
  linmeta::Step step(const int32_t* d_qsl, const int32_t* d_seq, const int32_t* d_acc,
                     const int32_t* d_table) const {
    linmeta::Step s;
    s.num_reqs = kRows;
    s.num_actual_tokens = tokens;
    s.query_start_loc_cpu = qsl;
    s.seq_lens_cpu_upper_bound = seq_lens;
    s.num_decode_draft_tokens = drafts;
    s.query_start_loc = d_qsl;
    s.seq_lens = d_seq;
    s.num_accepted_tokens = d_acc;
    s.block_table = {d_table, kWidth, kWidth};
    return s;
  }
};

linmeta::Config config() {
  linmeta::Config cfg;
  cfg.num_spec = kSpec;
  cfg.max_num_seqs = kRows;
  cfg.max_num_batched_tokens = kRows * (kSpec + 1);
  cfg.full_cuda_graph = true;
  cfg.mamba_cache_mode = linmeta::CacheMode::Align;
  cfg.block_size = 16;
  cfg.num_speculative_blocks = kSpec;
  return cfg;
}

/// The expected arrays of step `i`, from the host target.
std::vector<std::vector<int32_t>> expected(linmeta::GdnMetadataBuilder& host, int32_t i) {
  const StepInputs in(i);
  const auto& md =
      host.build(in.step(in.qsl.data(), in.seq_lens.data(), in.accepted.data(), in.table.data()));
  return {host_ints(md.spec_state_indices_tensor), host_ints(md.spec_query_start_loc),
          host_ints(md.num_accepted_tokens)};
}

/// A device buffer of n int32.
int32_t* device_ints(size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, n * sizeof(int32_t)), "cudaMalloc");
  return static_cast<int32_t*>(p);
}

int gpu_loop(linmeta::GdnMetadataBuilder& host) {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  // The engine's persistent inputs (vLLM's input batch), written before every step.
  int32_t* d_qsl = device_ints(kRows + 1);
  int32_t* d_seq = device_ints(kRows);
  int32_t* d_acc = device_ints(kRows);
  int32_t* d_table = device_ints(kRows * kWidth);
  auto upload = [&](const StepInputs& in) {
    check(cudaMemcpyAsync(d_qsl, in.qsl.data(), in.qsl.size() * 4, cudaMemcpyHostToDevice, stream),
          "copy");
    check(cudaMemcpyAsync(d_seq, in.seq_lens.data(), in.seq_lens.size() * 4, cudaMemcpyHostToDevice,
                          stream),
          "copy");
    check(cudaMemcpyAsync(d_acc, in.accepted.data(), in.accepted.size() * 4, cudaMemcpyHostToDevice,
                          stream),
          "copy");
    check(cudaMemcpyAsync(d_table, in.table.data(), in.table.size() * 4, cudaMemcpyHostToDevice,
                          stream),
          "copy");
  };
  linmeta::GdnMetadataBuilder builder(config(), {.target = linmeta::Target::Cuda});

  // 1. Capture: dummy metadata for the largest batch, then the "model" reading it.
  const StepInputs first(0);
  upload(first);
  const auto& cap =
      builder.build_for_cudagraph_capture(first.step(d_qsl, d_seq, d_acc, d_table), stream);
  const linmeta::Metadata captured = cap;  // the addresses the graph will read
  const size_t sizes[3] = {static_cast<size_t>(kRows * (kSpec + 1)), kRows + 1, kRows};
  int32_t* seen[3] = {device_ints(sizes[0]), device_ints(sizes[1]), device_ints(sizes[2])};
  const void* sources[3] = {captured.spec_state_indices_tensor.data,
                            captured.spec_query_start_loc.data, captured.num_accepted_tokens.data};
  check(cudaStreamSynchronize(stream), "sync");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  for (int a = 0; a < 3; ++a)
    check(cudaMemcpyAsync(seen[a], sources[a], sizes[a] * 4, cudaMemcpyDeviceToDevice, stream),
          "copy");
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

  // 2. The loop: inputs, eager build, replay.
  int failures = 0;
  for (int32_t i = 0; i < kSteps; ++i) {
    const StepInputs in(i);
    upload(in);
    const auto& md = builder.build(in.step(d_qsl, d_seq, d_acc, d_table), stream);
    if (md.spec_state_indices_tensor.data != captured.spec_state_indices_tensor.data) {
      std::printf("step %d: spec_state_indices_tensor moved: a FULL-graph buffer must not\n", i);
      ++failures;
    }
    check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaStreamSynchronize(stream), "sync");
    const auto want = expected(host, i);
    bool same = true;
    for (int a = 0; a < 3; ++a) {
      std::vector<int32_t> got(sizes[a]);
      check(cudaMemcpy(got.data(), seen[a], sizes[a] * 4, cudaMemcpyDeviceToHost), "copy back");
      same = same && got == want[static_cast<size_t>(a)];
    }
    std::printf("step %d: %d spec rows, graph replay read this step's metadata: %s\n", i,
                md.num_spec_decodes, same ? "ok" : "WRONG");
    failures += same ? 0 : 1;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (void* p : {static_cast<void*>(d_qsl), static_cast<void*>(d_seq), static_cast<void*>(d_acc),
                  static_cast<void*>(d_table), static_cast<void*>(seen[0]),
                  static_cast<void*>(seen[1]), static_cast<void*>(seen[2])})
    cudaFree(p);
  cudaStreamDestroy(stream);
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const bool require_gpu = argc > 1 && std::strcmp(argv[1], "--require-gpu") == 0;
  try {
    linmeta::GdnMetadataBuilder host(config(), {.target = linmeta::Target::Host});
    for (int32_t i = 0; i < kSteps; ++i)
      std::printf("host step %d: spec_state_indices_tensor row 0 starts at %d\n", i,
                  expected(host, i)[0][0]);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("no CUDA device: GPU part skipped\n");
      return require_gpu ? 1 : 0;
    }
    const int failures = gpu_loop(host);
    std::printf("engine loop: %d steps, %s\n", kSteps, failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_loop: %s\n", e.what());
    return 1;
  }
}

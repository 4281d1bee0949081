#include <atomic>
#include <chrono>

#include "bench.hpp"

namespace linmeta::bench {

namespace {

static_assert(GatherArgs::kMaxGroups == kMaxNumGroups);

/// A graph captured from what `enqueue` issues on `stream` (global mode), instantiated.
struct Graph {
  template <class F>
  Graph(cudaStream_t stream, F&& enqueue) {
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "BeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  /// Kernel, memcpy and other nodes.
  [[nodiscard]] json nodes() const {
    size_t n = 0;
    cuda_check(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
    std::vector<cudaGraphNode_t> all(n);
    cuda_check(cudaGraphGetNodes(graph, all.data(), &n), "cudaGraphGetNodes");
    int32_t count[3] = {};
    for (cudaGraphNode_t node : all) {
      cudaGraphNodeType t{};
      cuda_check(cudaGraphNodeGetType(node, &t), "cudaGraphNodeGetType");
      ++count[t == cudaGraphNodeTypeKernel ? 0 : t == cudaGraphNodeTypeMemcpy ? 1 : 2];
    }
    return {{"kernels", count[0]}, {"memcpys", count[1]}, {"others", count[2]}};
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

using DevicePtr = std::unique_ptr<void, decltype(&cudaFree)>;

/// A device copy of `v` (cuda target; else `v` itself), kept alive by `owned`.
int32_t* upload(bool cuda, const std::vector<int32_t>& v, std::vector<DevicePtr>& owned) {
  if (!cuda) return const_cast<int32_t*>(v.data());
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * sizeof(int32_t)), "cudaMalloc");
  owned.emplace_back(p, &cudaFree);
  cuda_check(cudaMemcpy(p, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
             "cudaMemcpy");
  return static_cast<int32_t*>(p);
}

/// The step over its device arrays.
struct DeviceStep {
  DeviceStep(const testing::RandomStep& d, bool cuda) {
    for (const auto& t : d.tables)
      tables.push_back({upload(cuda, t, owned), d.width, d.row_stride});
    seq_lens = upload(cuda, d.seq_lens, owned);
    accepted = upload(cuda, d.accepted, owned);
    step = d.step(upload(cuda, d.qsl, owned), seq_lens, accepted, tables[0].data);
    // cudaMemcpy from pageable memory may return before its DMA lands; the builds run
    // on a non-blocking stream.
    if (cuda) cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  std::vector<DevicePtr> owned;
  std::vector<BlockTable> tables;
  int32_t *seq_lens = nullptr, *accepted = nullptr;
  Step step;
};

/// One build of the workload's step (all groups; the capture flavour for capture steps).
const Metadata& build_once(MetadataBuilder& b, const testing::RandomStep& d, const DeviceStep& s,
                           cudaStream_t stream) {
  if (b.num_groups() == 1)
    return d.capture ? b.build_for_cudagraph_capture(s.step, stream) : b.build(s.step, stream);
  return (d.capture ? b.build_groups_for_cudagraph_capture(s.step, s.tables, stream)
                    : b.build_groups(s.step, s.tables, stream))[0];
}

}  // namespace

Bench::Bench(const Settings& settings, bool cuda) : s_(settings), cuda_(cuda) {
  if (!cuda_) return;
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaEventCreate(&start_), "cudaEventCreate");
  cuda_check(cudaEventCreate(&stop_), "cudaEventCreate");
  cuda_check(
      cudaHostAlloc(reinterpret_cast<void**>(&gate_), 2 * sizeof(int32_t), cudaHostAllocMapped),
      "cudaHostAlloc");
  gate_[0] = gate_[1] = 0;
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&gate_dev_), gate_, 0),
             "cudaHostGetDevicePointer");
  int sms = 1;
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  launch_spin(stream_, nullptr, nullptr, 300'000'000, 2 * sms);  // lets the clocks ramp up
  sync();
}

Bench::~Bench() {
  if (!cuda_) return;
  cudaStreamSynchronize(stream_);
  cudaFreeHost(gate_);
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
  cudaStreamDestroy(stream_);
}

void Bench::sync() { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

/// Device microseconds per `enqueue()` over batches of `batch` calls. The stream gate holds
/// the stream while the host enqueues a batch, so the events time device work alone: a spin
/// kernel on gate_[0] (open flag; it gives up after 1 s and sets gate_[1]).
template <class F>
Summary Bench::device_time_us(int32_t batch, int32_t batches, F&& enqueue) {
  auto* flags = static_cast<volatile int32_t*>(gate_);
  auto release = [&] {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    flags[0] = 1;
  };
  return sample(batches, s_.min_time_s, [&] {
    flags[0] = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    launch_spin(stream_, gate_dev_, gate_dev_ + 1, 1'000'000'000, 1);
    try {
      cuda_check(cudaEventRecord(start_, stream_), "cudaEventRecord");
      for (int32_t i = 0; i < batch; ++i) enqueue();
      cuda_check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    } catch (...) {
      release();
      throw;
    }
    release();
    sync();
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    timed_out_ = timed_out_ || flags[1] != 0;
    flags[1] = 0;
    return 1000.0 * static_cast<double>(ms) / batch;
  });
}

/// Host microseconds per `enqueue()`, after warm-up calls; on the cuda target the stream is
/// drained (untimed) every staging_slots calls, so no timed call waits for a staging slot.
template <class F, class G>
Summary Bench::host_time_us(F&& enqueue, G&& after_timed_call) {
  int64_t calls = 0;
  auto drain = [&] {
    if (cuda_ && calls++ % s_.staging_slots == 0) sync();
  };
  for (int32_t i = 0; i < s_.warmup; ++i, drain()) enqueue();
  const Summary t = sample(s_.host_reps, s_.min_time_s, [&] {
    drain();
    const auto t0 = std::chrono::steady_clock::now();
    enqueue();
    const auto t1 = std::chrono::steady_clock::now();
    after_timed_call();
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  });
  if (cuda_) sync();
  return t;
}

/// Device time of `enqueue()`'s work, {eager: gated batches, graph: captured once, replayed};
/// the graph's nodes go to `nodes` when given.
template <class F>
json Bench::device_figures(F&& enqueue, json* nodes) {
  for (int32_t i = 0; i < 8; ++i) enqueue();
  sync();
  const json eager = device_time_us(s_.eager_batch, s_.eager_batches, enqueue);
  const Graph g(stream_, enqueue);
  if (nodes != nullptr) *nodes = g.nodes();
  auto replay = [&] { cuda_check(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch"); };
  for (int32_t i = 0; i < 8; ++i) replay();
  sync();
  return {{"eager", eager}, {"graph", device_time_us(s_.graph_batch, s_.graph_batches, replay)}};
}

Result Bench::run(const Workload& w) {
  Result r{&w, "", json::object()};
  const testing::RandomStep& d = w.step;
  // A builder of the step; staging slots for a whole gated batch, so no build waits for one.
  auto builder = [&](int32_t staging_slots, bool pdl = false) {
    return MetadataBuilder(d.kind, d.config,
                           {.target = cuda_ ? Target::Cuda : Target::Host,
                            .num_groups = w.groups(),
                            .staging_slots = staging_slots,
                            .capture_slots = s_.capture_slots,
                            .programmatic_dependent_launch = pdl});
  };
  try {
    const DeviceStep s(d, cuda_);
    MetadataBuilder b = builder(s_.staging_slots);
    r.figures["metadata"] = static_cast<const StepCounts&>(build_once(b, d, s, stream_));
    // Host time, split into the phases of last_timing().
    std::vector<double> plan, pack, enqueue;
    auto phases = [&, &t = b.last_timing()] {
      plan.push_back(static_cast<double>(t.plan_ns) / 1e3);
      pack.push_back(static_cast<double>(t.pack_ns) / 1e3);
      enqueue.push_back(static_cast<double>(t.enqueue_ns) / 1e3);
    };
    const Summary total = host_time_us([&] { build_once(b, d, s, stream_); }, phases);
    r.figures["host_us"] = {{"total", total},
                            {"plan", summarize(plan)},
                            {"pack", summarize(pack)},
                            {"enqueue", summarize(enqueue)}};
    r.figures.update({{"upload_bytes", b.last_upload_bytes()},
                      {"pinned_bytes", b.pinned_bytes()},
                      {"buffer_bytes", b.buffer_bytes()},
                      {"param_bytes", cuda_ ? json(b.last_launch_param_bytes()) : json()},
                      {"gpu_us", nullptr},
                      {"graph_nodes", nullptr}});
    if (!cuda_) return r;
    timed_out_ = false;
    json& g = r.figures["gpu_us"];
    MetadataBuilder e = builder(s_.eager_batch + 1);
    g = device_figures([&] { build_once(e, d, s, stream_); }, &r.figures["graph_nodes"]);

    // The gather floor: the step's rows and tables, the state slots of a row.
    GatherArgs ga{.seq_lens = s.seq_lens,
                  .row_stride = d.row_stride,
                  .rows = d.num_reqs,
                  .slots = 1 + d.config.num_speculative_blocks,
                  .groups = w.groups(),
                  .width = d.width,
                  .block_size = d.config.block_size};
    for (size_t t = 0; t < s.tables.size(); ++t) ga.tables[t] = s.tables[t].data;
    std::vector<DevicePtr> owned;
    const std::vector<int32_t> zeros(static_cast<size_t>(ga.rows) * ga.slots * ga.groups);
    ga.out = upload(true, zeros, owned);
    g["gather"] = device_figures([&] { launch_gather(stream_, ga); });
    if (launch_floor.is_null()) {
      auto launch = [&] { launch_empty_kernel(stream_); };
      launch_floor = device_figures(launch);
      launch_floor["host"] = host_time_us(launch, [] {});
    }

    // End to end behind a producer kernel that writes the build's device inputs, without and
    // with PDL (the build's launch overlaps the producer's tail; its reads wait for it).
    const int32_t *seq_lens = upload(true, d.seq_lens, owned),
                  *accepted = upload(true, d.accepted, owned);
    for (const bool pdl : {false, true}) {
      MetadataBuilder p = builder(s_.eager_batch + 1, pdl);
      g[pdl ? "producer_pdl" : "producer"] = device_figures([&] {
        launch_step_producer(stream_, seq_lens, s.seq_lens, accepted, s.accepted, d.num_reqs,
                             static_cast<int32_t>(d.accepted.size()));
        build_once(p, d, s, stream_);
      });
    }
    g["gate_timed_out"] = timed_out_;
  } catch (const std::exception& e) {
    r.error = e.what();  // a capture that threw has ended (Graph)
    if (cuda_) cudaStreamSynchronize(stream_);
  }
  return r;
}

}  // namespace linmeta::bench

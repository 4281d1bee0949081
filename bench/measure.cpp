#include <algorithm>
#include <chrono>
#include <span>
#include <utility>
#include <vector>

#include "bench.hpp"

namespace linmeta::bench {

namespace {

using Clock = std::chrono::steady_clock;

using DevicePtr = std::unique_ptr<void, decltype(&cudaFree)>;

/// A device copy of `v` (on the cuda target; else `v` itself), kept alive by `owned`.
int32_t* upload(bool cuda, const std::vector<int32_t>& v, std::vector<DevicePtr>& owned) {
  if (!cuda) return const_cast<int32_t*>(v.data());
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * sizeof(int32_t)), "cudaMalloc");
  owned.emplace_back(p, &cudaFree);
  cuda_check(cudaMemcpy(p, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
             "cudaMemcpy");
  return static_cast<int32_t*>(p);
}

/// A captured graph and its executable, destroyed together.
class Graph {
 public:
  /// Captures what `enqueue` issues on `stream` (global capture mode).
  template <class F>
  Graph(cudaStream_t stream, F&& enqueue) {
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal),
               "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph_);
      if (graph_ != nullptr) cudaGraphDestroy(graph_);
      throw;
    }
    cuda_check(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    cuda_check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  void launch(cudaStream_t stream) const {
    cuda_check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
  }
  [[nodiscard]] cudaGraph_t graph() const { return graph_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// One build of the workload's step (all groups; the capture flavour for capture steps).
const Metadata& build_once(MetadataBuilder& b, const Step& step, std::span<const BlockTable> tables,
                           bool capture, cudaStream_t stream) {
  if (b.num_groups() == 1)
    return capture ? b.build_for_cudagraph_capture(step, stream) : b.build(step, stream);
  return (capture ? b.build_groups_for_cudagraph_capture(step, tables, stream)
                  : b.build_groups(step, tables, stream))[0];
}

}  // namespace

Bench::Bench(const Settings& settings, bool cuda) : s_(settings), cuda_(cuda) {
  if (!cuda_) return;
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaEventCreate(&start_), "cudaEventCreate");
  cuda_check(cudaEventCreate(&stop_), "cudaEventCreate");
  gate_ = std::make_unique<StreamGate>();
  busy_device(stream_, 300);
}

Bench::~Bench() {
  if (!cuda_) return;
  cudaStreamSynchronize(stream_);
  gate_.reset();
  cudaFreeHost(floor_src_);
  cudaFree(floor_dst_);
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
  cudaStreamDestroy(stream_);
}

void Bench::sync() { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

/// Device microseconds per `enqueue()` over batches of `batch` calls. Gated: the stream is
/// held while the host enqueues, so the events time device work alone.
template <class F>
Summary Bench::device_time_us(int32_t batch, int32_t batches, bool gated, F&& enqueue) {
  return summarize(sample(batches, s_.min_time_s, [&] {
    if (gated) gate_->hold(stream_);
    try {
      cuda_check(cudaEventRecord(start_, stream_), "cudaEventRecord");
      for (int32_t i = 0; i < batch; ++i) enqueue();
      cuda_check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    } catch (...) {
      if (gated) gate_->release();
      throw;
    }
    if (gated) gate_->release();
    sync();
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    if (gate_->take_timeout()) timed_out_ = true;
    return 1000.0 * static_cast<double>(ms) / batch;
  }));
}

/// Host microseconds per `enqueue()`, after warm-up calls; on the cuda target the stream is
/// drained (untimed) every staging_slots calls, so no timed call waits for a staging slot.
template <class F, class G>
Summary Bench::host_time_us(F&& enqueue, G&& after_timed_call) {
  int64_t calls = 0;
  auto drain = [&] {
    if (cuda_ && calls++ % s_.staging_slots == 0) sync();
  };
  for (int32_t i = 0; i < s_.warmup; ++i) {
    drain();
    enqueue();
  }
  auto t = sample(s_.host_reps, s_.min_time_s, [&] {
    drain();
    const auto t0 = Clock::now();
    enqueue();
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    after_timed_call();
    return us;
  });
  if (cuda_) sync();
  return summarize(std::move(t));
}

template <class F>
void Bench::eager_and_graph_us(F&& enqueue, Summary& eager, Summary& graph) {
  for (int32_t i = 0; i < 8; ++i) enqueue();
  sync();
  eager = device_time_us(s_.eager_batch, s_.eager_batches, true, enqueue);
  const Graph g(stream_, enqueue);
  for (int32_t i = 0; i < 8; ++i) g.launch(stream_);
  sync();
  graph = device_time_us(s_.graph_batch, s_.graph_batches, true, [&] { g.launch(stream_); });
}

Floor Bench::floor(int64_t bytes) {
  if (const auto it = floors.find(bytes); it != floors.end()) return it->second;
  if (bytes > floor_capacity_) {
    cudaFreeHost(floor_src_);
    cudaFree(floor_dst_);
    floor_capacity_ = (bytes + (1 << 20) - 1) / (1 << 20) * (1 << 20);
    const auto cap = static_cast<size_t>(floor_capacity_);
    cuda_check(cudaHostAlloc(&floor_src_, cap, cudaHostAllocDefault), "cudaHostAlloc(floor)");
    cuda_check(cudaMalloc(&floor_dst_, cap), "cudaMalloc(floor)");
    std::fill_n(static_cast<char*>(floor_src_), cap, char{1});
  }
  auto copy = [&] {
    cuda_check(cudaMemcpyAsync(floor_dst_, floor_src_, static_cast<size_t>(bytes),
                               cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync(floor)");
  };
  auto copy_and_launch = [&] {
    copy();
    launch_empty_kernel(stream_);
  };
  auto nothing = [] {};
  Floor f;
  f.host = host_time_us(copy_and_launch, nothing);
  eager_and_graph_us(copy_and_launch, f.eager, f.graph);
  eager_and_graph_us(copy, f.copy_eager, f.copy_graph);
  if (!launch_floor) {
    Floor k;
    auto launch = [&] { launch_empty_kernel(stream_); };
    k.host = host_time_us(launch, nothing);
    eager_and_graph_us(launch, k.eager, k.graph);
    launch_floor = k;
  }
  return floors.emplace(bytes, f).first->second;
}

Result Bench::run(const Workload& w) {
  Result r;
  r.workload = &w;
  timed_out_ = false;
  const testing::RandomStep& d = w.step;
  try {
    std::vector<DevicePtr> owned;
    std::vector<BlockTable> tables;
    for (const auto& t : d.tables)
      tables.push_back({upload(cuda_, t, owned), d.width, d.row_stride});
    int32_t* seq_lens = upload(cuda_, d.seq_lens, owned);
    int32_t* accepted = upload(cuda_, d.accepted, owned);
    const Step step = d.step(upload(cuda_, d.qsl, owned), seq_lens, accepted, tables[0].data);
    const BuilderOptions options{.target = cuda_ ? Target::Cuda : Target::Host,
                                 .num_groups = w.groups(),
                                 .staging_slots = s_.staging_slots,
                                 .capture_slots = s_.capture_slots};
    MetadataBuilder b(d.kind, d.config, options);
    auto build_on = [&](MetadataBuilder& builder) {
      return [&] { build_once(builder, step, tables, d.capture, stream_); };
    };
    r.counts = build_once(b, step, tables, d.capture, stream_);

    // Host time, split into the phases of last_timing().
    std::vector<double> plan, pack, enqueue;
    r.total = host_time_us(build_on(b), [&] {
      const BuildTiming& t = b.last_timing();
      plan.push_back(static_cast<double>(t.plan_ns) / 1000.0);
      pack.push_back(static_cast<double>(t.pack_ns) / 1000.0);
      enqueue.push_back(static_cast<double>(t.enqueue_ns) / 1000.0);
    });
    r.plan = summarize(std::move(plan));
    r.pack = summarize(std::move(pack));
    r.enqueue = summarize(std::move(enqueue));
    r.upload_bytes = b.last_upload_bytes();
    r.pinned_bytes = b.pinned_bytes();
    r.buffer_bytes = b.buffer_bytes();
    r.param_bytes = b.last_launch_param_bytes();
    if (!cuda_) return r;

    GpuFigures g;
    // Eager, as issued: events around builds the host enqueues back to back.
    g.eager_ungated = device_time_us(s_.eager_batch, 5, false, build_on(b));
    {
      // Eager, gated: a builder whose staging ring holds a whole batch, so no build waits
      // for a slot while the gate holds the stream.
      BuilderOptions eo = options;
      eo.staging_slots = s_.eager_batch + 1;
      eo.capture_slots = 0;
      MetadataBuilder e(d.kind, d.config, eo);
      for (int32_t i = 0; i < 8; ++i) build_on(e)();
      sync();
      g.eager = device_time_us(s_.eager_batch, s_.eager_batches, true, build_on(e));
    }
    // One build captured into a graph (it keeps one of b's capture slots), replayed.
    const Graph graph(stream_, build_on(b));
    g.nodes = count_nodes(graph.graph());
    for (int32_t i = 0; i < 16; ++i) graph.launch(stream_);
    sync();
    g.graph =
        device_time_us(s_.graph_batch, s_.graph_batches, true, [&] { graph.launch(stream_); });
    g.floor = floor(r.upload_bytes);

    // End to end behind a producer kernel that writes the build's device inputs, without and
    // with PDL (the build's launch overlaps the producer's tail; its reads wait for it).
    const int32_t* src_seq_lens = upload(cuda_, d.seq_lens, owned);
    const int32_t* src_accepted = upload(cuda_, d.accepted, owned);
    for (const bool pdl : {false, true}) {
      BuilderOptions po = options;
      po.staging_slots = s_.eager_batch + 1;  // no build waits for a slot while gated
      po.programmatic_dependent_launch = pdl;
      MetadataBuilder pb(d.kind, d.config, po);
      auto produce_and_build = [&] {
        launch_step_producer(stream_, src_seq_lens, seq_lens, src_accepted, accepted,
                             static_cast<int32_t>(d.seq_lens.size()),
                             static_cast<int32_t>(d.accepted.size()));
        build_once(pb, step, tables, d.capture, stream_);
      };
      eager_and_graph_us(produce_and_build, pdl ? g.producer_eager_pdl : g.producer_eager,
                         pdl ? g.producer_graph_pdl : g.producer_graph);
    }
    g.gate_timed_out = timed_out_;
    r.gpu = g;
  } catch (const std::exception& e) {
    r.error = e.what();
    if (cuda_) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess &&
          status != cudaStreamCaptureStatusNone) {
        cudaGraph_t partial = nullptr;
        cudaStreamEndCapture(stream_, &partial);
        if (partial != nullptr) cudaGraphDestroy(partial);
      }
      cudaStreamSynchronize(stream_);
    }
  }
  return r;
}

}  // namespace linmeta::bench

#include "measure.hpp"

#include <algorithm>
#include <chrono>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace linmeta::bench {

namespace {

using Clock = std::chrono::steady_clock;

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

/// Device copies of a step's arrays, freed on destruction.
class DeviceArrays {
 public:
  DeviceArrays() = default;
  DeviceArrays(const DeviceArrays&) = delete;
  DeviceArrays& operator=(const DeviceArrays&) = delete;
  ~DeviceArrays() {
    for (void* p : ptrs_) cudaFree(p);
  }
  const int32_t* upload(const std::vector<int32_t>& v) {
    void* p = nullptr;
    cuda_ok(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * sizeof(int32_t)),
            "cudaMalloc(step input)");
    ptrs_.push_back(p);
    cuda_ok(cudaMemcpy(p, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
            "cudaMemcpy(step input)");
    return static_cast<const int32_t*>(p);
  }

 private:
  std::vector<void*> ptrs_;
};

/// A captured graph and its executable, destroyed together.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }

  /// Captures what `enqueue` issues on `stream` (global capture mode).
  template <class F>
  void capture(cudaStream_t stream, F&& enqueue) {
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);
      if (partial != nullptr) cudaGraphDestroy(partial);
      throw;
    }
    cuda_ok(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    cuda_ok(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  void launch(cudaStream_t stream) const {
    cuda_ok(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
  }
  [[nodiscard]] cudaGraph_t graph() const { return graph_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// Opens the gate when leaving scope (also when an enqueue throws).
class GateHold {
 public:
  GateHold(StreamGate* gate, cudaStream_t stream) : gate_(gate) {
    if (gate_ != nullptr) gate_->hold(stream);
  }
  GateHold(const GateHold&) = delete;
  GateHold& operator=(const GateHold&) = delete;
  ~GateHold() { open(); }
  void open() {
    if (gate_ != nullptr) gate_->release();
    gate_ = nullptr;
  }

 private:
  StreamGate* gate_;
};

const Metadata& build_once(MetadataBuilder& b, const Step& step, std::span<const BlockTable> tables,
                           cudaStream_t stream) {
  if (b.num_groups() == 1) return b.build(step, stream);
  return b.build_groups(step, tables, stream)[0];
}

}  // namespace

Bench::Bench(const Settings& settings, bool cuda) : s_(settings), cuda_(cuda) {
  if (!cuda_) return;
  cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_ok(cudaEventCreate(&start_), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop_), "cudaEventCreate");
  gate_ = std::make_unique<StreamGate>();
  busy_device(stream_, 300);
}

Bench::~Bench() {
  if (!cuda_) return;
  cudaStreamSynchronize(stream_);
  gate_.reset();
  if (floor_src_ != nullptr) cudaFreeHost(floor_src_);
  if (floor_dst_ != nullptr) cudaFree(floor_dst_);
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

template <class F>
Summary Bench::device_time_us(int32_t batch, int32_t batches, bool gated, F&& enqueue,
                              bool& timed_out) {
  std::vector<double> per_item;
  for (int32_t k = 0; k < batches; ++k) {
    GateHold hold(gated ? gate_.get() : nullptr, stream_);
    cuda_ok(cudaEventRecord(start_, stream_), "cudaEventRecord");
    for (int32_t i = 0; i < batch; ++i) enqueue();
    cuda_ok(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    hold.open();
    cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    per_item.push_back(1000.0 * static_cast<double>(elapsed_ms(start_, stop_)) / batch);
    if (gate_->timed_out()) {  // the gate gave up before the host finished: ungated from here
      timed_out = true;
      gated = false;
      gate_->reset_timeout();
    }
  }
  return summarize(std::move(per_item));
}

template <class F>
Summary Bench::host_time_us(F&& enqueue) {
  auto drain = [&](int32_t i) {
    if (cuda_ && i % s_.staging_slots == 0)
      cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  };
  for (int32_t i = 0; i < s_.warmup; ++i) {
    drain(i);
    enqueue();
  }
  std::vector<double> t;
  t.reserve(static_cast<size_t>(s_.host_reps));
  for (int32_t i = 0; i < s_.host_reps; ++i) {
    drain(i);
    const auto t0 = Clock::now();
    enqueue();
    t.push_back(us_between(t0, Clock::now()));
  }
  if (cuda_) cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return summarize(std::move(t));
}

template <class F>
std::pair<Summary, Summary> Bench::eager_and_graph_us(F&& enqueue, bool& timed_out) {
  for (int32_t i = 0; i < 8; ++i) enqueue();
  cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  const Summary eager = device_time_us(s_.eager_batch, s_.eager_batches, true, enqueue, timed_out);
  Graph g;
  g.capture(stream_, enqueue);
  for (int32_t i = 0; i < 8; ++i) g.launch(stream_);
  cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  const Summary graph = device_time_us(
      s_.graph_batch, s_.graph_batches, true, [&] { g.launch(stream_); }, timed_out);
  return {eager, graph};
}

Floor Bench::floor(int64_t bytes) {
  if (const auto it = floors_.find(bytes); it != floors_.end()) return it->second;
  if (bytes > floor_capacity_) {
    if (floor_src_ != nullptr) cudaFreeHost(floor_src_);
    if (floor_dst_ != nullptr) cudaFree(floor_dst_);
    floor_src_ = floor_dst_ = nullptr;
    floor_capacity_ = 0;
    const int64_t cap = (bytes + (1 << 20) - 1) / (1 << 20) * (1 << 20);
    cuda_ok(cudaHostAlloc(&floor_src_, static_cast<size_t>(cap), cudaHostAllocDefault),
            "cudaHostAlloc(floor)");
    cuda_ok(cudaMalloc(&floor_dst_, static_cast<size_t>(cap)), "cudaMalloc(floor)");
    std::fill_n(static_cast<char*>(floor_src_), cap, char{1});
    floor_capacity_ = cap;
  }
  auto copy = [&] {
    cuda_ok(cudaMemcpyAsync(floor_dst_, floor_src_, static_cast<size_t>(bytes),
                            cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync(floor)");
  };
  auto copy_and_launch = [&] {
    copy();
    launch_empty_kernel(stream_);
  };
  bool timed_out = false;
  Floor f;
  f.host_us = host_time_us(copy_and_launch);
  std::tie(f.eager_us, f.graph_us) = eager_and_graph_us(copy_and_launch, timed_out);
  std::tie(f.copy_eager_us, f.copy_graph_us) = eager_and_graph_us(copy, timed_out);
  if (!launch_floor_) {
    Floor k;
    auto launch = [&] { launch_empty_kernel(stream_); };
    k.host_us = host_time_us(launch);
    std::tie(k.eager_us, k.graph_us) = eager_and_graph_us(launch, timed_out);
    launch_floor_ = k;
  }
  floors_.emplace(bytes, f);
  return f;
}

Result Bench::run(const Workload& w) {
  Result r;
  r.workload = &w;
  try {
    const StepData d = make_step(w);
    r.rows = d.num_reqs;
    r.tokens = d.num_actual_tokens;
    DeviceArrays dev;
    std::vector<BlockTable> tables;
    Step step;
    if (cuda_) {
      const int32_t* qsl = dev.upload(d.qsl);
      const int32_t* seq_lens = dev.upload(d.seq_lens);
      const int32_t* accepted = dev.upload(d.accepted);
      for (const auto& t : d.tables) tables.push_back({dev.upload(t), d.width, d.width});
      step = d.step(qsl, seq_lens, accepted, tables[0].data);
    } else {
      for (const auto& t : d.tables) tables.push_back({t.data(), d.width, d.width});
      step = d.step(d.qsl.data(), d.seq_lens.data(), d.accepted.data(), tables[0].data);
    }

    const BuilderOptions options{.target = cuda_ ? Target::Cuda : Target::Host,
                                 .num_groups = w.groups,
                                 .staging_slots = s_.staging_slots,
                                 .capture_slots = s_.capture_slots};
    MetadataBuilder b(w.kind, w.config, options);
    {
      const Metadata& m = build_once(b, step, tables, stream_);
      r.num_decodes = m.num_decodes;
      r.num_decode_tokens = m.num_decode_tokens;
      r.num_spec_decodes = m.num_spec_decodes;
      r.num_spec_decode_tokens = m.num_spec_decode_tokens;
      r.num_prefills = m.num_prefills;
      r.num_prefill_tokens = m.num_prefill_tokens;
    }

    // Host time. On the cuda target the stream is drained once per ring of staging
    // slots (untimed), so no timed build waits for a staging slot: the figures are
    // the host's own cost, as when the device is busy with the model between steps.
    std::vector<double> plan, pack, enqueue;
    plan.reserve(static_cast<size_t>(s_.host_reps));
    pack.reserve(plan.capacity());
    enqueue.reserve(plan.capacity());
    int32_t calls = 0;
    r.total = host_time_us([&] {
      build_once(b, step, tables, stream_);
      if (calls++ < s_.warmup) return;  // host_time_us warms up first
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
    if (!cuda_) return r;

    GpuFigures g;
    bool timed_out = false;
    auto build_on = [this, &step, &tables](MetadataBuilder& builder) {
      return [this, &builder, &step, &tables] { build_once(builder, step, tables, stream_); };
    };
    // Eager, as issued: events around builds the host enqueues back to back.
    g.eager_ungated_us = device_time_us(s_.eager_batch, 5, false, build_on(b), timed_out);
    {
      // Eager, gated: a builder whose staging ring holds a whole batch, so no build
      // waits for a slot while the gate holds the stream.
      BuilderOptions eo = options;
      eo.staging_slots = s_.eager_batch + 1;
      eo.capture_slots = 0;
      MetadataBuilder e(w.kind, w.config, eo);
      for (int32_t i = 0; i < 8; ++i) build_once(e, step, tables, stream_);
      cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      g.eager_us = device_time_us(s_.eager_batch, s_.eager_batches, true, build_on(e), timed_out);
    }
    // One build captured into a graph (it keeps one of b's capture slots), replayed.
    Graph graph;
    graph.capture(stream_, build_on(b));
    g.nodes = count_nodes(graph.graph());
    for (int32_t i = 0; i < 16; ++i) graph.launch(stream_);
    cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    g.graph_us = device_time_us(
        s_.graph_batch, s_.graph_batches, true, [&] { graph.launch(stream_); }, timed_out);
    g.floor = floor(r.upload_bytes);
    g.gate_timed_out = timed_out;
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

#include "case_file.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <stdexcept>
#include <type_traits>

namespace linmeta::cases {

namespace {

std::vector<int32_t> ints(const json& j) {
  std::vector<int32_t> v;
  if (j.is_null()) return v;
  for (const auto& x : j) v.push_back(x.get<int32_t>());
  return v;
}

CacheMode cache_mode(const std::string& s) {
  if (s == "none") return CacheMode::None;
  if (s == "all") return CacheMode::All;
  if (s == "align") return CacheMode::Align;
  throw std::runtime_error("unknown mamba_cache_mode " + s);
}

const char* cache_mode_name(CacheMode m) {
  return m == CacheMode::None ? "none" : m == CacheMode::All ? "all" : "align";
}

Profile profile(const json& cf) {
  const std::string s = cf.value("profile", std::string("seed"));
  if (s == "seed") return Profile::Seed;
  if (s == "vllm-0.34") return Profile::Vllm034;
  throw std::runtime_error("unknown config.profile " + s);
}

/// Absent: the backend a CUDA engine resolves by default (GDN triton, KDA FlashKDA).
PrefillBackend prefill_backend(const json& cf, BuilderKind kind) {
  if (!cf.contains("prefill_backend") || cf.at("prefill_backend").is_null())
    return kind == BuilderKind::Kda ? PrefillBackend::FlashKda : PrefillBackend::Triton;
  const std::string s = cf.at("prefill_backend").get<std::string>();
  if (s == "triton") return PrefillBackend::Triton;
  if (s == "flashinfer") return PrefillBackend::FlashInfer;
  if (s == "flashkda") return PrefillBackend::FlashKda;
  throw std::runtime_error("unknown config.prefill_backend " + s);
}

const char* backend_name(PrefillBackend b) {
  return b == PrefillBackend::Triton       ? "triton"
         : b == PrefillBackend::FlashInfer ? "flashinfer"
                                           : "flashkda";
}

/// Sequence orders agree up to ties: same permutation size, same lengths at each place.
bool same_order_up_to_ties(const json& expected_order, const json& got, const json& qsl) {
  if (!expected_order.is_array() || !got.is_array() || !qsl.is_array()) return false;
  const size_t n = expected_order.size();
  if (got.size() != n || qsl.size() != n + 1) return false;
  std::vector<int> seen(n, 0);
  auto len = [&](size_t i) { return qsl[i + 1].get<int64_t>() - qsl[i].get<int64_t>(); };
  for (size_t i = 0; i < n; ++i) {
    const auto g = got[i].get<int64_t>();
    if (g < 0 || static_cast<size_t>(g) >= n || seen[static_cast<size_t>(g)]++ != 0) return false;
    if (len(static_cast<size_t>(g)) != len(expected_order[i].get<size_t>())) return false;
  }
  return true;
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Device (or host) copies of a case's "device" arrays, alive for one run.
class Inputs {
 public:
  Inputs(const Case& c, Target t) : target_(t) {
    qsl_ = put(c.qsl);
    seq_lens_ = put(c.seq_lens);
    accepted_ = c.has_accepted ? put(c.accepted) : nullptr;
    for (const auto& t2 : c.tables) tables_.push_back(put(t2));
  }
  ~Inputs() {
    if (target_ == Target::Cuda)
      for (void* p : owned_) cudaFree(p);
  }
  Inputs(const Inputs&) = delete;
  Inputs& operator=(const Inputs&) = delete;

  const int32_t* qsl_ = nullptr;
  const int32_t* seq_lens_ = nullptr;
  const int32_t* accepted_ = nullptr;
  std::vector<const int32_t*> tables_;

 private:
  const int32_t* put(const std::vector<int32_t>& v) {
    if (target_ == Target::Host) return v.data();
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(v.size(), 1) * sizeof(int32_t);
    cuda_ok(cudaMalloc(&p, bytes), "cudaMalloc");
    owned_.push_back(p);
    if (!v.empty())
      cuda_ok(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    return static_cast<const int32_t*>(p);
  }
  Target target_;
  std::vector<void*> owned_;
};

/// Elements of `a` as int64, copied from target memory.
std::vector<int64_t> read(const Array& a, Target t) {
  std::vector<int64_t> raw(static_cast<size_t>(a.size()) + 1);  // bytes <= 8 per element
  if (a.size() > 0) {
    if (t == Target::Cuda)
      cuda_ok(
          cudaMemcpy(raw.data(), a.data, static_cast<size_t>(a.bytes()), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    else
      std::memcpy(raw.data(), a.data, static_cast<size_t>(a.bytes()));
  }
  Array host = a;
  host.data = raw.data();
  std::vector<int64_t> v(static_cast<size_t>(a.size()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = host.at(static_cast<int64_t>(i));
  return v;
}

json element(const Array& a, int64_t v) { return a.dtype == DType::Bool ? json(v != 0) : json(v); }

json array_json(const Array& a, Target t) {
  if (!a.present) return nullptr;
  const auto v = read(a, t);
  json out = json::array();
  if (a.ndim == 1) {
    for (const int64_t x : v) out.push_back(element(a, x));
    return out;
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    json row = json::array();
    for (int32_t c = 0; c < a.cols; ++c)
      row.push_back(element(a, v[static_cast<size_t>(r * a.cols + c)]));
    out.push_back(row);
  }
  return out;
}

/// The case format's conv1d object: the program arrays cut to `tot`, plus the check
/// that every entry past it is PAD_SLOT_ID.
json conv1d_json(const Conv1dMetadata& cv, Target t) {
  auto bp = read(cv.batch_ptr, t);
  auto off = read(cv.token_chunk_offset_ptr, t);
  bool pad_ok = static_cast<int64_t>(bp.size()) >= 2 * std::max<int64_t>(1024, cv.tot);
  for (size_t i = static_cast<size_t>(cv.tot); i < bp.size(); ++i)
    pad_ok = pad_ok && bp[i] == -1 && off[i] == -1;
  bp.resize(std::min(bp.size(), static_cast<size_t>(cv.tot)));
  off.resize(std::min(off.size(), static_cast<size_t>(cv.tot)));
  return {{"nums", array_json(cv.nums, Target::Host)},
          {"tot", cv.tot},
          {"batch_ptr", bp},
          {"token_chunk_offset_ptr", off},
          {"capacity_padding_ok", pad_ok}};
}

}  // namespace

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

Case parse_case(const json& j) {
  Case c;
  c.name = j.at("name").get<std::string>();
  c.kind = j.at("builder").get<std::string>() == "kda" ? BuilderKind::Kda : BuilderKind::Gdn;
  c.capture = j.value("mode", std::string("build")) == "capture";
  const json& cf = j.at("config");
  c.config.num_spec = cf.at("num_spec").get<int32_t>();
  c.config.max_num_seqs = cf.at("max_num_seqs").get<int32_t>();
  c.config.full_cuda_graph = cf.at("full_cuda_graph").get<bool>();
  c.config.max_cudagraph_capture_size = cf.at("max_cudagraph_capture_size").is_null()
                                            ? 0
                                            : cf.at("max_cudagraph_capture_size").get<int32_t>();
  c.config.mamba_cache_mode = cache_mode(cf.at("mamba_cache_mode").get<std::string>());
  c.config.block_size = cf.at("block_size").get<int32_t>();
  c.config.num_speculative_blocks = cf.at("num_speculative_blocks").get<int32_t>();
  c.config.use_recoverssm = cf.value("use_recoverssm", false);
  c.config.num_prefill_checkpoint_blocks = cf.value("num_prefill_checkpoint_blocks", 0);
  c.config.chunk_metadata = c.kind == BuilderKind::Gdn;
  c.config.profile = profile(cf);
  c.config.prefill_backend = prefill_backend(cf, c.kind);

  const json& s = j.at("step");
  c.qsl = ints(s.at("query_start_loc"));
  c.seq_lens = ints(s.at("seq_lens"));
  c.seq_lens_ub = ints(s.at("seq_lens_cpu_upper_bound"));
  c.num_reqs = static_cast<int32_t>(c.seq_lens.size());
  c.num_actual_tokens = s.at("num_actual_tokens").get<int32_t>();
  c.config.max_num_batched_tokens = std::max(c.num_actual_tokens, 1);
  if (!s.at("is_prefilling").is_null())
    for (const auto& b : s.at("is_prefilling")) c.is_prefilling.push_back(b.get<bool>() ? 1 : 0);
  c.has_drafts = !s.at("num_decode_draft_tokens_cpu").is_null();
  c.drafts = ints(s.at("num_decode_draft_tokens_cpu"));
  c.has_accepted = !s.at("num_accepted_tokens").is_null();
  c.accepted = ints(s.at("num_accepted_tokens"));
  auto flatten = [&](const json& t) {
    std::vector<int32_t> flat;
    c.width = t.empty() ? 0 : static_cast<int32_t>(t[0].size());
    for (const auto& row : t)
      for (const auto& x : row) flat.push_back(x.get<int32_t>());
    return flat;
  };
  c.multi_group = s.contains("groups");
  if (c.multi_group)
    for (const auto& t : s.at("groups")) c.tables.push_back(flatten(t));
  else
    c.tables.push_back(flatten(s.at("block_table")));
  if (j.contains("error")) {
    c.error = j.at("error");
    return c;
  }
  c.expected = j.at("expected");
  if (c.multi_group)
    for (const auto& e : j.at("expected_groups")) c.expected_groups.push_back(e);
  else
    c.expected_groups.push_back(c.expected);
  return c;
}

json config_json(const Config& c) {
  json j{{"num_spec", c.num_spec},
         {"max_num_seqs", c.max_num_seqs},
         {"full_cuda_graph", c.full_cuda_graph},
         {"max_cudagraph_capture_size",
          c.max_cudagraph_capture_size > 0 ? json(c.max_cudagraph_capture_size) : json(nullptr)},
         {"mamba_cache_mode", cache_mode_name(c.mamba_cache_mode)},
         {"block_size", c.block_size},
         {"num_speculative_blocks", c.num_speculative_blocks},
         {"use_recoverssm", c.use_recoverssm},
         {"num_prefill_checkpoint_blocks", c.num_prefill_checkpoint_blocks}};
  if (c.profile == Profile::Vllm034) {
    j["profile"] = "vllm-0.34";
    j["prefill_backend"] = backend_name(c.prefill_backend);
  }
  return j;
}

json to_json(const Metadata& m, BuilderKind kind) {
  const Target t = m.target;
  json j;
  j["num_prefills"] = m.num_prefills;
  j["num_prefill_tokens"] = m.num_prefill_tokens;
  j["num_decodes"] = m.num_decodes;
  j["num_decode_tokens"] = m.num_decode_tokens;
  j["num_spec_decodes"] = m.num_spec_decodes;
  j["num_spec_decode_tokens"] = m.num_spec_decode_tokens;
  j["num_actual_tokens"] = m.num_actual_tokens;
  j["uniform_spec_sequence_length"] =
      m.uniform_spec_sequence_length ? json(*m.uniform_spec_sequence_length) : json(nullptr);
  // Nested objects as the case format spells them; the table fills their arrays.
  j["conv1d"] = m.conv1d ? conv1d_json(*m.conv1d, t) : json(nullptr);
  auto optional_int = [](const std::optional<int32_t>& v) { return v ? json(*v) : json(nullptr); };
  j["checkpoint"] = m.checkpoint ? json::object() : json(nullptr);
  j["flashinfer_checkpoint_plan"] = nullptr;
  if (const auto& fi = m.flashinfer_checkpoint_plan)
    j["flashinfer_checkpoint_plan"] = {{"every_n_tokens", fi->every_n_tokens},
                                       {"num_checkpoints", fi->num_checkpoints}};
  j["spec_token_start"] = optional_int(m.spec_token_start);
  j["non_spec_token_start"] = optional_int(m.non_spec_token_start);
  if (kind == BuilderKind::Kda) {
    j["recoverssm_commit"] = nullptr;
    if (m.recoverssm_commit) {
      const auto& rc = *m.recoverssm_commit;
      j["recoverssm_commit"] = {
          {"state_indices", array_json(rc.state_indices, t)},
          {"query_start_loc", array_json(rc.query_start_loc, t)},
          {"align", rc.align ? json{{"block_size", rc.align->block_size}} : json(nullptr)}};
    }
  }
  for_each_array(m, [&](const OutputSpec& spec, const Array& a) {
    if (spec.id == Out::BatchPtr || spec.id == Out::TokenChunkOffsetPtr) return;  // in conv1d
    std::string path = std::string("/") + spec.name;
    std::replace(path.begin(), path.end(), '.', '/');
    j[json::json_pointer(path)] = array_json(a, t);
  });
  return j;
}

std::vector<json> run_case(const Case& c, Target target, bool independent) {
  Inputs in(c, target);
  Step s;
  s.num_reqs = c.num_reqs;
  s.num_actual_tokens = c.num_actual_tokens;
  s.query_start_loc_cpu = c.qsl;
  s.seq_lens_cpu_upper_bound = c.seq_lens_ub;
  if (!c.is_prefilling.empty())
    s.is_prefilling = {reinterpret_cast<const bool*>(c.is_prefilling.data()),
                       c.is_prefilling.size()};
  if (c.has_drafts) s.num_decode_draft_tokens = c.drafts;
  s.query_start_loc = in.qsl_;
  s.seq_lens = in.seq_lens_;
  s.num_accepted_tokens = in.accepted_;
  std::vector<BlockTable> tables;
  for (const auto* t : in.tables_) tables.push_back({t, c.width, c.width});
  s.block_table = tables[0];

  BuilderOptions opt;
  opt.target = target;
  std::vector<json> out;
  auto finish = [&](const Metadata& m) {
    if (target == Target::Cuda) cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    out.push_back(to_json(m, c.kind));
  };
  if (independent || tables.size() == 1) {
    for (const auto& t : tables) {
      MetadataBuilder b(c.kind, c.config, opt);
      s.block_table = t;
      finish(c.capture ? b.build_for_cudagraph_capture(s) : b.build(s));
    }
  } else {
    opt.num_groups = static_cast<int32_t>(tables.size());
    MetadataBuilder b(c.kind, c.config, opt);
    auto ms =
        c.capture ? b.build_groups_for_cudagraph_capture(s, tables) : b.build_groups(s, tables);
    for (const auto& m : ms) finish(m);
  }
  return out;
}

std::vector<Mismatch> compare(const json& expected, const json& got) {
  std::vector<Mismatch> out;
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    if (!got.contains(it.key())) {
      out.push_back({it.key(), it.value().dump(), "<not emitted>", true});
      continue;
    }
    const json& g = got.at(it.key());
    if (it.key() == "flashinfer_prefill_seq_order" && g != it.value() &&
        same_order_up_to_ties(it.value(), g,
                              expected.value("flashinfer_prefill_query_start_loc", json(nullptr))))
      continue;
    if (g != it.value()) out.push_back({it.key(), it.value().dump(), g.dump()});
  }
  for (auto it = got.begin(); it != got.end(); ++it)
    if (!expected.contains(it.key()) && !it.value().is_null())
      out.push_back({it.key(), "null (not recorded)", it.value().dump()});
  return out;
}

}  // namespace linmeta::cases

// The SGLang kinds (linmeta/sglang.hpp, docs/sglang.md): rules with known answers, rejected
// steps (a clear linmeta::Error, the last metadata untouched), values outside the contract.
// Exactness against the wheel is the case replay's (linmeta-sglang-replay, ctest
// sglang_replay_*) and tests/sglang/linmeta_diff.py's.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/test_seed.hpp"
#include "linmeta/builder.hpp"
#include "linmeta/error.hpp"
#include "rejection.hpp"
#include "sglang_step.hpp"

namespace linmeta {
namespace {

using test::SglStep;

Config config(int32_t chunk = 8) {
  Config c;
  c.max_num_seqs = 32;
  c.max_num_batched_tokens = 4096;
  c.chunk_size = chunk;
  return c;
}

std::vector<int64_t> values(const Array& a) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < a.size(); ++i) v.push_back(a.at(i));
  return v;
}

TEST(Sglang, LogicalChunksOfTheDocstringExample) {
  // Mamba2Metadata._query_start_loc_to_chunk_indices_offsets: query_start_loc = [0, 5, 10],
  // chunk_size = 8 -> chunk_indices [0, 0, 1], chunk_offsets [0, 5, 0].
  SglangMamba2MetadataBuilder b(config(8));
  SglStep st;
  st.extend({{3, 5}, {0, 5}}, SglangMode::Extend);
  const Metadata& m = b.build(st.step);
  ASSERT_TRUE(m.sglang && m.sglang->mixed_metadata);
  const SglangMixedMetadata& x = *m.sglang->mixed_metadata;
  EXPECT_TRUE(x.prep_initial_states);
  EXPECT_EQ(values(x.chunk_indices), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(values(x.chunk_offsets), (std::vector<int64_t>{0, 5, 0}));
  EXPECT_EQ(values(x.seq_idx), (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(x.seq_idx.ndim, 2);
  EXPECT_EQ(x.seq_idx.rows, 1);
  EXPECT_EQ(values(x.has_initial_states), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(values(m.sglang->query_start_loc), (std::vector<int64_t>{0, 5, 10}));
  EXPECT_EQ(values(m.sglang->mamba_cache_indices), (std::vector<int64_t>{100, 101}));
  EXPECT_EQ(m.sglang->num_prefills, 2);
  EXPECT_EQ(m.sglang->num_decodes, 0);
}

TEST(Sglang, NoInitialStateNoLogicalChunks) {
  SglangMamba2MetadataBuilder b(config());
  SglStep st;
  st.extend({{0, 5}, {0, 5}}, SglangMode::Extend);
  const Metadata& m = b.build(st.step);
  EXPECT_FALSE(m.sglang->mixed_metadata->prep_initial_states);
  EXPECT_FALSE(m.sglang->mixed_metadata->chunk_indices);
  EXPECT_FALSE(m.sglang->mixed_metadata->chunk_offsets);
}

TEST(Sglang, ReplayPadsAndZeroesThePaddedRequestRows) {
  SglangMamba2MetadataBuilder b(config());
  SglStep st;
  st.rows(4);
  st.rpi[3] = 7;  // a padded row that does not hold request row 0: replay zeroes it
  st.s.num_padding = 1;
  st.graph(SglangEntry::GraphReplay);
  const Metadata& m = b.build(st.step);
  EXPECT_EQ(st.state, (std::vector<int32_t>{100, 101, 102, -1}));
  EXPECT_EQ(st.qsl, (std::vector<int32_t>{0, 1, 2, 3, 3}));
  EXPECT_EQ(st.rpi[3], 0);
  EXPECT_EQ(m.sglang->mamba_cache_indices.data, st.state.data());  // the backend's buffer
  EXPECT_EQ(m.sglang->query_start_loc.data, st.qsl.data());
  EXPECT_EQ(m.sglang->num_decodes, 4);
}

TEST(Sglang, ARequestRowOutsideTheMapGetsThePadSlot) {
  SglangMamba2MetadataBuilder b(config());
  SglStep st;
  st.rows(3);
  st.rpi[1] = 1 << 20;
  st.rpi[2] = -5;
  const Metadata& m = b.build(st.step);
  EXPECT_EQ(values(m.sglang->mamba_cache_indices), (std::vector<int64_t>{100, -1, -1}));
}

TEST(Sglang, TrackingSourcesOnTheFlatChunkGrid) {
  // Rows (prefix, extend): tracked where the extend reaches G = 32; C = 8.
  SglangMamba2MetadataBuilder b(config(8));
  SglStep st;
  st.extend({{0, 40}, {16, 4}, {5, 35}}, SglangMode::Extend);
  st.track();  // seqlens: prefix + extend - row % 3 -> lens 40 (aligned), -, 33 (unaligned)
  const Metadata& m = b.build(st.step);
  const SglangMetadata& g = *m.sglang;
  EXPECT_TRUE(g.has_mamba_track_mask);
  EXPECT_EQ(values(g.mamba_track_mask_indices), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(values(g.conv_states_mask_indices), (std::vector<int64_t>{200, 202}));
  EXPECT_EQ(values(g.track_ssm_final_src), (std::vector<int64_t>{100}));
  EXPECT_EQ(values(g.track_ssm_final_dst), (std::vector<int64_t>{200}));
  // Row 2 starts at token 44: its chunk 4 ends at 44 + 32 = 76, off the grid: recomputed.
  EXPECT_EQ(values(g.track_ssm_seq_idx), (std::vector<int64_t>{2}));
  EXPECT_EQ(values(g.track_ssm_end_locs), (std::vector<int64_t>{76}));
  EXPECT_EQ(values(g.track_ssm_recompute_dst), (std::vector<int64_t>{202}));
  EXPECT_EQ(g.track_ssm_h_src.rows, 0);
  // Conv windows: start = qsl + floor(len / 32) * 32 - 3, clamped to the 79 tokens.
  EXPECT_EQ(values(g.track_conv_indices), (std::vector<int64_t>{29, 30, 31, 73, 74, 75}));
  EXPECT_EQ(g.track_conv_indices.cols, 3);
}

TEST(Sglang, GdnTracksOnPerSequenceGridsAndKeepsWhatMamba2Drops) {
  SglangGdnMetadataBuilder b(config(8));
  SglStep st;
  st.extend({{0, 40}, {16, 4}, {5, 35}}, SglangMode::Extend);
  st.track();  // lens 40 (aligned), -, 33 (chunk 4 of row 2)
  const Metadata& m = b.build(st.step);
  const SglangMetadata& g = *m.sglang;
  EXPECT_FALSE(g.kind_metadata);
  EXPECT_FALSE(g.mixed_metadata);
  EXPECT_EQ(g.logical_num_tokens, 79);
  EXPECT_EQ(values(g.track_chunk_idx), (std::vector<int64_t>{-1, -1, 4}));
  EXPECT_EQ(values(g.track_ssm_h_batch_src), (std::vector<int64_t>{2}));
  // h offsets: ceil(40 / 8) + ceil(4 / 8) = 6 chunk states before row 2; its 4th: 10.
  EXPECT_EQ(values(g.track_ssm_h_src), (std::vector<int64_t>{10}));
  EXPECT_EQ(values(g.track_ssm_h_dst), (std::vector<int64_t>{202}));
  EXPECT_FALSE(g.track_ssm_seq_idx);
  EXPECT_EQ(values(g.mamba_track_mask_indices), (std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(g.conv_block_table);  // the backend builds none unless it says so
}

TEST(Sglang, GdnConvBlockTableOfARaggedExtend) {
  SglangGdnMetadataBuilder b(config());
  SglStep st;
  // Blocks of 8 tokens 3, 1, 1, 1, 1, 1: 6 rows * 3 = 18 <= 4 * 8 = 32, no table.
  st.extend({{0, 20}, {0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}}, SglangMode::Mixed);
  st.s.conv_block_table = true;
  EXPECT_FALSE(b.build(st.step).sglang->conv_block_table);
  // 40 blocks in one row and one each in nine: 10 * 40 = 400 > 4 * 49: the table.
  SglStep ragged;
  std::vector<std::pair<int32_t, int32_t>> rows{{0, 320}};
  for (int i = 0; i < 9; ++i) rows.emplace_back(100, 1);
  ragged.extend(rows, SglangMode::Mixed);
  ragged.s.conv_block_table = true;
  const Array& t = b.build(ragged.step).sglang->conv_block_table;
  ASSERT_TRUE(t);
  EXPECT_EQ(t.rows, 49);
  EXPECT_EQ(t.cols, 2);
  const std::vector<int64_t> v = values(t);
  EXPECT_EQ((std::vector<int64_t>{v[0], v[1], v[78], v[79], v[80], v[81], v[96], v[97]}),
            (std::vector<int64_t>{0, 0, 0, 39, 1, 0, 9, 0}));
}

TEST(Sglang, LightningCountsEveryRowAPrefillAndDecodesHaveInitialStates) {
  SglangLightningMetadataBuilder b(config(8));
  SglStep st;
  st.extend({{0, 40}, {16, 4}, {5, 35}}, SglangMode::Mixed);
  st.track();
  const Metadata& m = b.build(st.step);
  const SglangMetadata& g = *m.sglang;
  EXPECT_TRUE(g.kind_metadata);  // BailingLinearMetadata
  EXPECT_EQ(g.num_prefills, 3);
  EXPECT_EQ(g.num_prefill_tokens, 79);
  EXPECT_EQ(g.batch_size, 3);
  EXPECT_EQ(g.has_initial_states.dtype, DType::Bool);
  EXPECT_EQ(values(g.has_initial_states), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(values(g.q_lengths), (std::vector<int64_t>{40, 4, 35}));
  EXPECT_EQ(values(g.track_ssm_h_src), (std::vector<int64_t>{10}));  // per-sequence grids
  EXPECT_FALSE(g.track_conv_indices);  // not carried into BailingLinearMetadata
  EXPECT_FALSE(g.mamba_track_mask_indices);
  SglStep dec;
  dec.rows(3);
  const Metadata& d = b.build(dec.step);
  EXPECT_EQ(d.sglang->has_initial_states.dtype, DType::Int64);  // ones_like(seq_lens)
  EXPECT_EQ(values(d.sglang->has_initial_states), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(d.sglang->num_decodes, 3);
  SglStep tree;
  tree.rows(2);
  tree.s.topk = 2;
  testing::expect_error([&] { b.build(tree.step); }, {"topk > 1"});
}

TEST(Sglang, KdaIsGdnWithoutTheConvBlockTable) {
  SglStep st;
  std::vector<std::pair<int32_t, int32_t>> rows{{0, 320}};
  for (int i = 0; i < 9; ++i) rows.emplace_back(100, 1);
  st.extend(rows, SglangMode::Mixed);
  st.s.conv_block_table = true;
  st.track();
  SglangKdaMetadataBuilder kda(config(8));
  SglangGdnMetadataBuilder gdn(config(8));
  const Metadata k = kda.build(st.step);
  const Metadata g = gdn.build(st.step);
  EXPECT_FALSE(k.sglang->conv_block_table);
  EXPECT_TRUE(g.sglang->conv_block_table);
  EXPECT_EQ(values(k.sglang->mamba_track_mask_indices), (std::vector<int64_t>{0}));
  EXPECT_EQ(values(k.sglang->track_ssm_h_src), values(g.sglang->track_ssm_h_src));
  EXPECT_EQ(values(k.sglang->track_chunk_idx), values(g.sglang->track_chunk_idx));
  EXPECT_EQ(k.sglang->logical_num_tokens, 329);
}

TEST(Sglang, KdaPrefillGraphTablesOfAKnownBatch) {
  // Rows (prefix, extend) (0, 70), (5, 3) on a bucket of 100 tokens and 4 sequences:
  // 100 / 64 -> 2 + 4 = 6 chunk rows, 100 / 8 -> 13 + 4 = 17 conv-block rows.
  SglangKdaMetadataBuilder b(config(8));
  SglStep st;
  st.extend({{0, 70}, {5, 3}}, SglangMode::Extend);
  st.prefill_graph(100, 4, false);
  const Metadata& m = b.build(st.step);
  EXPECT_TRUE(m.sglang);
  std::vector<int32_t> want{0, 70, 73, 73, 73};  // cu_seqlens, padded with the total
  for (const int32_t v : {0, 0, 0, 1, 1, 0}) want.push_back(v);  // (seq, chunk) pairs
  for (int i = 0; i < 3; ++i) want.insert(want.end(), {0, 1 << 20});
  for (const int32_t v : {0, 2, 3, 3, 3}) want.push_back(v);    // chunk_offsets
  for (int j = 0; j < 9; ++j) want.insert(want.end(), {0, j});  // 70 tokens: 9 conv blocks
  want.insert(want.end(), {1, 0});
  for (int i = 0; i < 7; ++i) want.insert(want.end(), {-1, 0});
  for (const int32_t v : {-1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 73}) want.push_back(v);
  EXPECT_EQ(st.pg_packed, want);
  EXPECT_EQ(st.pg_host, want);  // SGLang's host staging
  EXPECT_EQ(st.pg_cache, (std::vector<int32_t>{100, 101, -1, -1}));
  EXPECT_EQ(st.pg_initial, (std::vector<uint8_t>{0, 1, 0, 0}));
  EXPECT_EQ(st.pg_track_dst, (std::vector<int64_t>{0, 0, 0, 0}));  // no tracked row
  // A DP-padded batch: the rows past _original_batch_size get slot -1.
  st.s.original_batch_size = 1;
  b.build(st.step);
  EXPECT_EQ(st.pg_cache, (std::vector<int32_t>{100, -1, -1, -1}));
}

TEST(Sglang, KdaPrefillGraphTrackTables) {
  // C = 8, G = 32, W = 3; tracked rows 0 (len 40: the final state) and 2 (len 33: chunk 4).
  SglangKdaMetadataBuilder b(config(8));
  SglStep st;
  st.extend({{0, 40}, {16, 4}, {5, 35}}, SglangMode::Extend);
  st.track();
  st.prefill_graph(79, 4, true);
  st.pg_track_dst.assign(4, -9);
  b.build(st.step);
  const SglangPrefillGraphLayout l = SglangPrefillGraphLayout::of(79, 4);
  const auto part = [&](int64_t at, int64_t n) {
    return std::vector<int32_t>(st.pg_packed.begin() + at, st.pg_packed.begin() + at + n);
  };
  EXPECT_EQ(part(l.track_chunk_idx, 4), (std::vector<int32_t>{-1, -1, 4, -1}));
  EXPECT_EQ(part(l.track_mode, 4),
            (std::vector<int32_t>{kSglangTrackFinalState, 0, kSglangTrackChunkState, 0}));
  // The conv window's first token, unclamped: cu_seqlens + floor(len / 32) * 32 - 3.
  EXPECT_EQ(part(l.track_conv_start, 4), (std::vector<int32_t>{29, 0, 73, 0}));
  // track_dst[:bs] = mamba_track_indices[:bs]; past the batch untouched.
  EXPECT_EQ(st.pg_track_dst, (std::vector<int64_t>{200, -1, 202, -9}));
  EXPECT_EQ(st.pg_host, st.pg_packed);
  // A mask with no row set: no track rows, track_dst untouched.
  st.track_indices.assign(3, 7);
  for (int r = 0; r < 3; ++r) st.mask[r] = false;
  b.build(st.step);
  EXPECT_EQ(st.pg_track_dst, (std::vector<int64_t>{200, -1, 202, -9}));
  EXPECT_EQ(part(l.track_mode, 4), (std::vector<int32_t>{0, 0, 0, 0}));
}

TEST(Sglang, KdaPrefillGraphRefusalsLeaveTheBucketUntouched) {
  SglangKdaMetadataBuilder b(config(8));
  const auto bad = [&](auto&& edit, std::vector<std::string> needles) {
    SglStep st;
    st.extend({{1, 40}, {0, 2}, {0, 9}}, SglangMode::Extend);
    st.prefill_graph(64, 4, false);
    for (auto* v : {&st.pg_packed, &st.pg_host, &st.pg_cache}) std::fill(v->begin(), v->end(), 5);
    std::fill(st.pg_initial.begin(), st.pg_initial.end(), 1);
    std::fill(st.pg_track_dst.begin(), st.pg_track_dst.end(), 6);
    edit(st);
    const SglStep::Buffers before = st.buffers();
    testing::expect_error([&] { b.build(st.step); }, needles);
    EXPECT_TRUE(st.buffers() == before) << needles[0];
  };
  bad([](SglStep& st) { st.prefill_graph(64, 2, false); },
      {"batch_size = 3", "prefill_graph.max_seqs = 2"});
  bad([](SglStep& st) { st.prefill_graph(50, 4, false); },
      {"sum to 51 tokens", "prefill_graph.num_tokens = 50"});
  bad([](SglStep& st) { st.s.prefill_graph.packed_len -= 1; }, {"prefill_graph.packed_len"});
  bad([](SglStep& st) { st.s.prefill_graph.max_seqs = 0; }, {"prefill_graph.max_seqs = 0"});
  bad([](SglStep& st) { st.s.prefill_graph.num_tokens = 1 << 20; },
      {"prefill_graph.num_tokens = 1048576"});
  bad([](SglStep& st) { st.s.prefill_graph.cache_indices = nullptr; }, {"must not be null"});
  bad([](SglStep& st) { st.s.extend_prefix_lens = {}; }, {"extend_prefix_lens"});
  bad([](SglStep& st) { st.s.original_batch_size = -3; }, {"original_batch_size = -3"});
  bad([](SglStep& st) { st.track(); }, {"without track tables"});
  bad(
      [](SglStep& st) {
        st.track();
        st.prefill_graph(64, 4, true);
        st.s.prefill_graph.track_dst = nullptr;
      },
      {"track_dst is null"});
  bad(
      [](SglStep& st) {
        st.track();
        st.prefill_graph(64, 4, true);
        st.track_seqlens[0] = 100;  // past the row's extend
      },
      {"track_seqlens[0] = 100"});
  // The other SGLang kinds do not serve the entry.
  SglStep st;
  st.extend({{1, 40}}, SglangMode::Extend);
  st.prefill_graph(64, 4, false);
  SglangGdnMetadataBuilder gdn(config(8));
  testing::expect_error([&] { gdn.build(st.step); }, {"sglang_kda serves it"});
}

TEST(Sglang, ShortConvWritesItsCacheIndicesBufferWhenTheBatchFits) {
  SglangShortConvMetadataBuilder b(config());
  std::vector<int64_t> buf(4, -7777);
  SglStep st;
  st.rows(3);
  st.s.cache_indices_buf = buf.data();
  st.s.cache_indices_buf_len = 4;
  const Metadata& m = b.build(st.step);
  EXPECT_FALSE(m.sglang->kind_metadata);                // a plain ForwardMetadata
  EXPECT_EQ(m.sglang->cache_indices.data, buf.data());  // buf[:3], the captured address
  EXPECT_EQ(m.sglang->cache_indices.dtype, DType::Int64);
  EXPECT_EQ(buf, (std::vector<int64_t>{100, 101, 102, -7777}));
  EXPECT_FALSE(m.sglang->has_initial_state);  // a decode
  EXPECT_FALSE(m.sglang->has_prefix_cpu);
  // Graph replay: the padded row's slot is -1 there too.
  SglStep rp;
  rp.rows(3);
  rp.s.num_padding = 1;
  rp.graph(SglangEntry::GraphReplay);
  rp.s.cache_indices_buf = buf.data();
  rp.s.cache_indices_buf_len = 4;
  b.build(rp.step);
  EXPECT_EQ(buf, (std::vector<int64_t>{100, 101, -1, -7777}));
  // A batch past the buffer: an array of the builder's (SGLang's fresh cast).
  SglStep big;
  big.rows(5);
  big.s.cache_indices_buf = buf.data();
  big.s.cache_indices_buf_len = 4;
  const Metadata& g = b.build(big.step);
  EXPECT_NE(g.sglang->cache_indices.data, buf.data());
  EXPECT_EQ(values(g.sglang->cache_indices), (std::vector<int64_t>{100, 101, 102, 103, 104}));
  EXPECT_EQ(buf, (std::vector<int64_t>{100, 101, -1, -7777}));
}

TEST(Sglang, ShortConvExtendHasInitialStateAndItsHostMirror) {
  SglangShortConvMetadataBuilder b(config());
  SglStep st;
  st.extend({{3, 5}, {0, 5}, {9, 1}}, SglangMode::Mixed);
  st.s.host_mirrors = true;
  const Metadata& m = b.build(st.step);
  EXPECT_EQ(m.sglang->has_initial_state.dtype, DType::Bool);
  EXPECT_EQ(values(m.sglang->has_initial_state), (std::vector<int64_t>{1, 0, 1}));
  ASSERT_TRUE(m.sglang->has_prefix_cpu);
  EXPECT_EQ(m.sglang->has_prefix_cpu.dtype, DType::Bool);
  EXPECT_EQ(values(m.sglang->has_prefix_cpu), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(values(m.sglang->cache_indices), (std::vector<int64_t>{100, 101, 102}));
  EXPECT_EQ(m.sglang->logical_num_tokens, 11);  // the plain ForwardMetadata keeps it
  st.s.host_mirrors = false;                    // a backend without the extend host loop
  EXPECT_FALSE(b.build(st.step).sglang->has_prefix_cpu);
  // Verify and draft extend have no initial-state mask (SGLang: extend, not those).
  st.s.forward_mode = st.s.logical_mode = SglangMode::DraftExtendV2;
  EXPECT_FALSE(b.build(st.step).sglang->has_initial_state);
  st.s.forward_mode = SglangMode::Extend;
  st.s.extend_prefix_lens = {};
  testing::expect_error([&] { b.build(st.step); }, {"extend_prefix_lens"});
}

TEST(Sglang, RejectedStepsLeaveTheLastMetadata) {
  SglangMamba2MetadataBuilder b(config());
  SglStep good;
  good.extend({{3, 5}, {0, 5}}, SglangMode::Extend);
  const Metadata before = b.build(good.step);
  const std::vector<int64_t> qsl = values(before.sglang->query_start_loc);
  const std::vector<int64_t> seq_idx = values(before.sglang->mixed_metadata->seq_idx);
  const auto bad = [&](auto&& edit, std::vector<std::string> needles) {
    SglStep st;
    st.extend({{1, 40}, {0, 2}, {0, 9}}, SglangMode::Extend);
    edit(st);
    testing::expect_error([&] { b.build(st.step); }, needles);
    EXPECT_EQ(values(before.sglang->query_start_loc), qsl);
    EXPECT_EQ(values(before.sglang->mixed_metadata->seq_idx), seq_idx);
  };
  bad([](SglStep& st) { st.step.sglang = nullptr; }, {"Step::sglang is null"});
  bad([](SglStep& st) { st.s.batch_size = 0; }, {"batch_size = 0"});
  bad([](SglStep& st) { st.s.batch_size = 33; }, {"max_num_seqs = 32"});
  bad([](SglStep& st) { st.s.forward_mode = static_cast<SglangMode>(9); }, {"forward_mode = 9"});
  bad([](SglStep& st) { st.s.extend_seq_lens = {}; }, {"extend_seq_lens"});
  bad([](SglStep& st) { st.ext[1] = -1; }, {"extend_seq_lens[1] = -1"});
  bad([](SglStep& st) { st.s.extend_prefix_lens = {}; }, {"extend_prefix_lens"});
  bad([](SglStep& st) { st.s.mamba_map = nullptr; }, {"mamba_map"});
  bad(
      [](SglStep& st) {
        st.track();
        st.track_seqlens[0] = 100;  // past the row's extend
      },
      {"track_seqlens[0] = 100"});
  bad(
      [](SglStep& st) {
        st.track();
        st.s.track_seqlens = {};
      },
      {"track_seqlens is required"});
  bad([](SglStep& st) { st.graph(SglangEntry::GraphReplay); }, {"invalid forward mode"});
  bad(
      [](SglStep& st) {
        st.s.forward_mode = st.s.logical_mode = SglangMode::Decode;
        st.graph(SglangEntry::GraphReplay);
        st.s.num_padding = 4;
      },
      {"num_padding = 4 exceeds batch_size = 3"});
  bad(
      [](SglStep& st) {
        st.s.forward_mode = st.s.logical_mode = SglangMode::TargetVerify;
        st.s.has_spec_info = true;
        st.s.draft_token_num = 3;
        st.graph(SglangEntry::CpuGraphCapture, 3);
      },
      {"no verify buffers"});
  bad(
      [](SglStep& st) {
        st.s.forward_mode = st.s.logical_mode = SglangMode::Decode;
        st.graph(SglangEntry::GraphCapture);
        st.s.graph.query_start_loc = nullptr;
      },
      {"graph entry writes"});
}

/// Random steps, many of them outside the contract (lengths, modes, padding, tracking
/// values, request rows, graph buffers): every kind answers with metadata or a
/// linmeta::Error, nothing else (the sanitizer builds check the memory accesses).
TEST(Sglang, HostileStepsGetMetadataOrAnError) {
  const uint32_t seed = testing::test_seed(42);
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto wild = [&](int64_t usual_hi) -> int64_t {
    switch (pick(0, 9)) {
      case 0:
        return -pick(1, 5);
      case 1:
        return pick(1 << 20, INT32_MAX);
      default:
        return pick(0, usual_hi);
    }
  };
  SglangMamba2MetadataBuilder m2(config(8));
  SglangGdnMetadataBuilder gdn(config(8));
  SglangKdaMetadataBuilder kda(config(8));
  SglangLightningMetadataBuilder lt(config(8));
  SglangShortConvMetadataBuilder sc(config(8));
  std::vector<int64_t> cache_buf(8, -7777);
  int built = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    SglStep st;
    const auto bs = static_cast<int32_t>(pick(1, 12));
    std::vector<std::pair<int32_t, int32_t>> rows;
    for (int32_t r = 0; r < bs; ++r)
      rows.emplace_back(static_cast<int32_t>(wild(300)), static_cast<int32_t>(wild(90)));
    st.extend(rows, static_cast<SglangMode>(pick(0, 6)));
    st.s.logical_mode = static_cast<SglangMode>(pick(0, 6));
    if (pick(0, 3) == 0) st.s.extend_seq_lens = {};
    if (pick(0, 3) == 0) st.s.extend_num_tokens = static_cast<int32_t>(wild(500));
    st.s.num_tokens = static_cast<int32_t>(wild(600));
    st.s.has_spec_info = pick(0, 1) == 1;
    st.s.draft_token_num = static_cast<int32_t>(wild(5));
    st.s.topk = static_cast<int32_t>(pick(0, 2));
    st.s.conv_block_table = pick(0, 1) == 1;
    for (auto& r : st.rpi) r = wild(80);
    if (pick(0, 2) == 0) {
      st.track();
      for (auto& v : st.track_seqlens) v = wild(400);
    }
    if (pick(0, 2) == 0) {
      st.rnt.assign(static_cast<size_t>(bs) * 8, 1);
      st.rns.assign(static_cast<size_t>(bs) * 8, 2);
      st.s.retrieve_next_token = st.rnt.data();
      st.s.retrieve_next_sibling = st.rns.data();
      st.s.retrieve_rows = static_cast<int32_t>(wild(bs));
      st.s.draft_token_num = std::clamp(st.s.draft_token_num, 1, 8);
    }
    if (pick(0, 1) == 0) {
      st.graph(static_cast<SglangEntry>(pick(1, 3)), std::clamp(st.s.draft_token_num, 1, 8));
      st.s.num_padding = static_cast<int32_t>(pick(0, 2) == 0 ? wild(20) : -1);
    } else if (pick(0, 3) == 0) {  // KDA's prefill-graph tables, a bucket of any bounds
      st.prefill_graph(static_cast<int32_t>(wild(700)) & 0xfff, static_cast<int32_t>(pick(1, 16)),
                       pick(0, 1) == 1);
      if (pick(0, 3) == 0) st.s.prefill_graph.num_tokens = static_cast<int32_t>(wild(900));
      if (pick(0, 3) == 0) st.s.prefill_graph.max_seqs = static_cast<int32_t>(wild(40));
      if (pick(0, 3) == 0) st.s.original_batch_size = static_cast<int32_t>(wild(20));
    }
    if (pick(0, 2) == 0) {
      st.s.cache_indices_buf = cache_buf.data();
      st.s.cache_indices_buf_len = pick(0, 3) == 0 ? wild(8) : 8;
      if (st.s.cache_indices_buf_len > 8) st.s.cache_indices_buf_len = 8;  // the buffer's size
    }
    st.s.host_mirrors = pick(0, 1) == 1;
    if (pick(0, 4) == 0) st.s.batch_size = static_cast<int32_t>(wild(40));  // not the arrays'
    for (MetadataBuilder* b : std::initializer_list<MetadataBuilder*>{&m2, &gdn, &kda, &lt, &sc}) {
      try {
        b->build(st.step);
        ++built;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(built, 300);
  EXPECT_GT(rejected, 500);
}

TEST(Sglang, TheKindTakesNoneOfVllmsOptions) {
  Config c = config();
  c.mamba_cache_mode = CacheMode::Align;
  testing::expect_error([&] { SglangMamba2MetadataBuilder b(c); }, {"none of vLLM's options"});
  c = config();
  c.chunk_size = 0;
  testing::expect_error([&] { SglangMamba2MetadataBuilder b(c); }, {"chunk_size = 0"});
}

}  // namespace
}  // namespace linmeta

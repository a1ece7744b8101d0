// The attention path at V4.1-Flash shapes (64 heads x 512, window 128, index top-512, 2048
// candidate blocks of 8) on a 2-layer random-weight model: a ratio-1 kv source that publishes
// candidates and a reindex layer masked to them. A prefill long enough for top-k to select, and a
// decode step over a 17,000-entry cache (filled directly) where the candidate filter selects.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "backends/cpu/cpu_backend.h"
#include "core/float_formats.h"
#include "core/quant.h"
#include "io/atomic_file.h"
#include "model/model.h"
#include "test_util.h"
#include "testing/config_builder.h"
#include "testing/tiny_model.h"

namespace dsinfer {
namespace {

// Flash's attention on a narrow residual stream and few experts: a ratio-1 kv source that publishes
// candidates, then a reindex layer.
Result<ModelConfig> real_attention_config() {
  return flash_shaped_config({.max_batch_size = 1,
                              .max_seq_len = 18000,
                              .vocab_size = 256,
                              .layers = {.compress_ratios = {1, 1},
                                         .kv_source_layers = {0},
                                         .index_source_layers = {0, 1},
                                         .candidate_source_layer = 0},
                              .n_routed_experts = 4,
                              .n_activated_experts = 2,
                              .route_scale = 1.0,
                              .swiglu_limit = 0.0,
                              .dim = 256,
                              .moe_inter_dim = 64,
                              .q_lora_rank = 128,
                              .o_lora_rank = 32});
}

class RealShapes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    const Result<ModelConfig> c = real_attention_config();
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_TRUE(make_random_weights(*c, 5).write(dir_->path() / "model.safetensors").ok());
    ASSERT_TRUE(write_file_atomic(dir_->path() / "config.json", c->to_json().dump()).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    auto m = Model::load(dir_->path(), backend_, comm_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  // A cache as a prefill of P positions would leave it: fake-quantised values, the index-key slot
  // on layer 0's keys. Lets the tests reach long contexts without an O(P^2) prefill.
  SequenceState filled_state(int64_t P) const {
    const ModelConfig& c = model_->config();
    SequenceState seq = model_->new_sequence();
    const auto values = [](size_t n, uint64_t seed, FakeQuant kind) {
      std::vector<uint16_t> v = testing::random_bf16(n, seed);
      for (auto& x : v) x = f32_to_bf16(std::fmax(std::fmin(bf16_to_f32(x), 4.0f), -4.0f));
      if (kind == FakeQuant::kFp8Group32)
        act_quant_inplace(v);
      else if (kind == FakeQuant::kFp4E4M3Group16)
        fp4_act_quant_inplace(v, 16, Fp4ScaleKind::kE4M3);
      else
        fp4_act_quant_inplace(v, 32, Fp4ScaleKind::kE8M0);
      return v;
    };
    EXPECT_TRUE(model_
                    ->write_compressed_cache(seq, 0, values(P * c.head_dim, 1, FakeQuant::kFp4E4M3Group16),
                                             values(P * c.index_head_dim, 2, FakeQuant::kFp4E8M0Group32))
                    .ok());
    for (int l : {0, 1})
      EXPECT_TRUE(
          model_->write_window(seq, l, P, values(c.window_size * c.head_dim, 3 + l, FakeQuant::kFp8Group32)).ok());
    seq.length = P;
    seq.index_key_owner = 0;
    return seq;
  }
  static std::vector<int32_t> ints(const DebugTensor& t) {
    std::vector<int32_t> v(t.bytes.size() / 4);
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    return v;
  }

  static testing::TempDir* dir_;
  CpuBackend backend_{2};
  LocalCommunicator comm_;
  std::unique_ptr<Model> model_;
};
testing::TempDir* RealShapes::dir_ = nullptr;

TEST_F(RealShapes, PrefillChunkSelectsTop512OfMoreVisible) {
  // The last 10 tokens of a 600-token prompt whose first 590 are cached.
  SequenceState seq = filled_state(590);
  ChunkTaps taps(1);
  taps[0].dump = true;
  std::vector<ForwardChunk> chunk(1);
  chunk[0].state = &seq;
  chunk[0].start_pos = 590;
  chunk[0].prompt_len = 600;
  for (int i = 0; i < 10; ++i) chunk[0].tokens.push_back((i * 37) % 256);
  std::vector<float> logits(256);
  const Status s = model_->forward(chunk, logits, &taps);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  for (int l : {0, 1}) {
    const DebugTensor& t = taps[0].tensors.at(fmt::format("layer{}.topk_idxs", l));
    ASSERT_EQ(t.shape, (std::vector<int64_t>{10, 512}));
    const std::vector<int32_t> idx = ints(t);
    for (int64_t q = 0; q < 10; ++q) {  // query 590 + q sees 591 + q entries, keeps 512 of them
      const std::vector<int32_t> row(idx.begin() + q * 512, idx.begin() + (q + 1) * 512);
      EXPECT_TRUE(std::is_sorted(row.begin(), row.end()));
      EXPECT_EQ(std::set<int32_t>(row.begin(), row.end()).size(), 512u);
      EXPECT_GE(row.front(), 10);           // offset by the chunk's 10 rows
      EXPECT_LT(row.back(), 10 + 591 + q);  // only visible entries
    }
  }
}

TEST_F(RealShapes, DecodeOverSeventeenThousandEntriesUsesTheCandidateFilter) {
  const ModelConfig& c = model_->config();
  const int64_t P = 17000;
  SequenceState seq = filled_state(P);
  ChunkTaps taps(1);
  taps[0].dump = true;
  std::vector<ForwardChunk> chunk(1);
  chunk[0].state = &seq;
  chunk[0].start_pos = P;
  chunk[0].decode = true;
  chunk[0].tokens = {42};
  std::vector<float> logits(256);
  const Status s = model_->forward(chunk, logits, &taps);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));

  const int64_t T = P + 1, blocks = (T + 7) / 8;  // 2126 reachable blocks > 2048 kept
  const DebugTensor& cand = taps[0].tensors.at("layer0.candidates");
  ASSERT_EQ(cand.shape, (std::vector<int64_t>{1, T}));
  int64_t kept_positions = 0;
  std::set<int64_t> kept_blocks;
  for (int64_t i = 0; i < T; ++i)
    if (cand.bytes[i]) ++kept_positions, kept_blocks.insert(i / 8);
  EXPECT_EQ(static_cast<int64_t>(kept_blocks.size()), 2048);
  EXPECT_LT(static_cast<int64_t>(kept_blocks.size()), blocks);
  EXPECT_TRUE(kept_blocks.count((T - 1) / 8));  // the newest block is pinned
  EXPECT_GE(kept_positions, 2047 * 8 + 1);
  for (int l : {0, 1}) {
    const std::vector<int32_t> idx = ints(taps[0].tensors.at(fmt::format("layer{}.topk_idxs", l)));
    ASSERT_EQ(idx.size(), 512u);
    EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
    EXPECT_EQ(std::set<int32_t>(idx.begin(), idx.end()).size(), 512u);
    if (l == 1) {  // the reindex layer only picks inside the candidate blocks (offset by the 128 ring rows)
      for (int32_t v : idx) EXPECT_TRUE(cand.bytes[v - c.window_size]) << v;
    }
  }
}

}  // namespace
}  // namespace dsinfer

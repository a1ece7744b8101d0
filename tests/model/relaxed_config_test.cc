// Widths the reference runs that validation once refused: o_lora_rank off the 32-row scale grid
// (wo_a's groups start inside the fp8 blocks that tile the whole matrix) and o_groups splitting
// heads. Each loads from a tiny checkpoint, its wo_a groups hold the matrix's exact values, and a
// prefill gives finite logits.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "backends/cpu/cpu_backend.h"
#include "core/float_formats.h"
#include "io/checkpoint.h"
#include "model/model.h"
#include "test_util.h"
#include "testing/config_builder.h"
#include "testing/tiny_model.h"
#include "testing/tiny_tokenizer.h"

namespace dsinfer {
namespace {

struct Variant {
  testing::TempDir dir;
  CpuBackend backend{2};
  LocalCommunicator comm;
  std::unique_ptr<Model> model;

  explicit Variant(const std::function<void(ModelConfig&)>& change) { load(change); }
  void load(const std::function<void(ModelConfig&)>& change) {
    auto vocab = TokenizerVocab::from_json(make_tiny_tokenizer_json(kTinyTokenizerMerges), "tiny");
    ASSERT_TRUE(vocab.ok());
    auto c = tiny_model_config(*vocab);
    ASSERT_TRUE(c.ok());
    change(*c);
    const Status written = write_tiny_checkpoint(dir.path(), 11, *c);
    ASSERT_TRUE(written.ok()) << written.to_string();
    auto m = Model::load(dir.path(), backend, comm);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(*m);
  }
};

// Every wo_a group's bf16 math sees the release matrix's rows g * o_lora_rank + r, each decoded
// with the scale of its own 32-row block of the whole matrix.
void expect_groups_hold_the_matrix(const Model& model, const std::filesystem::path& dir, int layer) {
  const ModelConfig& c = model.config();
  auto ckpt = Checkpoint::open(dir);
  ASSERT_TRUE(ckpt.ok());
  const std::string p = fmt::format("layers.{}.attn.wo_a.", layer);
  const auto* w = ckpt->find(p + "weight");
  const auto* s = ckpt->find(p + "scale");
  ASSERT_TRUE(w && s);
  const int64_t in = w->entry->shape[1], scale_cols = s->entry->shape[1];
  const auto& groups = model.weights().layers[layer].attn.wo_a;
  ASSERT_EQ(groups.size(), static_cast<size_t>(c.o_groups));
  int64_t checked = 0;
  for (int g = 0; g < c.o_groups; ++g) {
    ASSERT_EQ(groups[g].out, c.o_lora_rank);
    ASSERT_EQ(groups[g].in, in);
    for (int64_t r = 0; r < c.o_lora_rank; ++r)
      for (int64_t k = 0; k < in; ++k) {
        const int64_t row = int64_t{g} * c.o_lora_rank + r;
        const float want =
            e4m3_to_f32(w->data()[row * in + k]) * e8m0_to_f32(s->data()[(row / 32) * scale_cols + k / 32]);
        const LinearWeight& gw = groups[g];
        ASSERT_EQ(gw.weight.dtype, DType::kBF16) << "group " << g;
        const float got = bf16_to_f32(gw.weight.as<const uint16_t>()[r * gw.weight.stride[0] + k]);
        ASSERT_EQ(got, want) << "group " << g << " row " << r << " col " << k;
        ++checked;
      }
  }
  EXPECT_EQ(checked, int64_t{c.o_groups} * c.o_lora_rank * in);
}

void expect_finite_prefill(Model& model) {
  SequenceState seq = model.new_sequence();
  ForwardChunk chunk;
  chunk.state = &seq, chunk.prompt_len = 40;
  for (int t = 0; t < 40; ++t) chunk.tokens.push_back(5 + (t * 7) % 50);
  std::vector<float> logits(model.config().vocab_size);
  const Status s = model.forward({&chunk, 1}, logits);
  ASSERT_TRUE(s.ok()) << s.to_string();
  double sum = 0;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    sum += std::fabs(v);
  }
  EXPECT_GT(sum, 0);
}

TEST(RelaxedConfig, OLoraRankOffTheScaleGrid) {
  Variant v([](ModelConfig& c) { c.o_lora_rank = 48; });  // 2 groups: group 1 starts in block 1
  ASSERT_TRUE(v.model);
  expect_groups_hold_the_matrix(*v.model, v.dir.path(), 2);
  expect_finite_prefill(*v.model);
}

TEST(RelaxedConfig, OutputGroupsSplittingHeads) {
  Variant v([](ModelConfig& c) { c.o_groups = 8; });  // 4 heads x 64 in 8 groups of 32
  ASSERT_TRUE(v.model);
  expect_finite_prefill(*v.model);
}

}  // namespace
}  // namespace dsinfer

// A rank's shard of the checkpoint (issue 20, spec §12.4): the ranks' slices of every split
// tensor put back together are the tensor, byte for byte and in order; a rank binds its whole
// routed experts and wo_a groups; a split that does not divide is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/weight_manifest.h"
#include "model/weights.h"
#include "test_util.h"

namespace dsinfer {
namespace {

struct Fixture {
  ModelConfig config;
  Checkpoint ckpt;
};

Fixture open_fixture(const char* name) {
  const auto dir = testing::data_dir() / name / "checkpoint";
  auto config = load_model_config(dir / "config.json");
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  auto ckpt = Checkpoint::open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  return {std::move(*config), std::move(*ckpt)};
}

// The whole tensor as the checkpoint stores it (row-major).
TensorView whole_view(const Checkpoint& ckpt, const std::string& name) {
  const Checkpoint::Tensor* t = ckpt.find(name);
  EXPECT_NE(t, nullptr) << name;
  TensorView v;
  v.data = const_cast<uint8_t*>(t->data().data());
  v.dtype = t->entry->dtype;
  v.ndim = static_cast<int>(t->entry->shape.size());
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) v.shape[d] = t->entry->shape[d], v.stride[d] = stride, stride *= v.shape[d];
  return v;
}

// The bytes of a 1-D or 2-D view, row by row (its strides honoured).
std::vector<uint8_t> bytes_of(const TensorView& v) {
  const int64_t rows = v.ndim == 1 ? 1 : v.shape[0], cols = v.ndim == 1 ? v.shape[0] : v.shape[1];
  const int64_t row_stride = v.ndim == 1 ? 0 : v.stride[0];
  std::vector<uint8_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = v.as<const uint8_t>() + dtype_bytes(v.dtype, r * row_stride);
    out.insert(out.end(), p, p + dtype_bytes(v.dtype, cols));
  }
  return out;
}

class WeightShard : public ::testing::TestWithParam<const char*> {};

TEST_P(WeightShard, RanksSlicesPutBackTogetherAreEverySplitTensor) {
  const Fixture f = open_fixture(GetParam());
  constexpr int kRanks = 2;
  int checked = 0;
  for (const TensorSpec& spec : build_weight_manifest(f.config)) {
    if (spec.component != Component::kBackbone) continue;
    const bool split = spec.split == ShardSplit::kDim0 || spec.split == ShardSplit::kDim1;
    const TensorView whole = whole_view(f.ckpt, spec.name);
    if (!split) {  // replicated and whole experts: every rank's view is the tensor
      const auto v = shard_view(whole, spec, {1, kRanks});
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      EXPECT_EQ(v->data, whole.data) << spec.name;
      continue;
    }
    ASSERT_LE(whole.ndim, 2) << spec.name;
    const int dim = spec.split == ShardSplit::kDim0 ? 0 : 1;
    // Put the ranks' slices back together along the split dimension.
    std::vector<std::vector<uint8_t>> parts;
    int64_t covered = 0;
    for (int r = 0; r < kRanks; ++r) {
      const auto v = shard_view(whole, spec, {r, kRanks});
      ASSERT_TRUE(v.ok()) << spec.name << ": " << v.status().to_string();
      for (int d = 0; d < whole.ndim; ++d) {
        if (d != dim) {
          EXPECT_EQ(v->shape[d], whole.shape[d]) << spec.name;
        }
        EXPECT_EQ(v->stride[d], whole.stride[d]) << spec.name;  // a view, not a copy
      }
      covered += v->shape[dim];
      parts.push_back(bytes_of(*v));
    }
    EXPECT_EQ(covered, whole.shape[dim]) << spec.name;
    std::vector<uint8_t> joined;
    if (dim == 0) {
      for (const auto& p : parts) joined.insert(joined.end(), p.begin(), p.end());
    } else {  // row by row: each rank's columns of the row in rank order
      const int64_t rows = whole.shape[0], part_bytes = static_cast<int64_t>(parts[0].size()) / rows;
      for (int64_t row = 0; row < rows; ++row)
        for (const auto& p : parts)
          joined.insert(joined.end(), p.begin() + row * part_bytes, p.begin() + (row + 1) * part_bytes);
    }
    EXPECT_EQ(joined, bytes_of(whole)) << spec.name;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_P(WeightShard, ARankBindsItsExpertsAndGroupsAndTheSlicesOfSplitLinears) {
  const Fixture f = open_fixture(GetParam());
  const ModelConfig& c = f.config;
  auto full = load_model_weights(f.ckpt, c);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  for (int r = 0; r < 2; ++r) {
    auto w = load_model_weights(f.ckpt, c, {r, 2});
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    for (int l = 0; l < c.n_layers; ++l) {
      const BlockWeights &mine = w->layers[l], &all = full->layers[l];
      // Whole experts, the rank's half of the ids.
      const int experts = c.routed_experts(l);
      ASSERT_EQ(static_cast<int>(mine.ffn.experts.size()), experts / 2);
      EXPECT_EQ(mine.ffn.first_expert, r * experts / 2);
      for (int i = 0; i < experts / 2; ++i)
        EXPECT_EQ(mine.ffn.experts[i].w2.weight.data, all.ffn.experts[r * experts / 2 + i].w2.weight.data);
      EXPECT_EQ(mine.ffn.shared.w1.weight.data, all.ffn.shared.w1.weight.data);  // replicated
      // The rank's wo_a groups.
      ASSERT_EQ(static_cast<int>(mine.attn.wo_a.size()), c.o_groups / 2);
      for (int g = 0; g < c.o_groups / 2; ++g)
        EXPECT_EQ(bytes_of(mine.attn.wo_a[g].weight), bytes_of(all.attn.wo_a[r * c.o_groups / 2 + g].weight));
      // wq_b by rows (heads), wo_b by columns, with the scales alike.
      EXPECT_EQ(mine.attn.wq_b.out, all.attn.wq_b.out / 2);
      EXPECT_EQ(mine.attn.wq_b.in, all.attn.wq_b.in);
      EXPECT_EQ(mine.attn.wo_b.out, all.attn.wo_b.out);
      EXPECT_EQ(mine.attn.wo_b.in, all.attn.wo_b.in / 2);
      EXPECT_EQ(mine.attn.wo_b.scale.shape[1], (all.attn.wo_b.scale.shape[1]) / 2);
      EXPECT_EQ(mine.attn.attn_sink.shape[0], c.n_heads / 2);
      EXPECT_EQ(mine.attn.wq_a.weight.data, all.attn.wq_a.weight.data);  // replicated
    }
    EXPECT_EQ(w->embed.shape[0], c.vocab_size / 2);
    EXPECT_EQ(w->head.out, c.vocab_size / 2);
  }
}

// Four ranks: the fixtures' two wo_a groups (and more) do not divide; the error names the split.
TEST_P(WeightShard, ASplitThatDoesNotDivideIsRefusedByName) {
  const Fixture f = open_fixture(GetParam());
  const auto w = load_model_weights(f.ckpt, f.config, {0, 4});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().kind(), ErrorKind::kInvalidConfig);
  EXPECT_NE(w.status().message().find("over 4 ranks"), std::string::npos) << w.status().to_string();
  const auto bad = load_model_weights(f.ckpt, f.config, {2, 2});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().kind(), ErrorKind::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WeightShard, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

}  // namespace
}  // namespace dsinfer

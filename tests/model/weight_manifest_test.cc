// The weight manifest against the spec's inventory (§1.5, §12.2) and the fixture checkpoints.
#include "model/weight_manifest.h"

#include <gtest/gtest.h>

#include <map>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace dsinfer {
namespace {

ModelConfig flash() {
  auto c = load_model_config(testing::data_dir() / "configs/v41_flash_inference.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

TEST(WeightManifest, FlashParameterCountsMatchTheSpec) {
  std::map<Component, int64_t> params;
  int64_t total = 0;
  for (const TensorSpec& t : build_weight_manifest(flash())) params[t.component] += t.params(), total += t.params();
  // Spec §1.5: backbone 551.9 B, Engram 196.6 B, DSpark 14.2 B, vision 0.49 B, total 763.2 B.
  EXPECT_NEAR(params[Component::kBackbone] / 1e9, 551.9, 0.05);
  EXPECT_NEAR(params[Component::kEngramTable] / 1e9, 196.6, 0.05);
  EXPECT_EQ(params[Component::kEngramTable], 768022850LL * 256);
  EXPECT_NEAR(params[Component::kDSpark] / 1e9, 14.2, 0.05);
  EXPECT_NEAR(params[Component::kVision] / 1e9, 0.49, 0.005);
  EXPECT_NEAR(total / 1e9, 763.2, 0.05);
}

TEST(WeightManifest, FlashTensorCountsMatchTheInventory) {
  std::map<std::string, int> per_prefix;
  int vision = 0, total = 0;
  for (const TensorSpec& t : build_weight_manifest(flash())) {
    ++total;
    if (t.component == Component::kVision) ++vision;
    const size_t second_dot = t.name.find('.', t.name.find('.') + 1);
    if (t.name.rfind("layers.", 0) == 0 || t.name.rfind("mtp.", 0) == 0) ++per_prefix[t.name.substr(0, second_dot)];
  }
  // Spec §12.2: plain 2334, Reindex 2337, Full r=2 2342, layer 20 2341, layer 1 2340, layer 14 2348;
  // draft stages 801 / 798 / 802; 266 vision tensors; 96,085 in all.
  EXPECT_EQ(per_prefix["layers.0"], 2334);
  EXPECT_EQ(per_prefix["layers.24"], 2337);
  EXPECT_EQ(per_prefix["layers.2"], 2342);
  EXPECT_EQ(per_prefix["layers.20"], 2341);
  EXPECT_EQ(per_prefix["layers.1"], 2340);
  EXPECT_EQ(per_prefix["layers.14"], 2348);
  EXPECT_EQ(per_prefix["mtp.0"], 801);
  EXPECT_EQ(per_prefix["mtp.1"], 798);
  EXPECT_EQ(per_prefix["mtp.2"], 802);
  EXPECT_EQ(vision, 266);
  EXPECT_EQ(total, 96085);
}

// A decode step reads the whole backbone but one embedding row, the activated share of the routed
// experts and the selected Engram rows; nothing of the draft model or the vision tower.
TEST(WeightManifest, DecodeStepBytes) {
  const ModelConfig c = flash();
  const std::vector<TensorSpec> manifest = build_weight_manifest(c);
  double routed = 0, head = 0, backbone = 0;
  for (const TensorSpec& t : manifest) {
    if (t.component != Component::kBackbone) continue;
    backbone += static_cast<double>(t.bytes());
    if (t.part == Part::kRoutedExperts) routed += static_cast<double>(t.bytes());
    if (t.part == Part::kHead) head += static_cast<double>(t.bytes());
  }
  const DecodeStepBytes d = decode_step_bytes(manifest, c);
  EXPECT_DOUBLE_EQ(d.by_part.at(Part::kRoutedExperts), routed * 6 / 384);
  EXPECT_DOUBLE_EQ(d.by_part.at(Part::kEmbedding), 5120.0 * 2);  // one bf16 row
  EXPECT_DOUBLE_EQ(d.by_part.at(Part::kHead), head);
  EXPECT_FALSE(d.by_part.count(Part::kDSparkHeads));
  EXPECT_FALSE(d.by_part.count(Part::kVision));
  EXPECT_GT(d.by_part.at(Part::kEngramTable), 0.0);
  EXPECT_LT(d.by_part.at(Part::kEngramTable), 1e6);  // 2 layers x 24 rows, not the 189 GiB of tables
  EXPECT_GT(d.total(), 12.0 * (1 << 30));            // 12.1 GiB: the Flash model's batch-1 floor
  EXPECT_LT(d.total(), backbone);
}

TEST(WeightManifest, FixtureCheckpointsMatch) {
  for (const char* fx : {"v41-tiny-a", "v41-tiny-b"}) {
    const auto dir = testing::data_dir() / fx / "checkpoint";
    auto config = load_model_config(dir);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    auto ckpt = Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    const auto manifest = build_weight_manifest(*config);
    EXPECT_EQ(manifest.size(), ckpt->tensors().size());
    const Status s = check_checkpoint(manifest, *ckpt);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
}

TEST(WeightManifest, ReportsEveryProblemInOneError) {
  auto config = load_model_config(testing::data_dir() / "v41-tiny-a/checkpoint");
  ASSERT_TRUE(config.ok());
  auto manifest = build_weight_manifest(*config);
  // A checkpoint with one tensor missing, one extra, one mis-shaped and one of the wrong dtype.
  SafetensorsWriter w;
  for (const TensorSpec& t : manifest) {
    if (t.name == "layers.3.attn.wkv.weight") continue;
    std::vector<int64_t> shape = t.shape;
    DType dtype = t.dtypes.front();
    if (t.name == "layers.0.attn.attn_sink") shape[0] += 1;
    if (t.name == "norm.weight") dtype = DType::kF16;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    w.add(t.name, dtype, shape, std::vector<uint8_t>(static_cast<size_t>(dtype_bytes(dtype, n))));
  }
  w.add("layers.0.attn.bogus", DType::kF32, {2}, std::vector<uint8_t>(8));
  testing::TempDir dir;
  ASSERT_TRUE(w.write(dir.path() / "model.safetensors").ok());
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  const Status s = check_checkpoint(manifest, *ckpt);
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("1 missing, 1 unexpected, 2 mis-shaped"), std::string::npos) << m;
  EXPECT_NE(m.find("layers.3.attn.wkv.weight  (want F8_E4M3 [128, 192])"), std::string::npos) << m;
  EXPECT_NE(m.find("layers.0.attn.bogus"), std::string::npos) << m;
  EXPECT_NE(m.find("layers.0.attn.attn_sink  is F32 [5], want F32 [4]"), std::string::npos) << m;
  EXPECT_NE(m.find("norm.weight  is F16 [192], want BF16 [192]"), std::string::npos) << m;
}

TEST(WeightManifest, SplitsFollowTheTensorParallelLayout) {
  std::map<std::string, ShardSplit> split;
  for (const TensorSpec& t : build_weight_manifest(flash())) split[t.name] = t.split;
  EXPECT_EQ(split["embed.weight"], ShardSplit::kDim0);
  EXPECT_EQ(split["layers.5.attn.wq_b.weight"], ShardSplit::kDim0);
  EXPECT_EQ(split["layers.5.attn.wq_b.scale"], ShardSplit::kDim0);
  EXPECT_EQ(split["layers.5.attn.wo_b.weight"], ShardSplit::kDim1);
  EXPECT_EQ(split["layers.5.attn.wq_a.weight"], ShardSplit::kReplicated);
  EXPECT_EQ(split["layers.5.ffn.experts.17.w2.weight"], ShardSplit::kExpert);
  EXPECT_EQ(split["layers.5.ffn.shared_experts.w2.weight"], ShardSplit::kReplicated);
  EXPECT_EQ(split["layers.14.engram.embed.weight"], ShardSplit::kDim0);
  EXPECT_EQ(split["layers.24.attn.indexer.weights_proj.weight"], ShardSplit::kDim0);
}

// Each rank holds every replicated tensor and its 1/N share of every split one: N ranks hold the
// split bytes once between them; a layout the config does not divide into is refused by name.
TEST(WeightManifest, TensorParallelRanksHoldTheirShares) {
  const ModelConfig c = flash();
  const std::vector<TensorSpec> manifest = build_weight_manifest(c);
  std::map<Component, int64_t> whole, replicated;
  for (const TensorSpec& t : manifest) {
    whole[t.component] += t.bytes();
    if (t.split == ShardSplit::kReplicated || t.component == Component::kEngramTable)
      replicated[t.component] += t.bytes();
  }
  EXPECT_EQ(rank_bytes(manifest, 1), whole);
  for (const int ranks : {2, 4, 8}) {
    ASSERT_TRUE(check_tensor_parallel(manifest, c, ranks).ok()) << ranks;
    const std::map<Component, int64_t> per_rank = rank_bytes(manifest, ranks);
    for (const auto& [component, bytes] : whole) {
      const int64_t split = bytes - replicated[component];
      EXPECT_EQ(per_rank.at(component), replicated[component] + split / ranks) << component_name(component);
      EXPECT_EQ(split % ranks, 0) << component_name(component) << " at " << ranks << " ranks";
    }
    EXPECT_LT(per_rank.at(Component::kBackbone), whole.at(Component::kBackbone));
  }
  const Status experts = check_tensor_parallel(manifest, c, 3);  // 384 experts divide; DSpark's 128 do not
  EXPECT_EQ(experts.kind(), ErrorKind::kInvalidConfig);
  EXPECT_NE(experts.message().find("128 DSpark routed experts"), std::string::npos) << experts.message();
  const Status heads = check_tensor_parallel(manifest, c, 128);  // 64 attention heads do not
  EXPECT_EQ(heads.kind(), ErrorKind::kInvalidConfig);
  EXPECT_NE(heads.message().find("not a multiple of 128"), std::string::npos) << heads.message();
  EXPECT_EQ(check_tensor_parallel(manifest, c, 0).kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace dsinfer

// Config loading: both styles, defaults, derived roles, and validation messages naming fields.
#include "io/model_config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "io/engram_layout.h"
#include "test_util.h"

namespace dsinfer {
namespace {

ModelConfig load(const std::string& rel) {
  auto r = load_model_config(testing::data_dir() / rel);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : ModelConfig{};
}

TEST(ModelConfig, FlashInferenceConfig) {
  const ModelConfig c = load("configs/v41_flash_inference.json");
  EXPECT_EQ(c.dim, 5120);
  EXPECT_EQ(c.n_layers, 40);
  EXPECT_EQ(c.compress_ratios.size(), 43u);
  EXPECT_EQ(c.gate_temp, 1.0);  // absent: default
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.expert_format(), WeightFormat::kFp4);
  EXPECT_TRUE(c.dspark_enabled());
  EXPECT_TRUE(c.vision_enabled());
  EXPECT_FALSE(c.vision_max_wh_ratio.has_value());
  EXPECT_EQ(c.attention_role(0), AttentionRole::kWindowOnly);
  EXPECT_EQ(c.attention_role(2), AttentionRole::kFull);
  EXPECT_EQ(c.attention_role(3), AttentionRole::kReuse);
  EXPECT_EQ(c.attention_role(24), AttentionRole::kReindex);
  EXPECT_EQ(c.kv_source_of(27), 20);
  EXPECT_EQ(c.index_source_of(27), 24);
  EXPECT_TRUE(c.uses_candidates(24));
  EXPECT_FALSE(c.uses_candidates(20));
  EXPECT_FALSE(c.uses_candidates(8));
  EXPECT_EQ(c.routed_experts(40), 128);
  EXPECT_EQ(c.activated_experts(40), 3);
  EXPECT_EQ(c.engram_hash_columns(), 24);
}

TEST(ModelConfig, HuggingFaceStyleMapsToTheSameConfig) {
  const ModelConfig hf = load("configs/v41_flash_hf.json");
  const ModelConfig inf = load("configs/v41_flash_inference.json");
  EXPECT_EQ(hf.to_json(), inf.to_json()) << hf.to_json().dump() << "\n" << inf.to_json().dump();
}

TEST(ModelConfig, FixtureConfigs) {
  const ModelConfig a = load("v41-tiny-a/checkpoint");
  EXPECT_EQ(a.dim, 192);
  EXPECT_EQ(a.attention_role(5), AttentionRole::kReindex);
  EXPECT_EQ(a.attention_role(6), AttentionRole::kReuse);
  const ModelConfig b = load("v41-tiny-b/checkpoint/config.json");
  EXPECT_EQ(b.engram_layer_ids, (std::vector<int>{1, 2}));
}

TEST(ModelConfig, RoundTripsThroughJson) {
  const ModelConfig a = load("v41-tiny-a/checkpoint");
  auto back = parse_model_config(a.to_json(), "to_json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_json(), a.to_json());
}

TEST(EngramLayout, MatchesTheSpecPrimes) {
  const EngramLayout l = compute_engram_layout(2, 4, 8, 16000000);
  EXPECT_EQ(l.primes[0][0], 16000057);
  EXPECT_EQ(l.primes[0][23], 16000463);
  EXPECT_EQ(l.offsets[0][23], 368005705);
  EXPECT_EQ(l.table_rows(0), 384006168);
  EXPECT_EQ(l.primes[1][0], 16000477);
  EXPECT_EQ(l.offsets[1][23], 368015793);
  EXPECT_EQ(l.table_rows(1), 384016682);
  const EngramLayout tiny = compute_engram_layout(2, 4, 2, 400);
  EXPECT_EQ(tiny.primes[0], (std::vector<int64_t>{401, 409, 419, 421, 431, 433}));
  EXPECT_EQ(tiny.table_rows(1), 2712);
}

// Loads the tiny-a config with one field replaced and returns the error message.
std::string error_with(const std::string& key, const Json& value) {
  auto base = read_json_file(testing::data_dir() / "v41-tiny-a/checkpoint/config.json");
  EXPECT_TRUE(base.ok());
  Json j = *base;
  if (value.is_null() && key.front() == '-')
    j.erase(key.substr(1));
  else
    j[key] = value;
  auto r = parse_model_config(j, "cfg.json");
  EXPECT_FALSE(r.ok()) << key;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidConfig);
  EXPECT_NE(r.status().message().find("cfg.json"), std::string::npos);
  return r.status().message();
}

#define EXPECT_MENTIONS(msg, needle) EXPECT_NE((msg).find(needle), std::string::npos) << (msg)

TEST(ModelConfig, ValidationNamesTheField) {
  EXPECT_MENTIONS(error_with("compress_ratios", Json::array({0, 0, 2, 2, 4, 1, 1})), "'compress_ratios'");
  EXPECT_MENTIONS(error_with("compress_ratios", Json::array({0, 0, 2, 2, 4, 1, 1})), "[4] = 4");
  EXPECT_MENTIONS(error_with("compress_ratios", Json::array({0, 0, 2, 2, 1, 1})), "has 6 entries");
  EXPECT_MENTIONS(error_with("kv_source_layers", Json::array({2, 3})), "must include kv source 3");
  EXPECT_MENTIONS(error_with("kv_source_layers", Json::array({4})), "no source at or before compressed layer 2");
  EXPECT_MENTIONS(error_with("kv_source_layers", Json::array({2, 9})), "outside [0, 7)");
  EXPECT_MENTIONS(error_with("index_source_layers", Json::array({2, 4, 5, 5})), "strictly increasing");
  EXPECT_MENTIONS(error_with("index_source_layers", Json::array({2, 5})), "must include kv source 4");
  EXPECT_MENTIONS(error_with("compress_ratios", Json::array({0, 0, 2, 1, 1, 1, 1})), "would read kv source 2");
  EXPECT_MENTIONS(error_with("o_groups", 5), "'o_groups' = 5 must divide n_heads x head_dim = 512");
  EXPECT_MENTIONS(error_with("o_lora_rank", 12), "'o_lora_rank' x o_groups = 12 x 2 must be a multiple of 32");
  EXPECT_MENTIONS(error_with("dim", 200), "'dim' = 200 must be a multiple of 32");
  EXPECT_MENTIONS(error_with("dtype", "int4"), "'dtype' = \"int4\" is not one of");
  EXPECT_MENTIONS(error_with("expert_dtype", "nf4"), "expert_dtype");
  EXPECT_MENTIONS(error_with("score_func", "relu"), "score_func");
  EXPECT_MENTIONS(error_with("n_layers", "seven"), "'n_layers' must be an integer");
  EXPECT_MENTIONS(error_with("n_layers", 0), "'n_layers' must be > 0");
  EXPECT_MENTIONS(error_with("norm_topk_prob", 1), "'norm_topk_prob' must be true or false");
  EXPECT_MENTIONS(error_with("n_shared_experts", 2), "n_shared_experts");
  EXPECT_MENTIONS(error_with("n_activated_experts", 9), "exceeds n_routed_experts");
  EXPECT_MENTIONS(error_with("rope_head_dim", 33), "rope_head_dim");
  EXPECT_MENTIONS(error_with("candidate_source_layer", 6), "is not an index source");
  EXPECT_MENTIONS(error_with("candidate_topk_blocks", 2), "must be >= index_topk");
  EXPECT_MENTIONS(error_with("engram_num_embeddings", Json::array({2514, 2713})), "sum to 2712");
  EXPECT_MENTIONS(error_with("engram_num_embeddings", Json::array({2514})), "has 1 entries");
  EXPECT_MENTIONS(error_with("engram_layer_ids", Json::array({1, 40})), "engram_layer_ids");
  EXPECT_MENTIONS(error_with("colour", "blue"), "unknown field 'colour'");
  EXPECT_MENTIONS(error_with("kv_source_layers", Json::array({2, "4"})), "'kv_source_layers[1]' must be an integer");
}

// The probe's config without dim, and {}, were filled in with the test model's defaults and then
// reported as 672 (842) mis-shaped tensors: a missing required field is named instead.
TEST(ModelConfig, MissingRequiredFieldsAreNamed) {
  EXPECT_EQ(error_with("-dim", nullptr), "cfg.json: field 'dim' is missing");
  EXPECT_EQ(error_with("-n_layers", nullptr), "cfg.json: field 'n_layers' is missing");
  EXPECT_EQ(error_with("-compress_ratios", nullptr), "cfg.json: field 'compress_ratios' is missing");
  EXPECT_EQ(error_with("-swiglu_limit", nullptr), "cfg.json: field 'swiglu_limit' is missing");
  const auto empty = parse_model_config(Json::object(), "cfg.json");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().kind(), ErrorKind::kInvalidConfig);
  EXPECT_MENTIONS(empty.status().message(), "cfg.json: ");
  EXPECT_MENTIONS(empty.status().message(), " required fields are missing: 'dtype', 'vocab_size', 'dim', ");
  EXPECT_EQ(empty.status().message().find("'max_seq_len'"), std::string::npos) << empty.status().message();

  // HF style names the field as the file spells it.
  auto j = read_json_file(testing::data_dir() / "configs/v41_flash_hf.json");
  ASSERT_TRUE(j.ok());
  Json hf = *j;
  hf["text_config"].erase("hidden_size");
  EXPECT_EQ(parse_model_config(hf, "hf").status().message(), "hf: field 'dim' (HF 'hidden_size') is missing");
  hf = *j;
  hf["vision_config"].erase("patch_size");
  EXPECT_EQ(parse_model_config(hf, "hf").status().message(),
            "hf: field 'vision_patch_size' (HF 'vision_config.patch_size') is missing");
}

// What the release relies on defaults for stays optional: the runtime fields, gate_temp and
// norm_topk_prob (absent from the Flash config), and a feature's parameters while it is off.
TEST(ModelConfig, FieldsWithGenuineDefaultsStayOptional) {
  auto base = read_json_file(testing::data_dir() / "configs/v41_flash_inference.json");
  ASSERT_TRUE(base.ok());
  for (const char* field : {"max_batch_size", "max_seq_len", "temperature", "gate_temp", "norm_topk_prob",
                            "expert_dtype", "vision_max_wh_ratio"}) {
    Json j = *base;
    j.erase(field);
    EXPECT_TRUE(parse_model_config(j, "cfg.json").ok()) << field;
  }
  Json j = *base;
  j.erase("vision_dim");
  EXPECT_EQ(parse_model_config(j, "cfg.json").status().message(), "cfg.json: field 'vision_dim' is missing");
  j["vision_n_layers"] = 0;  // vision off: its parameters are not needed
  for (const char* field : {"vision_n_heads", "vision_inter_dim", "vision_patch_size", "image_token_id"})
    j.erase(field);
  EXPECT_TRUE(parse_model_config(j, "cfg.json").ok()) << parse_model_config(j, "cfg.json").status().message();
  // The fixtures (written by the reference, vision and DSpark off) leave those parameters out.
  EXPECT_TRUE(load_model_config(testing::data_dir() / "v41-tiny-a/checkpoint").ok());
}

TEST(ModelConfig, HuggingFaceChecks) {
  auto r = load_model_config(testing::data_dir() / "configs/v41_flash_hf.json");
  ASSERT_TRUE(r.ok());
  auto j = read_json_file(testing::data_dir() / "configs/v41_flash_hf.json");
  Json bad = *j;
  bad["quantization_config"]["weight_block_size"] = Json::array({128, 128});
  EXPECT_MENTIONS(parse_model_config(bad, "hf").status().message(), "weight_block_size");
  bad = *j;
  bad["text_config"]["num_key_value_heads"] = 8;
  EXPECT_MENTIONS(parse_model_config(bad, "hf").status().message(), "num_key_value_heads");
  bad = *j;
  bad["text_config"]["sliding_window"] = -1;
  EXPECT_MENTIONS(parse_model_config(bad, "hf").status().message(), "'window_size' must be > 0");
}

// The context as the release spells it (docs/context.md): the HF max_position_embeddings, the
// inference config's YaRN range, an explicit max_seq_len over both.
TEST(ModelConfig, ContextFromTheReleaseConfig) {
  const ModelConfig hf = load("configs/v41_flash_hf.json");
  EXPECT_EQ(hf.max_seq_len, 1048576);
  EXPECT_EQ(hf.max_position_embeddings, 1048576);
  EXPECT_EQ(hf.context_ceiling(), 1048576);
  const ModelConfig inf = load("configs/v41_flash_inference.json");  // no max_seq_len: 65536 x 16
  EXPECT_EQ(inf.max_seq_len, 1048576);
  EXPECT_EQ(inf.max_position_embeddings, 0);
  EXPECT_EQ(inf.context_ceiling(), 1048576);
  EXPECT_EQ(load("v41-tiny-a/checkpoint").max_seq_len, 4096 * 16);  // YaRN from 4096, factor 16

  auto j = read_json_file(testing::data_dir() / "configs/v41_flash_hf.json");
  ASSERT_TRUE(j.ok());
  Json set = *j;
  set["text_config"]["max_position_embeddings"] = 200000;  // a smaller stated range wins over YaRN's
  EXPECT_EQ(parse_model_config(set, "hf")->max_seq_len, 200000);
  set["max_seq_len"] = 8192;  // the runtime field, where a config sets it, decides
  auto explicit_len = parse_model_config(set, "hf");
  ASSERT_TRUE(explicit_len.ok());
  EXPECT_EQ(explicit_len->max_seq_len, 8192);
  EXPECT_EQ(explicit_len->context_ceiling(), 200000);
  set["text_config"]["max_position_embeddings"] = 0;
  EXPECT_MENTIONS(parse_model_config(set, "hf").status().message(), "'max_position_embeddings' must be > 0");
  Json no_yarn = *j;  // nothing stated, no YaRN: ModelArgs' default
  no_yarn["text_config"].erase("max_position_embeddings");
  no_yarn["text_config"]["rope_scaling"]["original_max_position_embeddings"] = 0;
  EXPECT_EQ(parse_model_config(no_yarn, "hf")->max_seq_len, 4096);
}

TEST(ModelConfig, SetContextStaysWithinWhatThePositionsCover) {
  ModelConfig c = load("configs/v41_flash_hf.json");
  ASSERT_TRUE(c.set_context(131072).ok());
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_EQ(c.context_ceiling(), 1048576);
  ASSERT_TRUE(c.set_context(1048576).ok());  // back up to what the model supports
  const Status over = c.set_context(1048577);
  EXPECT_EQ(over.kind(), ErrorKind::kInvalidArgument);
  EXPECT_MENTIONS(over.message(), "1 to 1048576 (max_position_embeddings = 1048576)");
  EXPECT_EQ(c.max_seq_len, 1048576);
  ModelConfig inf = load("configs/v41_flash_inference.json");
  EXPECT_MENTIONS(inf.set_context(2000000).message(), "YaRN: original_seq_len 65536 x rope_factor 16");
  ModelConfig tiny = load("v41-tiny-a/checkpoint");
  tiny.original_seq_len = 0;  // no YaRN: only the config's own max_seq_len is covered
  EXPECT_MENTIONS(tiny.set_context(tiny.max_seq_len + 1).message(), "no YaRN");
  EXPECT_TRUE(tiny.set_context(256).ok());
  EXPECT_FALSE(tiny.set_context(0).ok());
}

// Widths the reference takes that once were refused (spec §4 of issue 24): o_lora_rank needs only
// o_groups x o_lora_rank in whole act_quant groups, o_groups only to split n_heads x head_dim.
TEST(ModelConfig, AcceptsWhatTheReferenceAccepts) {
  auto base = read_json_file(testing::data_dir() / "v41-tiny-a/checkpoint/config.json");
  ASSERT_TRUE(base.ok());
  Json j = *base;
  j["o_lora_rank"] = 48;  // x 2 groups = 96
  EXPECT_TRUE(parse_model_config(j, "cfg").ok()) << parse_model_config(j, "cfg").status().to_string();
  j = *base;
  j["n_heads"] = 3;  // 3 x 128 in 2 groups of 192: a group holds part of a head
  EXPECT_TRUE(parse_model_config(j, "cfg").ok()) << parse_model_config(j, "cfg").status().to_string();
}

TEST(ModelConfig, MissingOrBrokenFile) {
  EXPECT_EQ(load_model_config("/nonexistent/config.json").status().kind(), ErrorKind::kNotFound);
  testing::TempDir dir;
  std::ofstream(dir.path() / "config.json") << "{\"dim\": ";
  EXPECT_EQ(load_model_config(dir.path()).status().kind(), ErrorKind::kCorruptFile);
}

}  // namespace
}  // namespace dsinfer
